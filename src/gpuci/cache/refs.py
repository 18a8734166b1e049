"""Refs: ``refs/<namespace>/<key>`` names the manifest a key currently points at.

Refs are the only mutable objects in a store, so they are the only ones written with
conditions: ``If-None-Match: *`` to create, ``If-Match: <etag>`` to move. Two jobs saving one
key cannot both win, and a ref is written last, after every blob its manifest names exists.
``restore-keys`` is a prefix listing of refs (all pages), newest first. What a ref names is read
here too (:func:`fetch_manifest`): checked against its digest before it is parsed.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpuci import untrusted_json
from gpuci.cache import layout
from gpuci.cache import manifest as mf
from gpuci.cache.manifest import canonical_json, now_iso
from gpuci.cache.store import Store
from gpuci.errors import InputError, IntegrityError, StoreError
from gpuci.redact import excerpt

MAX_KEY = 512
# C0 and C1 control characters (and DEL): one regex scan, not a Python loop per character
# (a listing checks every key it names: 136,000 long keys took 25 s that way).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# A ref is about 200 bytes of JSON; one above this cap is refused unread (a hostile store
# cannot make a lookup hold a gigabyte).
MAX_REF = 64 << 10
# A restore-keys lookup keeps this many of a prefix's newest refs while the listing streams by:
# enough to step past refs deleted between the listing and their read (a prune running).
NEWEST = 16
# Warnings about refs whose names no save could write: the first few, then a count.
MAX_IGNORED = 10


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
    if _CONTROL.search(key):
        raise InputError(
            f"the cache {what} {escape(key)} holds control characters",
            hint=f"remove them from {what}",
        )
    if key in (".", ".."):
        raise InputError(
            f"the cache {what} {key!r} names a folder, not a key",
            hint=f"give {what} a name with at least one other character",
        )
    return key


def escape(text: str) -> str:
    """A key fit for one printed line: quoted, control characters and non-ASCII escaped, so a
    name from a listing cannot start a line (``::error::``) or fake one."""
    return "'" + text.encode("unicode_escape").decode("ascii").replace("'", "\\'") + "'"


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
    """A ref as read back from the store: untrusted (size, nesting, numbers, then types)."""
    try:
        raw = untrusted_json.parse_object(data, MAX_REF, "a ref")
    except untrusted_json.Unusable as exc:
        raise StoreError(
            f"ref {store.url}/{object_key} is not usable: {exc}",
            hint="delete the ref and save the key again",
        ) from None
    manifest = untrusted_json.text(raw, "manifest")
    if not layout.is_sha256(manifest):
        shown = excerpt(manifest, 80) if manifest else "nothing"
        raise StoreError(
            f"ref {store.url}/{object_key} names an invalid manifest '{shown}'",
            hint="delete the ref and save the key again",
        )
    return Ref(
        key=key,
        manifest=manifest,
        etag=etag,
        modified=modified,
        files=untrusted_json.count(raw, "files"),
        bytes=untrusted_json.count(raw, "bytes"),
        created=untrusted_json.text(raw, "created"),
    )


def manifest_of(data: bytes) -> str | None:
    """The manifest a ref's body names, or None when the body is unusable (prune's reading)."""
    try:
        name = untrusted_json.text(untrusted_json.parse_object(data, MAX_REF, "a ref"), "manifest")
    except untrusted_json.Unusable:
        return None
    return name if layout.is_sha256(name) else None


def ref_name(store: Store, namespace: str, key: str, what: str = "key") -> str:
    """The ref's object name, refused (exit 2) when the store cannot hold a name that long."""
    name = layout.ref_key(namespace, key)
    limit = store.name_limit
    if limit is not None and len(name.encode()) > limit:
        raise InputError(
            f"the cache {what} is {len(name.encode())} bytes as an object name in {store.url}, "
            f"over the {limit} bytes that store allows (non-ASCII characters take 6 bytes each "
            "once encoded)",
            hint=f"shorten the {what} (hash long parts, e.g. hashFiles())",
        )
    return name


def read(store: Store, namespace: str, key: str) -> Ref | None:
    object_key = ref_name(store, namespace, key)
    got = store.get(object_key, limit=MAX_REF)
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


