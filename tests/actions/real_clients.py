"""Drive the real CI clients (act, gitlab-ci-local) against a throw-away user project.

Both run on this machine without Docker: act in host mode (``-self-hosted`` platforms),
gitlab-ci-local with the shell executor. scripts/dev.sh installs them (act from the dev extra,
gitlab-ci-local and its Node 22 under .clients/ by scripts/install-clients.sh); a test that
needs one skips, naming why, only when it is not installed.

What a user's repository holds is rebuilt per test in a temporary git repository: the example
workflow or template, ``examples/train_tiny.py`` and whatever the example expects to find.
gpu-ci itself is exported from this checkout (tracked and new files, as ``git archive`` of the
working tree would give) and stands in for ``my-org/gpu-ci@v1``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuci_testing import REPO, clean_env

STUBS = Path(__file__).with_name("act_stubs")
NODE_BIN = REPO / ".clients" / "node" / "node_modules" / ".bin"
# The actions act cannot download here, each replaced by a tiny local stand-in (see act_stubs/).
# Every ref the examples and the generated actions use is listed: act then never clones.
STAND_INS = {
    "actions/setup-python": ("a26af69be951a213d495a4c3e4e4022e16d87065", "v5", "v6"),
    "actions/upload-artifact": ("v4", "v6"),
    "actions/attest": ("v2",),
}


def act_binary() -> Path | None:
    found = Path(sys.executable).parent / "act"
    return found if found.is_file() else None


def gitlab_ci_local() -> tuple[Path | None, str]:
    """(the binary, why not) for gitlab-ci-local with its Node 22 and rsync."""
    binary = NODE_BIN / "gitlab-ci-local"
    if not binary.is_file() or not (NODE_BIN / "node").is_file():
        return None, "gitlab-ci-local is not installed (scripts/install-clients.sh: npm failed?)"
    if shutil.which("rsync") is None:
        return None, "rsync is missing (gitlab-ci-local's --shell-isolation needs it)"
    return binary, ""


# What no gpu-ci action reads: act tars the whole local repository for every ``uses:`` of it,
# so the act tests export gpu-ci without these (over half its files and bytes).
NOT_USED_BY_ACTIONS = ("docs/", "tests/")


def export_gpuci(dest: Path, *only: str, leave_out: tuple[str, ...] = ()) -> Path:
    """This checkout's files (tracked and untracked, not ignored) copied to ``dest``: all of
    them, or those under the paths ``only`` names, but those under the folders ``leave_out``
    names."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *only],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        if os.fsdecode(name).startswith(leave_out):
            continue
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


# What a job uses of gpu-ci's source archive: bootstrap.sh, the lock and src/ (and what makes it
# pip-installable, a smoking pod's GPUCI_PACKAGE). The tests, docs and examples, more than half
# of the bytes, would only be downloaded, hashed and unpacked again by every job of a pipeline.
INSTALLED = ("scripts", "src", "requirements.lock", "pyproject.toml", "README.md")


def pinned_source(root: Path) -> tuple[str, str]:
    """(GPUCI_SOURCE, GPUCI_SOURCE_SHA256) for the GitLab templates' install: this checkout's
    INSTALLED files as GitHub's archive of a commit (``gpu-ci-<commit>/`` inside), under
    ``root``."""
    tree = export_gpuci(root / "gpu-ci-0123abc", *INSTALLED)
    archive = root / "0123abc.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:  # level 9: 3x the CPU
        tar.add(tree, arcname=tree.name)
    return archive.as_uri(), hashlib.sha256(archive.read_bytes()).hexdigest()


def make_project(root: Path, files: dict[str, str | Path], tree: Path | None = None) -> Path:
    """A user's repository: a git repo on branch main with an origin, holding ``files``
    (and a copy of ``tree``, when given)."""
    if tree is not None:
        shutil.copytree(tree, root)
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy2(content, target)
        else:
            target.write_text(content)
    git = ["git", "-c", "user.email=dev@example.com", "-c", "user.name=dev"]
    for args in (
        ["init", "-q", "-b", "main"],
        ["remote", "add", "origin", "https://gitlab.example.com/my-org/trainer.git"],
        ["add", "-A"],
        ["commit", "-q", "-m", "init"],
    ):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    return root


