"""A restore's staging folders beside its targets (inside one that is a mount point, so every
rename stays on one filesystem): made by this process under a name nobody can guess, locked
while the restore lives, and swept by a later restore only once that lock is free.

A name that is predictable (the pid) lets a job plant a link there first, and the pid says
nothing about a restore in another pid namespace (two containers sharing the folder), so:
``.gpuci-staging-<name>.<random>.<pid>``, made with ``mkdir`` (which never follows a link and
fails on any name that exists), holding ``lock`` (an ``flock`` the kernel drops when the
process dies), ``tree`` (the root being built) and ``replaced`` (what a merge moved aside).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from pathlib import Path

from gpuci import files
from gpuci.cache import _layout as layout
from gpuci.errors import InputError

LOCK = "lock"  # made mode 0 and given 0o600 once locked: 0 means "not locked yet"
TREE = "tree"
TRASH = "replaced"
# A staging folder whose lock cannot be looked at (an older gpu-ci's, a filesystem without
# flock, a restore killed before it locked) is swept only once this old.
UNLOCKED_GRACE = 24 * 3600
# Opening a folder: never through a symlink (ELOOP instead); merge.py descends the target so.
DIR_FLAGS = files.FOLDER | os.O_NOFOLLOW
_ATTEMPTS = 8
_LOCK_WAIT_S = 2.0  # a new staging folder's lock: a sweep holds it for a moment, no longer


class Staging:
    """One root's staging folder, open and locked by this process."""

    def __init__(self, path: Path, fd: int, lock: int) -> None:
        self.path = path
        self.tree = path / TREE  # where the root is built: a Path made once, read per file
        self.fd = fd  # the folder itself, opened O_NOFOLLOW: the trash is reached through it
        self.lock = lock
        self._trash = -1
        self.moved = 0  # names given in the trash so far

    def trash(self) -> int:
        """The trash folder (made on first use), as a descriptor: never reached by a path."""
        if self._trash < 0:
            os.mkdir(TRASH, 0o700, dir_fd=self.fd)
            self._trash = os.open(TRASH, DIR_FLAGS, dir_fd=self.fd)
        return self._trash

    def trash_name(self) -> str:
        self.moved += 1
        return str(self.moved)

    def remove(self) -> None:
        """Remove the folder (the lock last, so no sweep removes it under this restore)."""
        if self._trash >= 0:
            os.close(self._trash)
            self._trash = -1
        try:
            os.unlink(LOCK, dir_fd=self.fd)
            os.rmdir(self.path)  # a warm restore into a new folder: all that is left
        except OSError:
            _rmtree(self.path)
        finally:
            os.close(self.fd)
            os.close(self.lock)


def home(target: Path) -> Path:
    """The folder ``target``'s staging goes in: beside it, or inside it where it is a folder on
    another filesystem than its parent (a mount point: a model disk at ``/models``), so every
    rename of the placement, its trash and its undo stays on one filesystem (never EXDEV)."""
    try:
        held = os.lstat(target)
        if stat.S_ISDIR(held.st_mode) and held.st_dev != os.stat(target.parent).st_dev:
            return target
    except OSError:
        pass
    return target.parent


def refuse_nameless(target: Path) -> None:
    """A target with no name, the filesystem root, has none for its staging folder nor for the
    placement to rename onto: refused with its own line before anything is swept or fetched
    (it failed after the download, said to be "not a folder").

    Raises:
        InputError: ``target`` has no name.
    """
    if not target.name:
        raise InputError(
            f"path '{target}' is the filesystem root, which a cache cannot be restored onto; "
            "nothing was restored",
            hint="restore to a folder below it, such as /models",
        )


def make(target: Path) -> Staging:
    """A new staging folder for ``target`` (in :func:`home`), locked (a random name: one
    planted is skipped)."""
    refuse_nameless(target)
    folder = home(target)
    for _ in range(_ATTEMPTS):
        name = f"{layout.STAGING_PREFIX}{target.name}.{os.urandom(8).hex()}.{os.getpid()}"
        path = folder / name
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        fd = os.open(path, DIR_FLAGS)
        try:
            return Staging(path, fd, _lock(fd))
        except BaseException:
            os.close(fd)
            _rmtree(path)
            raise
    raise FileExistsError(errno.EEXIST, "no free staging name", str(folder))


