"""One entry of the runner-local tier: when it may be served, and how its use is recorded.

Shared by the tier's blobs (:mod:`gpuci.cache._stores.tier`) and its runs of packs
(:mod:`gpuci.cache._stores.tier_runs`): an entry is served only when it is a regular file we own
that nobody else can write (:func:`gpuci.ownership.not_ours_alone`, docs/security.md), with its
mtime frozen at :data:`FROZEN_MTIME`.
"""

from __future__ import annotations

import contextlib
import os
import time

__all__ = ["FROZEN_MTIME", "TOUCH_AFTER", "touch"]

# 2000-01-01T00:00:00Z: every tier blob carries this mtime; anything else means it was written.
FROZEN_MTIME = 946684800
# A blob's last use (its atime) is rewritten only when older than this: eviction needs no finer
# order, and a warm restore of 1,000 small files then writes no inode of the tier.
TOUCH_AFTER = 3600


def touch(blob: int | str, st: os.stat_result) -> None:
    """Record a blob's use (its atime, for LRU eviction) when the last one is an hour old."""
    now = time.time()
    if st.st_atime < now - TOUCH_AFTER:
        with contextlib.suppress(OSError):
            if isinstance(blob, int):  # an open blob
                os.utime(blob, (now, FROZEN_MTIME))
            else:  # a name just checked by lstat: never through a link swapped in since
                os.utime(blob, (now, FROZEN_MTIME), follow_symlinks=False)
