"""One entry of the runner-local tier: when it may be served, and how its use is recorded.

Shared by the tier's blobs (:mod:`gpuci.cache._stores.tier`) and its runs of packs
(:mod:`gpuci.cache._stores.tier_runs`): an entry is served only when it is a regular file we own
that nobody else can write (docs/security.md), with its mtime frozen at :data:`FROZEN_MTIME`.
"""

from __future__ import annotations

import contextlib
import os
import time

from gpuci.ownership import not_ours_alone

__all__ = ["FROZEN_MTIME", "TOUCH_AFTER", "current_uid", "touch", "untrusted"]

# 2000-01-01T00:00:00Z: every tier blob carries this mtime; anything else means it was written.
FROZEN_MTIME = 946684800
# A blob's last use (its atime) is rewritten only when older than this: eviction needs no finer
# order, and a warm restore of 1,000 small files then writes no inode of the tier.
TOUCH_AFTER = 3600


def current_uid() -> int:
    """The user the tier belongs to (a seam: tests simulate another user here)."""
    return os.geteuid()


def untrusted(st: os.stat_result, uid: int | None = None) -> str | None:
    """Why an existing tier entry must not be served (None: it may be): the one rule for a
    file of ours in a folder others can write (:func:`gpuci.ownership.not_ours_alone`)."""
    return not_ours_alone(st, current_uid() if uid is None else uid)


def touch(blob: int | str, st: os.stat_result) -> None:
    """Record a blob's use (its atime, for LRU eviction) when the last one is an hour old."""
    now = time.time()
    if st.st_atime < now - TOUCH_AFTER:
        with contextlib.suppress(OSError):
            if isinstance(blob, int):  # an open blob
                os.utime(blob, (now, FROZEN_MTIME))
            else:  # a name just checked by lstat: never through a link swapped in since
                os.utime(blob, (now, FROZEN_MTIME), follow_symlinks=False)