def _lock(folder: int) -> int:
    """Create the lock file mode 0, lock it, then make it 0o600: a sweep that takes a lock of
    mode 0 knows it was taken before its owner's, not after its owner died. A sweep looking at
    it lets go at once; anyone else holding it (root can open a mode-0 file) is waited for at
    most :data:`_LOCK_WAIT_S`: the folder then stays unlocked, mode 0, swept only once old."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(LOCK, flags, 0, dir_fd=folder)
    deadline = time.monotonic() + _LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return fd
            time.sleep(0.01)
        except OSError:  # a filesystem without flock: the folder is swept only once old
            return fd
    os.fchmod(fd, 0o600)
    return fd


def sweep_stale(target: Path) -> None:
    """Remove the staging folders of ``target`` whose restore is gone, and any link or file
    planted under such a name (unlinked, never followed): beside it, and inside it where it
    is a mount point (:func:`home`). The first look at a target: one with no name is refused
    (:func:`refuse_nameless`)."""
    refuse_nameless(target)
    stem = f"{layout.STAGING_PREFIX}{target.name}."
    _sweep_in(target.parent, stem)
    if home(target) == target:
        _sweep_in(target, stem)


def _sweep_in(folder: Path, stem: str) -> None:
    try:
        items = list(os.scandir(folder))
    except OSError:
        return
    for item in items:
        if not item.name.startswith(stem) or not _staging_suffix(item.name[len(stem) :]):
            continue
        try:
            if not item.is_dir(follow_symlinks=False):
                os.unlink(item.path)
            elif _abandoned(item.path):
                _rmtree(Path(item.path))
        except OSError:
            continue  # gone meanwhile, or not ours to remove: left there


def _staging_suffix(rest: str) -> bool:
    """``<random>.<pid>`` (this version), ``<pid>`` or ``<pid>-replaced`` (older ones)."""
    token, _, pid = rest.partition(".")
    if pid:
        return len(token) == 16 and all(c in "0123456789abcdef" for c in token) and pid.isdigit()
    return rest.removesuffix("-replaced").isdigit()


def _abandoned(path: str) -> bool:
    """Whether no live restore holds the folder: its lock is free, or it cannot be told and the
    folder is older than the grace period."""
    try:
        folder = os.open(path, DIR_FLAGS)
    except OSError:
        return False
    try:
        if _lock_free(folder):
            return True
        return os.fstat(folder).st_mtime < time.time() - UNLOCKED_GRACE
    finally:
        os.close(folder)


def _lock_free(folder: int) -> bool:
    """Whether the folder's lock was locked by its owner and is free now (its owner died)."""
    try:
        fd = files.open_regular(LOCK, follow=False, dir_fd=folder)
    except OSError:  # none, a link, or no regular file (NotRegular): not a lock of ours
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return stat.S_IMODE(os.fstat(fd).st_mode) != 0  # mode 0: taken before its owner's
    except OSError:  # held by a live restore (EWOULDBLOCK), or flock unsupported
        return False
    finally:
        os.close(fd)  # the kernel drops the lock with the descriptor


def _rmtree(path: Path) -> None:
    """Remove a staging folder, or whatever was planted under its name; errors leave the rest.

    Iterative through folder descriptors opened O_NOFOLLOW: a folder planted deeper than
    Python's recursion limit is removed too, no link is followed, and shutil (a tenth of the
    start-up) is never imported."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        _remove(parent, path.name)
    except OSError:
        pass
    finally:
        os.close(parent)


def _remove(parent: int, name: str) -> None:
    """Remove ``name`` under the open folder ``parent``, deepest first, holding one folder open
    at a time (a trail of names climbed back through ``..``, each checked by device and inode,
    so depth costs no descriptors and a folder moved meanwhile stops the removal)."""
    fd = _open_or_unlink(parent, name)
    if fd is None:
        return
    trail: list[tuple[str, int, int, list[str]]] = []  # name, the folder above's id, its rest
    try:
        pending = _clear(fd)
        while pending or trail:
            if pending:
                sub_name = pending.pop()
                sub = _open_or_unlink(fd, sub_name)
                if sub is not None:
                    st = os.fstat(fd)
                    trail.append((sub_name, st.st_dev, st.st_ino, pending))
                    os.close(fd)
                    fd = sub
                    pending = _clear(fd)
                continue
            sub_name, dev, ino, pending = trail.pop()
            up = os.open("..", DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (dev, ino):
                raise OSError(errno.ESTALE, "a folder moved during its removal", sub_name)
            os.rmdir(sub_name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _open_or_unlink(parent: int, name: str) -> int | None:
    """The folder ``name`` opened, or None once whatever else held it (a link) is unlinked."""
    try:
        return files.open_below(parent, [name])
    except FileNotFoundError:
        return None
    except files.Blocked:
        pass
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=parent)
    return None


def _clear(folder: int) -> list[str]:
    """Unlink all but the folders in ``folder`` (links unfollowed); the folders' names."""
    folders = []
    with os.scandir(folder) as items:
        for item in items:
            if item.is_dir(follow_symlinks=False):
                folders.append(item.name)
            else:
                os.unlink(item.name, dir_fd=folder)
    return folders
