"""Render Mermaid source with Mermaid itself (npm ``mermaid``) in headless Chromium (Debian
``chromium``), as GitHub and GitLab do in the browser: the test's proof that a chart parses.

One :class:`Browser` serves every page of a test module: Chromium starts once and is driven
over its DevTools pipe (``--remote-debugging-pipe``: fds 3 and 4, no port, no websocket
library), each chart one page load in it. A Chromium per chart cost 8-10 s a test on 2 cores.

``scripts/install-clients.sh`` installs both (``.clients/mermaid`` and ``apt-get install
chromium``); :func:`missing` says what is absent, so the tests skip with the line to run.
"""

from __future__ import annotations

import base64
import fcntl
import html
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MERMAID_JS = REPO / ".clients" / "mermaid" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
WAIT_S = 120  # a hang guard for one page, never a budget: a page takes about a second

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>pending</title>
<style>body {{ margin: 0; background: #fff; font-family: sans-serif; }}</style>
<script src="mermaid.min.js"></script></head>
<body><pre id="source">{source}</pre>
<script>
mermaid.initialize({{ startOnLoad: false, securityLevel: "strict", theme: "default" }});
mermaid.render("chart", document.getElementById("source").textContent)
  .then(({{ svg }}) => {{ document.body.innerHTML = svg; document.title = "rendered"; }})
  .catch((e) => {{ document.title = "error: " + String(e && e.message || e); }});
</script></body></html>
"""


# A page as a forge shows a comment or a job summary: Markdown made HTML (tables, <details>),
# each ```mermaid block drawn in place, about as wide as GitHub's comment column.
_DOC = """<!doctype html>
<html><head><meta charset="utf-8"><title>pending</title>
<style>
body {{ margin: 0; background: #fff; color: #1f2328; font: 14px/1.5 sans-serif; }}
main {{ width: 780px; padding: 12px 16px; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
td, th {{ border: 1px solid #d1d9e0; padding: 3px 10px; }}
code {{ background: #eff1f3; padding: 1px 4px; border-radius: 4px; font-size: 12px; }}
pre.mermaid {{ background: none; }}
svg {{ max-width: 100%; height: auto; }}
</style>
<script src="mermaid.min.js"></script></head>
<body><main>{body}</main>
<script>
mermaid.initialize({{ startOnLoad: false, securityLevel: "strict", theme: "default" }});
mermaid.run({{ querySelector: "pre.mermaid" }})
  .then(() => {{ document.title = "rendered " + document.body.scrollHeight; }})
  .catch((e) => {{ document.title = "error: " + String(e && e.message || e); }});
</script></body></html>
"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing_markdown() -> str:
    """Why a whole page cannot be rendered here (Markdown too), or "" when it can."""
    try:
        import markdown_it  # noqa: F401
    except ImportError:
        return "markdown-it-py not installed (pip install -e '.[dev]')"
    return missing()


def missing() -> str:
    """Why rendering cannot run here, or "" when it can."""
    if not chromium():
        return "chromium not installed (scripts/install-clients.sh: apt-get install chromium)"
    if not MERMAID_JS.is_file():
        return "npm mermaid not installed (scripts/install-clients.sh: .clients/mermaid)"
    return ""


@dataclass
class Rendered:
    title: str  # "rendered", or "error: <Mermaid's message>"
    svg: str
    texts: list[str] = field(default_factory=list)  # every text node, as a reader sees it
    classes: list[str] = field(default_factory=list)  # every class attribute in the SVG
    dom: str = ""  # the whole page as the browser built it


class _Walk(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.classes: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.classes += [v or "" for k, v in attrs if k == "class"]

    def handle_endtag(self, tag: str) -> None:
        if self.tags and self.tags[-1] == tag:
            self.tags.pop()

    def handle_data(self, data: str) -> None:
        if data.strip() and "style" not in self.tags[-1:]:
            self.texts.append(data.strip())


def walk_texts(svg: str) -> list[str]:
    """Every text node of ``svg``, as a reader sees it."""
    walk = _Walk()
    walk.feed(svg)
    return walk.texts


def _markdown_page(body: str) -> str:
    """A comment or summary's Markdown as the forge's HTML, each ```mermaid block left for
    Mermaid to draw in place."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    fence = md.renderer.rules["fence"]

    def mermaid_fence(renderer, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        token = tokens[idx]
        if token.info.strip() == "mermaid":
            return f'<pre class="mermaid">{html.escape(token.content)}</pre>\n'
        return fence(tokens, idx, options, env)

    md.add_render_rule("fence", mermaid_fence)
    return _DOC.format(body=md.render(body))


class Browser:
    """One headless Chromium, many pages: ``with Browser() as browser: browser.render(...)``."""

    def __init__(self) -> None:
        binary = chromium()
        assert binary, missing()
        self._tmp = tempfile.TemporaryDirectory(prefix="gpuci-mermaid-")
        self.folder = Path(self._tmp.name)
        shutil.copyfile(MERMAID_JS, self.folder / "mermaid.min.js")
        read_end, self._commands = os.pipe()
        self._answers, write_end = os.pipe()
        # Above fd 4, so that placing them on 3 and 4 in the child cannot overwrite each other.
        theirs = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (read_end, write_end)]
        for fd in (read_end, write_end):
            os.close(fd)

        def wire() -> None:  # Chromium reads commands on fd 3 and answers on fd 4
            os.dup2(theirs[0], 3)
            os.dup2(theirs[1], 4)

        self._log = (self.folder / "chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.folder / 'profile'}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            pass_fds=(3, 4),
            preexec_fn=wire,
        )
        for fd in theirs:
            os.close(fd)
        self._buffer = b""
        self._last_id = 0
        self._pages = 0
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        attached = self._call("Target.attachToTarget", targetId=target, flatten=True)
        self._session = attached["sessionId"]

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End Chromium (and every process it started) and remove its folder."""
        try:
            self._call("Browser.close", timeout=10)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._commands, self._answers):
            os.close(fd)
        self._log.close()
        self._tmp.cleanup()

    def render(
        self, source: str, screenshot: Path | None = None, size: str = "760,420"
    ) -> Rendered:
        """Render ``source``; with ``screenshot``, also save the page as a PNG there."""
        width, height = (int(n) for n in size.split(","))
        page = _PAGE.format(source=html.escape(source))
        found = self._load(page, width, height)
        if screenshot is not None:
            self._screenshot(screenshot, width, height)
        return found

    def render_markdown(
        self, body: str, screenshot: Path | None = None, width: int = 812
    ) -> Rendered:
        """Render a whole comment or summary (Markdown with ```mermaid blocks) as a reader sees
        it; with ``screenshot``, save the whole page, as tall as it is, as a PNG there."""
        found = self._load(_markdown_page(body), width, 600)
        height = re.match(r"rendered (\d+)", found.title)
        if screenshot is not None and height:
            self._screenshot(screenshot, width, int(height.group(1)) + 4)
        return found

    def _load(self, page_html: str, width: int, height: int) -> Rendered:
        """Open ``page_html`` at that viewport and wait until Mermaid settles its title."""
        self._pages += 1
        page = self.folder / f"page-{self._pages}.html"  # a new URL: never the last page's title
        page.write_text(page_html, encoding="utf-8")
        self._viewport(width, height)
        self._page("Page.navigate", url=page.as_uri())
        probe = "location.href + '\\n' + document.title"
        deadline = time.monotonic() + WAIT_S
        title = f"no page: still pending after {WAIT_S} s"
        while time.monotonic() < deadline:
            href, _, now = self._evaluate(probe).partition("\n")
            if href == page.as_uri() and now not in ("", "pending"):  # "" while it parses
                title = now
                break
            time.sleep(0.05)
        dom = self._evaluate("document.documentElement.outerHTML")
        svg = re.search(r"<svg.*</svg>", dom, flags=re.S)  # every chart on the page
        walk = _Walk()
        walk.feed(svg.group(0) if svg else "")
        return Rendered(title, svg.group(0) if svg else "", walk.texts, walk.classes, dom)

    def _screenshot(self, path: Path, width: int, height: int) -> None:
        self._viewport(width, height)
        shot = self._page("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    def _viewport(self, width: int, height: int) -> None:
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self._page("Emulation.setDeviceMetricsOverride", **metrics)

    def _evaluate(self, expression: str) -> str:
        answer = self._page("Runtime.evaluate", expression=expression, returnByValue=True)
        return str(answer["result"].get("value", ""))

    def _page(self, method: str, **params: object) -> dict:
        return self._call(method, session=self._session, **params)

    def _call(
        self, method: str, session: str | None = None, timeout: float = WAIT_S, **params: object
    ) -> dict:
        """Send one DevTools command and return its result (events in between are dropped)."""
        self._last_id += 1
        message: dict[str, object] = {"id": self._last_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._commands, data) :]
        deadline = time.monotonic() + timeout
        while True:
            answer = json.loads(self._next_message(deadline))
            if answer.get("id") == self._last_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def _next_message(self, deadline: float) -> bytes:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer; its log: " + self._tail())
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe; its log: " + self._tail())
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return message

    def _tail(self) -> str:
        self._log.flush()
        return (self.folder / "chromium.log").read_text(errors="replace")[-300:]
