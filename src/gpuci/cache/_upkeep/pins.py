"""Pins: ``pins/<sha256>.json`` keeps a manifest, and every blob and pack it reaches, from prune.

Keys move and prune deletes what no key names, so a model's provenance, which records the
dataset's manifest digest, would point at nothing a month later. A pin names the manifest
itself: prune counts it as named whatever the refs say. Pins are global to the store (not per
namespace), written whole with a plain put (pinning again rewrites the reason), and only ever
add protection: a pin that is malformed still protects the manifest its object name names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpuci import untrusted_json
from gpuci.cache import _layout as layout
from gpuci.cache._common import store_from
from gpuci.cache._format import manifest as mf
from gpuci.cache._format.refs import fetch_by_digest
from gpuci.cache._stores.base import ObjectInfo, Store
from gpuci.cache._stores.file import LocalStore
from gpuci.cache._upkeep.options import PinInputs, UnpinInputs
from gpuci.errors import InputError, StoreError
from gpuci.ranged._pool import parallel
from gpuci.runtime import Result, Runtime
from gpuci.units import human_bytes

__all__ = [
    "MAX_PIN",
    "MAX_REASON",
    "Pin",
    "check_reason",
    "data_keys",
    "describe_pin",
    "missing_data",
    "pin_manifest",
    "pinned",
    "read_all",
    "refresh_age",
    "run_pin",
    "run_unpin",
]

MAX_PIN = 64 << 10  # a pin is a few hundred bytes; a larger one is not read
MAX_REASON = 500


@dataclass(frozen=True)
class Pin:
    manifest: str
    reason: str
    created: str
    modified: float
    producer: dict[str, str]


def data_keys(manifest: mf.Manifest) -> set[str]:
    """The blob and pack keys a manifest's files live in."""
    return {
        layout.pack_key(e.pack) if e.pack else layout.blob_key(e.sha256)
        for e in manifest.files
        if e.size
    }


def pinned(store: Store) -> set[str]:
    """Digests of every pinned manifest, from the object names alone (one listing)."""
    out: set[str] = set()
    for item in store.list(f"{layout.PINS}/"):
        digest = item.key.rsplit("/", 1)[-1].removesuffix(".json")
        if layout.is_sha256(digest):
            out.add(digest)
    return out


def read_all(store: Store) -> list[Pin]:
    """Every pin with its reason, newest first; an unreadable body keeps its digest."""
    items = [
        i
        for i in store.list(f"{layout.PINS}/")
        if layout.is_sha256(i.key.rsplit("/", 1)[-1].removesuffix(".json"))
    ]

    def read(item: Any) -> Pin:
        digest = item.key.rsplit("/", 1)[-1].removesuffix(".json")
        raw: dict[str, Any] = {}
        got = store.get(item.key, limit=MAX_PIN)
        if got is not None:
            try:  # a pin that cannot be read still protects its manifest, and lists by name
                raw = untrusted_json.parse_object(got[0], MAX_PIN, "a pin")
            except untrusted_json.Unusable:
                raw = {}
        return Pin(
            manifest=digest,
            reason=untrusted_json.text(raw, "reason", "(unreadable pin)")[:MAX_REASON],
            created=untrusted_json.text(raw, "created"),
            modified=item.modified,
            producer=untrusted_json.mapping(raw, "producer"),
        )

    return sorted(parallel(read, items, 8), key=lambda p: p.modified, reverse=True)


def check_reason(text: Any) -> str:
    """The pin's reason, stripped; InputError when empty, too long or not one printable line."""
    reason = str(text or "").strip()
    if not reason:
        raise InputError("a pin needs a reason", hint="say why in reason, e.g. 'model v3 data'")
    if len(reason) > MAX_REASON or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in reason):
        raise InputError(
            f"the pin reason is over {MAX_REASON} characters or holds control characters",
            hint="give a short, one-line reason",
        )
    return reason


def missing_data(store: Store, manifest: mf.Manifest, refresh: bool = False) -> list[str]:
    """Blob and pack keys the manifest names that the store lacks (a blob of another size than
    the manifest's is not the blob: never made young by copying what a HEAD claims); with
    ``refresh``, each one present is made young when old (:func:`refresh_age`)."""
    sizes = {layout.blob_key(e.sha256): e.size for e in manifest.files if e.size and not e.pack}

    def missing(key: str) -> bool:
        info = store.head(key)
        if info is None or info.size != sizes.get(key, info.size):
            return True
        if refresh:
            refresh_age(store, info)
        return False

    keys = sorted(data_keys(manifest))
    return [key for key, gone in zip(keys, parallel(missing, keys, 8), strict=True) if gone]


