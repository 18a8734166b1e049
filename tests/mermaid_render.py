"""Render Mermaid source with Mermaid itself (npm ``mermaid``) in headless Chromium (Debian
``chromium``), as GitHub and GitLab do in the browser: the test's proof that a chart parses.

``scripts/install-clients.sh`` installs both (``.clients/mermaid`` and ``apt-get install
chromium``); :func:`missing` says what is absent, so the tests skip with the line to run.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
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
    "--virtual-time-budget=15000",
)

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


def render(source: str, screenshot: Path | None = None, size: str = "760,420") -> Rendered:
    """Render ``source``; with ``screenshot``, also save the page as a PNG there."""
    return _run(_PAGE.format(source=html.escape(source)), screenshot, size)


def render_markdown(body: str, screenshot: Path | None = None, width: int = 812) -> Rendered:
    """Render a whole comment or summary (Markdown with ```mermaid blocks) as a reader sees
    it; with ``screenshot``, save the whole page, as tall as it is, as a PNG there."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    fence = md.renderer.rules["fence"]

    def mermaid_fence(renderer, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        token = tokens[idx]
        if token.info.strip() == "mermaid":
            return f'<pre class="mermaid">{html.escape(token.content)}</pre>\n'
        return fence(tokens, idx, options, env)

    md.add_render_rule("fence", mermaid_fence)
    page = _DOC.format(body=md.render(body))
    first = _run(page, None, "")
    height = re.match(r"rendered (\d+)", first.title)
    if screenshot is None or not height:
        return first
    return _run(page, screenshot, f"{width},{int(height.group(1)) + 4}")


def _run(page_html: str, screenshot: Path | None, size: str) -> Rendered:
    browser = chromium()
    assert browser, missing()
    with tempfile.TemporaryDirectory(prefix="gpuci-mermaid-") as tmp:
        folder = Path(tmp)
        shutil.copyfile(MERMAID_JS, folder / "mermaid.min.js")
        page = folder / "chart.html"
        page.write_text(page_html, encoding="utf-8")
        base = [browser, *FLAGS, f"--user-data-dir={folder / 'profile'}"]
        proc = subprocess.run(
            [*base, "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        dom = proc.stdout
        if screenshot is not None:
            subprocess.run(
                [*base, f"--window-size={size}", f"--screenshot={screenshot}", page.as_uri()],
                capture_output=True,
                timeout=180,
                check=False,
            )
    title = re.search(r"<title>(.*?)</title>", dom, flags=re.S)
    svg = re.search(r"<svg.*</svg>", dom, flags=re.S)  # every chart on the page, first to last
    walk = _Walk()
    walk.feed(svg.group(0) if svg else "")
    return Rendered(
        html.unescape(title.group(1)) if title else "no page: " + json.dumps(proc.stderr[-300:]),
        svg.group(0) if svg else "",
        walk.texts,
        walk.classes,
        dom,
    )
