"""Keeping the runner-local tier within its size: least recently used entries go first.

A blob's or run's last use is its atime, which the tier sets on use (at most once an hour,
:data:`~gpuci.cache._stores.tier.TOUCH_AFTER`), so ``noatime`` mounts do not matter. One process
evicts at a time, under a lock nobody waits on: another holder is doing the work, and any other
holder (a child that inherited the descriptor) must not hang the job.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from gpuci.cache import _layout as layout
from gpuci.cache._stores.tier import LocalTier

__all__ = ["entries", "evict", "usage"]

# A temp file of a fill older than this died with its process: far past any live copy.
DEAD_FILL_SECONDS = 3600


def entries(tier: LocalTier) -> list[tuple[float, int, Path]]:
    """(last use, size, path) of every blob and run; a fan-out folder that cannot be listed
    is passed over (and said in the tier's warnings), so the rest is still counted and evicted."""
    out: list[tuple[float, int, Path]] = []
    for kind in (layout.BLOBS, layout.TIER_RUNS):
        base = tier.root / kind
        if base.is_dir() and not base.is_symlink():
            out.extend(_fanned_out(base, tier.ignored))
    return out


def usage(tier: LocalTier) -> int:
    """Bytes the tier's blobs and runs take."""
    return sum(size for _, size, _ in entries(tier))


def evict(tier: LocalTier) -> tuple[int, int]:
    """Remove the temp files of fills that died long ago, whatever the limit, then the least
    recently used blobs and runs until under the limit.

    Returns:
        (entries, bytes) removed; nothing while another process evicts (it is doing the work),
        or when the tier cannot be written (no eviction; the job goes on).
    """
    try:
        with _evict_lock(tier) as ours:
            if not ours:
                return 0, 0
            _sweep_dead_fills(tier.root / "tmp")
            return _oldest_out(tier) if tier.limit > 0 else (0, 0)
    except OSError:
        return 0, 0


@contextlib.contextmanager
def _evict_lock(tier: LocalTier) -> Iterator[bool]:
    """Hold the eviction lock when it is free; yields False, never waiting, when another
    process holds it."""
    tier.ensure_root()
    fd = os.open(tier.root / "evict.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _oldest_out(tier: LocalTier) -> tuple[int, int]:
    listed = sorted(entries(tier), key=lambda entry: entry[0])
    total = sum(size for _, size, _ in listed)
    removed = freed = 0
    for _, size, path in listed:
        if total <= tier.limit:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed += 1
        freed += size
    return removed, freed


def _sweep_dead_fills(folder: Path) -> None:
    """Remove temp files of fills that died long ago."""
    if not folder.is_dir() or folder.is_symlink():
        return
    cutoff = time.time() - DEAD_FILL_SECONDS
    for item in folder.iterdir():
        with contextlib.suppress(OSError):
            if os.lstat(item).st_mtime < cutoff:
                item.unlink()


def _fanned_out(base: Path, unlisted: dict[str, str]) -> Iterator[tuple[float, int, Path]]:
    """(last use, size, path) of the regular files one level under ``base``'s fan-out folders
    (never through a link); a folder that cannot be listed goes into ``unlisted``, with why."""
    for entry in os.scandir(base):
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            listed = list(os.scandir(entry.path))
        except OSError as exc:
            unlisted.setdefault(entry.path, f"cannot be listed: {exc.strerror or exc}")
            continue
        for blob in listed:
            try:
                st = blob.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield st.st_atime, st.st_size, Path(blob.path)
