"""Whether a file found in a folder other jobs can write is ours alone: the one rule for a
file gpu-ci wrote there earlier and now means to use again (a runner-local tier's blob, a
download's ``.incomplete`` and its sidecar).

It must be a regular file (a symlink or a FIFO planted under its name is not; check the
``lstat`` of the name, or the ``fstat`` of a file opened ``O_NOFOLLOW``), owned by the user
about to use it, and not writable by group or others (who could change it after the check).
"""

from __future__ import annotations

import os
import stat

__all__ = ["OTHERS_WRITE", "current_uid", "not_ours_alone"]

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def current_uid() -> int:
    """Who "ours" is: this process's user (the seam tests replace to play another user)."""
    return os.geteuid()


def not_ours_alone(st: os.stat_result, uid: int | None = None) -> str | None:
    """Why the file ``st`` describes may not be used as ``uid``'s own (default: ours); None
    when it may."""
    uid = current_uid() if uid is None else uid
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & OTHERS_WRITE:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None