def refresh_age(store: Store, info: ObjectInfo) -> None:
    """Make an old object young, as a save does with what it reuses: a prune that listed the
    store before the pin then finds it younger than its grace period, and keeps it."""
    if time.time() - info.modified > layout.TOUCH_AFTER:
        store.touch(info.key)


def pin_manifest(
    store: Store, digest: str, reason: str, environ: Any, dry_run: bool
) -> dict[str, Any]:
    """Check the manifest and all its data are there, make the old ones young (a prune that
    listed the store before the pin keeps them), then write the pin (unless planning) and check
    again that nothing went meanwhile.

    Raises InputError when the store lacks the manifest, StoreError when data is missing or
    the store fails, IntegrityError when the manifest does not hash to its name.
    """
    manifest, _ = fetch_by_digest(store, digest)
    _refuse_missing(store, digest, missing_data(store, manifest, refresh=not dry_run))
    key = layout.pin_key(digest)
    already = store.head(key) is not None
    if not dry_run:
        _refresh_manifest(store, digest)
        body = {
            "format": layout.FORMAT_VERSION,
            "manifest": digest,
            "reason": reason,
            "created": mf.now_iso(),
            "producer": mf.producer(environ),
        }
        store.put(key, mf.canonical_json(body))
        _check_still_whole(store, digest, manifest)
    return {
        "store": store.url,
        "manifest": digest,
        "reason": reason,
        "files": len(manifest.files),
        "bytes": manifest.total_bytes,
        "already_pinned": already,
        "dry_run": dry_run,
    }


def _refresh_manifest(store: Store, digest: str) -> None:
    info = store.head(layout.manifest_key(digest))
    if info is not None:
        refresh_age(store, info)


def _check_still_whole(store: Store, digest: str, manifest: mf.Manifest) -> None:
    """After the pin is written: a prune that was deleting meanwhile may have taken part of the
    tree before it saw the pin or the new times; say so rather than promise it."""
    lost = missing_data(store, manifest)
    if store.head(layout.manifest_key(digest)) is None:
        lost.insert(0, layout.manifest_key(digest))
    _refuse_missing(store, digest, lost, "object(s) a prune running meanwhile deleted from")


def _refuse_missing(
    store: Store, digest: str, missing: list[str], gone: str = "blob(s)/pack(s) missing from"
) -> None:
    """StoreError when the manifest, or any blob or pack it names, is not in the store."""
    if not missing:
        return
    raise StoreError(
        f"manifest {digest[:12]} names {len(missing)} {gone} {store.url} (e.g. {missing[0]}): "
        "pinning it would not make it restorable",
        hint="save the tree again under a key, then pin the manifest that save reports",
    )


def describe_pin(done: dict[str, Any]) -> str:
    what = f"manifest {done['manifest'][:12]} ({done['files']} files, {human_bytes(done['bytes'])})"
    if done["dry_run"]:
        return f"would pin {what}" + (" (already pinned)" if done["already_pinned"] else "")
    return f"pinned {what}: prune keeps it and every blob it names"


def run_pin(inp: PinInputs, rt: Runtime) -> Result:
    """``cache-weights pin``: keep one manifest, checked whole, from prune.

    Raises InputError for a bad digest or reason, StoreError when the store fails.
    """
    digest = layout.manifest_digest(inp.manifest)
    reason = check_reason(inp.reason)
    store = store_from(inp, rt)
    done = pin_manifest(store, digest, reason, rt.environ, rt.dry_run)
    result = Result(command="cache-weights pin")
    result.headline = describe_pin(done)
    result.outputs = {"manifest": digest, "pinned": not rt.dry_run or done["already_pinned"]}
    result.report = done
    return result


def run_unpin(inp: UnpinInputs, rt: Runtime) -> Result:
    """``cache-weights unpin``: remove the pin; the next prune treats the manifest as usual.

    Raises InputError for a bad digest, StoreError when the store fails.
    """
    digest = layout.manifest_digest(inp.manifest)
    store = store_from(inp, rt)
    key = layout.pin_key(digest)
    present = not (isinstance(store, LocalStore) and not store.exists()) and (
        store.head(key) is not None
    )
    result = Result(command="cache-weights unpin")
    if not present:
        result.headline = f"manifest {digest[:12]} is not pinned in {store.url}: nothing to do"
    elif rt.dry_run:
        result.headline = f"would unpin manifest {digest[:12]}"
    else:
        store.delete(key)
        result.headline = f"unpinned manifest {digest[:12]}: prune may now delete it"
    result.outputs = {"manifest": digest, "pinned": present and rt.dry_run}
    result.report = {"store": store.url, "manifest": digest, "was_pinned": present}
    return result
