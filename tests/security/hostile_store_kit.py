"""What a hostile cache writer does, as test helpers: plant manifests, refs and objects in a
store behind gpu-ci's back, then run the CLI's commands against it.

The store fixtures (a file store and a moto S3 store on 127.0.0.1, side by side) are the cache
tests' own, loaded from ``tests/cache/conftest.py`` under a private name: this folder has no
conftest of its own, and ``import conftest`` would pick whichever one pytest loaded last.
A test module re-exports the fixtures it uses (``from hostile_store_kit import store, env``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

_CACHE_TESTS = Path(__file__).resolve().parents[1] / "cache"
if str(_CACHE_TESTS) not in sys.path:
    sys.path.insert(0, str(_CACHE_TESTS))  # faultproxy and treeutil live there


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_fixtures = _load("hostile_store_cache_conftest", _CACHE_TESTS / "conftest.py")
aws_env = _fixtures.aws_env
moto_endpoint = _fixtures.moto_endpoint
store = _fixtures.store
env = _fixtures.env
proxy = _fixtures.proxy
cache_cmd = _fixtures.cache_cmd
new_bucket = _fixtures.new_bucket
StoreCase = _fixtures.StoreCase
CREDS = _fixtures.CREDS

from treeutil import leftovers, snapshot  # noqa: E402  (needs the path above)

__all__ = [
    "CREDS",
    "StoreCase",
    "aws_env",
    "cache_cmd",
    "env",
    "leftovers",
    "moto_endpoint",
    "new_bucket",
    "plant",
    "proxy",
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


def put_ref(store: StoreCase, quoted_key: str, digest: str, namespace: str = "default") -> None:
    """A ref under an object name of the attacker's choosing (already quoted)."""
    body = canonical({"format": 1, "key": quoted_key, "manifest": digest})
    store.put_raw(f"refs/{namespace}/{quoted_key}", body)


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
