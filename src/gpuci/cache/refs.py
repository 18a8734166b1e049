"""Refs: ``refs/<namespace>/<key>`` names the manifest a key currently points at.

Refs are the only mutable objects in a store, so they are the only ones written with
conditions: ``If-None-Match: *`` to create, ``If-Match: <etag>`` to move. Two jobs saving one
key cannot both win, and a ref is written last, after every blob its manifest names exists.
``restore-keys`` is a prefix listing of refs (all pages), newest first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gpuci.cache import layout
from gpuci.cache.manifest import canonical_json, now_iso
from gpuci.cache.store import Store
from gpuci.errors import InputError, StoreError
from gpuci.redact import excerpt

MAX_KEY = 512


@dataclass(frozen=True)
class Ref:
    key: str
    manifest: str
    etag: str = ""
    modified: float = 0.0
    files: int = 0
    bytes: int = 0
    created: str = ""


def check_key(key: str, what: str = "key") -> str:
    if not key or not key.strip():
        raise InputError(f"the cache {what} is empty", hint=f"set {what} to a non-empty string")
    if len(key) > MAX_KEY:
        raise InputError(
            f"the cache {what} is {len(key)} characters, over {MAX_KEY}",
            hint=f"shorten the {what} (hash long parts, e.g. hashFiles())",
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise InputError(
            f"the cache {what} {key!r} holds control characters", hint=f"remove them from {what}"
        )
    return key


def ref_body(key: str, manifest: str, files: int, size: int) -> bytes:
    return canonical_json(
        {
            "format": layout.FORMAT_VERSION,
            "key": key,
            "manifest": manifest,
            "files": files,
            "bytes": size,
            "created": now_iso(),
        }
    )


def _parse(store: Store, object_key: str, data: bytes, etag: str, modified: float, key: str) -> Ref:
    try:
        raw = json.loads(data)
        manifest = str(raw["manifest"])
    except (ValueError, KeyError, TypeError):
        raise StoreError(
            f"ref {store.url}/{object_key} is not valid JSON naming a manifest",
            hint="delete the ref and save the key again",
        ) from None
    if not layout.is_sha256(manifest):
        raise StoreError(
            f"ref {store.url}/{object_key} names an invalid manifest '{excerpt(manifest, 80)}'",
            hint="delete the ref and save the key again",
        )
    return Ref(
        key=key,
        manifest=manifest,
        etag=etag,
        modified=modified,
        files=int(raw.get("files", 0) or 0),
        bytes=int(raw.get("bytes", 0) or 0),
        created=str(raw.get("created", "")),
    )


def read(store: Store, namespace: str, key: str) -> Ref | None:
    object_key = layout.ref_key(namespace, key)
    got = store.get(object_key)
    if got is None:
        return None
    data, etag = got
    return _parse(store, object_key, data, etag, 0.0, key)


@dataclass(frozen=True)
class RefInfo:
    key: str
    object_key: str
    modified: float
    size: int


def listing(store: Store, namespace: str, prefix: str = "") -> list[RefInfo]:
    """Every ref whose key starts with ``prefix`` (all pages), newest first."""
    base = layout.refs_prefix(namespace)
    found = [
        RefInfo(layout.key_from_ref(namespace, item.key), item.key, item.modified, item.size)
        for item in store.list(layout.ref_key(namespace, prefix) if prefix else base)
    ]
    found.sort(key=lambda r: (r.modified, r.key), reverse=True)
    return found


def lookup(
    store: Store, namespace: str, key: str, restore_keys: list[str]
) -> tuple[Ref, bool] | None:
    """(ref, exact): the exact key, else the newest match of the first prefix that matches."""
    exact = read(store, namespace, key)
    if exact is not None:
        return exact, True
    for prefix in restore_keys:
        for info in listing(store, namespace, prefix):
            ref = read(store, namespace, info.key)
            if ref is not None:  # deleted between list and read: try the next newest
                return Ref(**{**ref.__dict__, "modified": info.modified}), False
    return None


def write(store: Store, namespace: str, key: str, body: bytes, current: Ref | None) -> str:
    """Create (If-None-Match) or move (If-Match) the ref; ConflictError when someone raced us."""
    object_key = layout.ref_key(namespace, key)
    if current is None:
        return store.put_if_absent(object_key, body)
    return store.put_if_match(object_key, body, current.etag)