def refs_under(
    store: Store, namespace: str, prefix: str = "", ignored: list[str] | None = None
) -> Iterator[RefInfo]:
    """Every ref whose key starts with ``prefix``, as the store lists them (all pages, lazily).

    Names from a listing are input like any other: a key that :func:`check_key` refuses (an
    encoded newline, a control character, ``..``) is left out, and a warning fit to print is
    added to ``ignored`` (the first :data:`MAX_IGNORED`, then one line counting the rest, so a
    listing of hostile names cannot grow the warnings without bound).
    """
    base = layout.refs_prefix(namespace)
    start = ref_name(store, namespace, prefix, "restore-keys prefix") if prefix else base
    refused = 0
    for item in store.list(start):
        key = layout.key_from_ref(namespace, item.key)
        try:
            check_key(key)
        except InputError as exc:
            refused += 1
            if ignored is not None and refused <= MAX_IGNORED:
                ignored.append(
                    f"ignored the ref {escape(item.key)} in {store.url}: {exc.message} "
                    "(a key no save could write; delete it)"
                )
            continue
        yield RefInfo(key, item.key, item.modified, item.size)
    if ignored is not None and refused > MAX_IGNORED:
        ignored.append(
            f"ignored {refused - MAX_IGNORED} more refs in {store.url} whose names no save "
            "could write; delete them"
        )


def listing(
    store: Store, namespace: str, prefix: str = "", ignored: list[str] | None = None
) -> list[RefInfo]:
    """Every ref whose key starts with ``prefix`` (all pages), newest first: for ``ls`` and
    prune, which look at every key. A restore needs only :func:`newest`."""
    found = list(refs_under(store, namespace, prefix, ignored))
    found.sort(key=_age, reverse=True)
    return found


def newest(
    store: Store, namespace: str, prefix: str, count: int, ignored: list[str] | None = None
) -> list[RefInfo]:
    """The ``count`` newest refs under ``prefix``, newest first, holding no more than that many
    while the listing streams by (a listing of millions of keys, or of endless pages, costs a
    restore time, never memory)."""
    return heapq.nlargest(count, refs_under(store, namespace, prefix, ignored), key=_age)


def _age(info: RefInfo) -> tuple[float, str]:
    return info.modified, info.key


def lookup(
    store: Store,
    namespace: str,
    key: str,
    restore_keys: list[str],
    ignored: list[str] | None = None,
) -> tuple[Ref, bool] | None:
    """(ref, exact): the exact key, else the newest match of the first prefix that matches.

    Each prefix's :data:`NEWEST` newest refs are tried in turn (a ref deleted between the
    listing and its read gives way to the next newest); a prefix whose newest all vanished
    that fast is listed once more.
    """
    exact = read(store, namespace, key)
    if exact is not None:
        return exact, True
    for prefix in restore_keys:
        for _ in range(2):
            infos = newest(store, namespace, prefix, NEWEST, ignored)
            for info in infos:
                ref = read(store, namespace, info.key)
                if ref is not None:  # deleted between list and read: try the next newest
                    return Ref(**{**ref.__dict__, "modified": info.modified}), False
            if len(infos) < NEWEST:
                break  # every match was tried
    return None


def write(store: Store, namespace: str, key: str, body: bytes, current: Ref | None) -> str:
    """Create (If-None-Match) or move (If-Match) the ref; ConflictError when someone raced us,
    on a store that ignores those conditions too, as far as reading back can tell
    (:mod:`gpuci.cache.conditional`)."""
    from gpuci.cache import conditional

    def now() -> tuple[str, str] | None:
        ref = read(store, namespace, key)
        return (ref.manifest, ref.etag) if ref is not None else None

    manifest = str(json.loads(body)["manifest"])
    etag = current.etag if current is not None else None
    return conditional.write_ref(store, ref_name(store, namespace, key), body, manifest, etag, now)


# ----- what a ref points at -------------------------------------------------------------------
def fetch_manifest(store: Store, digest: str) -> tuple[mf.Manifest, int]:
    """Fetch, check the hash against the name, parse and validate. Returns (manifest, bytes)."""
    got = store.get(layout.manifest_key(digest), limit=mf.MAX_MANIFEST)
    if got is None:
        raise StoreError(
            f"manifest {digest[:12]} named by the ref is missing from {store.url}",
            hint="the store was pruned or damaged; save the key again",
        )
    data = got[0]
    mf.check_size(len(data), digest[:12])  # before hashing: the store read at most cap + 1
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise IntegrityError(
            f"manifest {digest[:12]} in {store.url} hashes to {actual[:12]}",
            hint="the store holds a corrupt manifest; delete it and save the key again",
        )
    return mf.parse(data, digest[:12]), len(data)


def fetch_by_digest(store: Store, digest: str) -> tuple[mf.Manifest, int]:
    """A manifest asked for by digest (a provenance record, a pin): absent is bad input."""
    if store.head(layout.manifest_key(digest)) is None:
        raise InputError(
            f"manifest {digest[:12]} is not in {store.url}",
            hint="check store; a manifest no key names is pruned unless pinned "
            "(cache-weights pin --manifest ... --reason ...)",
        )
    return fetch_manifest(store, digest)