def download_caches() -> dict[str, str]:
    """The developer's own download caches (content-addressed, safe to share), for a job with a
    HOME of its own: the venvs it builds (bootstrap.sh's uv, the templates' pip) then install
    without downloading again."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR") or str(cache / "uv"),
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or str(cache / "pip"),
        # pip byte-compiles every module it installs (train-gated's numpy: over half its CPU);
        # only the few a job imports are ever read, and Python compiles those as it imports.
        "PIP_COMPILE": "0",
    }


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: the dev venv (python, pip, uv) first on PATH, its own HOME."""
    path = os.pathsep.join([str(NODE_BIN), str(Path(sys.executable).parent), os.environ["PATH"]])
    home.mkdir(parents=True, exist_ok=True)
    return clean_env(PATH=path, HOME=str(home), NO_COLOR="1", **download_caches(), **extra)


def run_act(
    project: Path,
    gpuci: Path,
    workflow: str,
    tmp: Path,
    *args: str,
    event: str = "push",
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """act run once on ``event`` in ``project``, in host mode and offline: every action it
    would download is a local folder, and it never clones one (asserted). ``env`` goes to the
    job; act's cache and home are under ``tmp``."""
    binary = act_binary()
    assert binary is not None
    cmd = [
        str(binary),
        event,
        "-W",
        workflow,
        "-P",
        "ubuntu-latest=-self-hosted",
        "-P",
        "gpu-large=-self-hosted",
        "-P",  # gpu-runner.yml's train, routed by its run's label alone (RUN_ID 4242 there)
        "run-4242=-self-hosted",
        "--action-offline-mode",
        "--no-cache-server",
        "--action-cache-path",
        str(tmp / "act-cache"),
        "--local-repository",
        f"my-org/gpu-ci@v1={gpuci}",
    ]
    for repo, refs in STAND_INS.items():
        for ref in refs:
            cmd += ["--local-repository", f"{repo}@{ref}={STUBS / repo.split('/')[1]}"]
    for key, value in {"PYTHONPATH": str(STUBS / "runner_env"), **(env or {})}.items():
        cmd += ["--env", f"{key}={value}"]
    done = subprocess.run(
        [*cmd, *args],
        cwd=project,
        env=client_env(tmp / "act-home", ACT_DISABLE_VERSION_CHECK="1"),  # no call home
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    text = done.stdout + done.stderr
    # Offline for real: act never clones an action or pulls an image.
    assert "git clone" not in text and "Unable to clone" not in text, text[-3000:]
    return done


@contextmanager
def http_ok_server(answers: dict[str, object] | None = None) -> Iterator[str]:
    """A 127.0.0.1 server standing in for a pod's proxy URL: 200 and JSON to every request,
    ``answers[path suffix]`` where one matches (e.g. an OpenAI-style ``/v1/models``)."""

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            found = next(
                (v for k, v in (answers or {}).items() if self.path.endswith(k)), {"ok": True}
            )
            body = json.dumps(found).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# What act's log says of a step it ran: "[w.yml/plan] ✅  Success - Main memory from env".
_RAN = re.compile(r"\]\s+\S*\s*(Success|Failure) - Main (.+?)(?: \[[\d.]+\w*\])?\s*$", re.M)
# The outcome act must show for each verdict of a plan (a plain ``run`` step and another
# project's action are not judged; ``conditional`` or ``not-evaluated`` is a disagreement).
PLANNED_OUTCOME = {
    "ok": "Success",
    "may-fail": "Success",
    "would-fail": "Failure",
    "skipped": "not run",
}


def plan_disagreements(steps: list[dict], log: str) -> list[str]:
    """Each step of dry-run's JSON ``steps`` whose verdict act's ``log`` contradicts."""
    ran = {name.strip(): outcome for outcome, name in _RAN.findall(log)}
    wrong = []
    for step in steps:
        if step["verdict"] in ("run", "other-action"):
            continue
        expected = PLANNED_OUTCOME.get(step["verdict"], "?")
        got = ran.get(step["name"], "not run")
        if expected != got:
            wrong.append(f"{step['name']}: planned {step['verdict']}, act: {got}")
    return wrong
