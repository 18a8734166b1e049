"""What a smoking pod may be given to install gpu-ci from, built offline for the pods tests.

A source archive or git repository holds this checkout's ``src/gpuci`` and a ``requirements.lock``
that pins one tiny wheel (``gpucitoy``) by its sha256, found through ``PIP_FIND_LINKS`` with
``PIP_NO_INDEX`` set (:func:`offline_pip`): pip installs exactly what a lock pins, as on a pod,
without a network. A wheel of gpu-ci holds no lock.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import gpuci
from loopback_http import JsonAPIHandler, LoopbackHTTPServer

TOY = "gpucitoy"
TOY_WHEEL = f"{TOY}-1.0-py3-none-any.whl"


def wheel(path: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A pure-Python wheel at ``path`` holding ``files`` (no dependencies), pip-installable."""
    meta = f"{name}-{version}.dist-info"
    entries = {
        **files,
        f"{meta}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{meta}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as whl:
        for entry, data in entries.items():
            whl.writestr(
                zipfile.ZipInfo(entry, (2020, 1, 1, 0, 0, 0)), data
            )  # same bytes each time
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{entry},sha256={digest.decode()},{len(data)}")
        record.append(f"{meta}/RECORD,,")
        whl.writestr(zipfile.ZipInfo(f"{meta}/RECORD", (2020, 1, 1, 0, 0, 0)), "\n".join(record))
    return path


def gpuci_files() -> dict[str, bytes]:
    """This checkout's gpu-ci, as the files of a wheel or a source tree's ``src/``."""
    src = Path(gpuci.__file__).parent
    return {f"gpuci/{p.relative_to(src)}": p.read_bytes() for p in src.rglob("*.py")}


def pinned(path: Path) -> str:
    """``path`` as a pip URL pinned by its sha256."""
    return f"{path.as_uri()}#sha256={hashlib.sha256(path.read_bytes()).hexdigest()}"


def offline_pip(where: Path) -> dict[str, str]:
    """The env under which pip finds the toy wheel and nothing else (no index)."""
    links = where / "links"
    links.mkdir(exist_ok=True)
    wheel(links / TOY_WHEEL, TOY, "1.0", {f"{TOY}.py": b"PINNED = True\n"})
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links)}


def toy_lock(where: Path, tampered: bool = False) -> str:
    """A requirements.lock pinning the toy wheel :func:`offline_pip` made, with its hash (one
    that is not its bytes' when ``tampered``)."""
    digest = hashlib.sha256((where / "links" / TOY_WHEEL).read_bytes()).hexdigest()
    return f"{TOY}==1.0 \\\n    --hash=sha256:{'0' * 64 if tampered else digest}\n"


def source_tree(where: Path, lock: str) -> Path:
    """gpu-ci's source as GitHub's archive holds it: one folder, its lock and ``src/gpuci``."""
    root = where / "gpu-ci-0123456"
    shutil.rmtree(root, ignore_errors=True)
    for name, data in gpuci_files().items():
        (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "src" / name).write_bytes(data)
    (root / "requirements.lock").write_text(lock)
    return root


def source_archive(where: Path, lock: str) -> Path:
    """:func:`source_tree` as a ``.tar.gz``."""
    root = source_tree(where / "tree", lock)
    path = where / "gpu-ci.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    return path


def source_repository(where: Path, lock: str) -> str:
    """:func:`source_tree`'s content committed to a git repository: ``git+file://...@SHA``."""
    root = source_tree(where / "repo", lock)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=60)
    subprocess.run([*git, "add", "-A"], check=True, timeout=60)
    subprocess.run([*git, "commit", "-qm", "gpu-ci"], check=True, timeout=60)
    sha = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()
    return f"git+{root.as_uri()}@{sha}"


@contextlib.contextmanager
def served(path: Path, user: str, password: str) -> Iterator[tuple[str, list[str]]]:
    """``path`` served over HTTP on 127.0.0.1 only with Basic ``user:password`` (403 without):
    the URL's ``scheme://host:port`` and every Authorization header the server was sent."""
    seen: list[str] = []
    want = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class Handler(JsonAPIHandler):
        def do_GET(self) -> None:  # the name http.server calls
            seen.append(self.headers.get("Authorization") or "")
            ok = seen[-1] == want
            self._reply(200 if ok else 403, path.read_bytes() if ok else b"no")

    with LoopbackHTTPServer(Handler) as server:
        yield f"http://127.0.0.1:{server.port}", seen
