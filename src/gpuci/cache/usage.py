"""Last use of a key: ``uses/<namespace>/<key>``, rewritten by every restore.

Refs change only when a key is saved, so a key restored every day but saved once a month would
look a month old; prune and ``ls`` read the last use from here instead. Recording it is best
effort: a job whose credentials may only read (a fork's pull request) still restores.
"""

from __future__ import annotations

from urllib.parse import unquote

from gpuci.cache import layout
from gpuci.cache.manifest import canonical_json, now_iso
from gpuci.cache.store import LocalStore, Store
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


class Recording:
    """:func:`touch` on a thread of its own, so the write goes out beside the restore's transfer:
    on a remote store it is one more round trip (30-100 ms) that the restore used to wait for
    after its last byte. A restore that then fails has still recorded a use (the key was
    wanted, which is what prune asks). On a file store the record is one local rename: it is
    written when the result is asked for, and a tier hit starts no thread (nor imports one)."""

    def __init__(self, store: Store, namespace: str, key: str) -> None:
        self._args = (store, namespace, key)
        self._why: str | None = None
        self._error: BaseException | None = None
        self._thread = None
        if not isinstance(store, LocalStore):
            import threading

            self._thread = threading.Thread(
                target=self._run, args=self._args, name="gpuci-last-use", daemon=True
            )
            self._thread.start()

    def _run(self, store: Store, namespace: str, key: str) -> None:
        try:
            self._why = touch(store, namespace, key)
        except BaseException as exc:  # re-raised where the caller waits: a bug stays visible
            self._error = exc

    def result(self) -> str | None:
        """Wait for the write (or, on a file store, make it now); returns what :func:`touch`
        returns."""
        if self._thread is None:
            return touch(*self._args)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._why


def last_uses(store: Store, namespace: str) -> dict[str, float]:
    """key -> when it was last restored (seconds since the epoch), from one listing."""
    prefix = layout.use_key(namespace, "")
    return {unquote(item.key[len(prefix) :]): item.modified for item in store.list(prefix)}
