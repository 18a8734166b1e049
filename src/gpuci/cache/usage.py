"""Last use of a key: ``uses/<namespace>/<key>``, rewritten by every restore.

Refs change only when a key is saved, so a key restored every day but saved once a month would
look a month old; prune and ``ls`` read the last use from here instead. Recording it is best
effort: a job whose credentials may only read (a fork's pull request) still restores.
"""

from __future__ import annotations

from urllib.parse import unquote

from gpuci.cache import layout
from gpuci.cache.manifest import canonical_json, now_iso
from gpuci.cache.store import Store
from gpuci.errors import GpuciError


def touch(store: Store, namespace: str, key: str) -> str | None:
    """Record the use; returns why it could not be recorded (the caller warns), else None."""
    try:
        store.put(layout.use_key(namespace, key), canonical_json({"key": key, "used": now_iso()}))
    except GpuciError as exc:  # read-only credentials: the restore itself succeeded
        return exc.message
    except OSError as exc:  # a read-only store folder
        return exc.strerror or str(exc)
    return None


def last_uses(store: Store, namespace: str) -> dict[str, float]:
    """key -> when it was last restored (seconds since the epoch), from one listing."""
    prefix = layout.use_key(namespace, "")
    return {unquote(item.key[len(prefix) :]): item.modified for item in store.list(prefix)}
