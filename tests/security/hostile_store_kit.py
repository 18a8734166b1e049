"""What a hostile cache writer does, as test helpers: plant manifests, refs and objects in a
store behind gpu-ci's back, then run the CLI's commands against it.

The store fixtures (a file store and S3 stores on 127.0.0.1, side by side) are the cache
tests' own, from tests/cache/cache_fixtures.py: this folder's conftest.py offers them all but
the autouse ``aws_env``, which a module that wants fake credentials imports from here.
``moto_endpoint`` comes from tests/conftest.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

_CACHE_TESTS = Path(__file__).resolve().parents[1] / "cache"
if str(_CACHE_TESTS) not in sys.path:
    sys.path.insert(0, str(_CACHE_TESTS))  # the cache tests' helper modules live there

from cache_fixtures import aws_env, env, file_store, proxy, store  # noqa: E402  (path above)
from cache_testing import (  # noqa: E402
    CREDS,
    StoreCase,
    cache_cmd,
    new_bucket,
    next_store_second,
    record_retries,
)
from treeutil import leftovers, snapshot  # noqa: E402

from gpuci_testing import deep_folder, remove_deep  # noqa: E402  (re-exported)

__all__ = [
    "CREDS",
    "StoreCase",
    "aws_env",
    "cache_cmd",
    "deep_folder",
    "env",
    "file_store",
    "leftovers",
    "manifest_body",
    "new_bucket",
    "next_store_second",
    "plant",
    "proxy",
    "record_retries",
    "remove_deep",
    "replace_fails_on",
    "restore_to",
    "save_from",
    "snapshot",
    "store",
]

SAFE = "-_.~+=@,:"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plant(
    store: StoreCase,
    key: str,
    entries: list[dict[str, Any]],
    files: dict[str, bytes] | None = None,
    roots: list[dict[str, str]] | None = None,
    namespace: str = "default",
) -> str:
    """Write a manifest (and the blobs its files name) and a ref to it; returns its digest.

    File entries get ``size`` and ``sha256`` from ``files[path]`` unless given; each file's
    bytes go in as their own blob unless the entry names a ``pack``.
    """
    from urllib.parse import quote

    files = files or {}
    for entry in entries:
        if entry["type"] != "file":
            continue
        data = files.get(entry["path"], b"")
        entry.setdefault("size", len(data))
        entry.setdefault("mode", 0o644)
        entry.setdefault("sha256", sha(data))
        if data and "pack" not in entry:
            store.put_raw(f"blobs/sha256/{sha(data)[:2]}/{sha(data)}", data)
    body = canonical(
        {
            "format": 1,
            "key": key,
            "created": "",
            "producer": {},
            "roots": roots or [{"path": "t", "kind": "dir"}],
            "files": 0,
            "bytes": 0,
            "entries": entries,
        }
    )
    digest = sha(body)
    store.put_raw(f"manifests/{digest}.json", body)
    put_ref(store, quote(key, safe=SAFE), digest, namespace)
    return digest


def plant_models(store: StoreCase, **more: bytes) -> str:
    """Key ``k``: a model folder of ``sub/w.bin``, the files ``more`` names and ``z.bin`` (last,
    so a placement failing on it has placed the others)."""
    files = {"sub/w.bin": b"weights", **more, "z.bin": b"z"}
    entries = [{"type": "file", "root": 0, "path": path} for path in files]
    return plant(
        store, "k", [{"type": "dir", "root": 0, "path": "sub", "mode": 0o755}, *entries], files
    )


def put_ref(store: StoreCase, quoted_key: str, digest: str, namespace: str = "default") -> None:
    """A ref under an object name of the attacker's choosing (already quoted)."""
    body = canonical({"format": 1, "key": quoted_key, "manifest": digest})
    store.put_raw(f"refs/{namespace}/{quoted_key}", body)


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def save_from(store: StoreCase, env: dict[str, str], key: str, src: Path, **flags: str) -> Any:
    """``cache-weights save`` of ``src`` under ``key``, with more ``flags``: its Result."""
    return cache_cmd("save", {**store.flags(), "key": key, "path": str(src), **flags}, env)[0]


def restore_to(
    store: StoreCase, env: dict[str, str], key: str, *targets: Path, **flags: str
) -> Any:
    """``cache-weights restore`` of ``key`` into ``targets`` (one path line each), with more
    ``flags``: its Result."""
    paths = "\n".join(str(t) for t in targets)
    return cache_cmd("restore", {**store.flags(), "key": key, "path": paths, **flags}, env)[0]


def replace_fails_on(monkeypatch: Any, name: str) -> None:
    """Placing onto ``name`` (``os.replace``, or ``os.link`` where it was missing) fails with
    EIO (a merge failing midway), others work."""
    for call in ("replace", "link"):
        real = getattr(os, call)

        def failing(src: Any, dst: Any, *args: Any, real: Any = real, **kwargs: Any) -> None:
            if dst == name:
                raise OSError(errno.EIO, os.strerror(errno.EIO), name)
            real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, call, failing)


def manifest_body(**over: object) -> dict[str, object]:
    """An empty manifest's fields, ``over`` replacing any: the base of a hostile one."""
    body: dict[str, object] = {
        "format": 1,
        "key": "k",
        "created": "",
        "producer": {},
        "roots": [{"path": "t", "kind": "dir"}],
        "files": 0,
        "bytes": 0,
        "entries": [],
    }
    body.update(over)
    return body
