"""The runner-local tier: one verified copy of each file's bytes on the runner's own disk.

Self-hosted runners keep their disks between jobs, so a warm restore should link files into
place instead of fetching them. The tier is a folder of files named by their sha256
(``blobs/sha256/<ab>/<hex>``, the same names as the store's blobs, but one per *file*, packed
small files included). A blob becomes visible only by an atomic ``link()`` of a file that was
already verified, so a reader never sees a partial one, and two jobs filling one tier at once
simply race to create the same immutable name.

Blobs are read-only, and their mtime is frozen at :data:`FROZEN_MTIME`: a job that writes
through a hardlink (as root, read-only bits do not stop it) moves the mtime, and the tier then
drops that blob instead of serving it. Last use is the atime, set explicitly on every use
(``noatime`` mounts do not matter), and eviction removes the least recently used blobs under an
exclusive lock, so two evictions never race. Placement tries a reflink (copy-on-write, an
independent file), then a hardlink, then a plain copy.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuci.cache import layout
from gpuci.errors import InputError

# Smaller files are copied, not linked: the copy costs nothing worth saving, and the job gets
# writable files for configs, tokenizers and Hugging Face ``refs/main``, which tools rewrite.
LINK_MIN = 1 << 20
# 2000-01-01T00:00:00Z: every tier blob carries this mtime; anything else means it was written.
FROZEN_MTIME = 946684800
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
DEFAULT_SIZE = "100GiB"
TIER_ENV = "GPUCI_LOCAL_CACHE"
_OFF = {"off", "false", "no", "none", "0"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_size(raw: str, what: str = "local-cache-size") -> int:
    """``500MB``, ``100GiB``, ``2T``, ``0`` (no limit) -> bytes."""
    match = _SIZE.match(raw or "")
    if not match:
        raise InputError(
            f"input '{what}' is '{raw}', not a size",
            hint=f"set {what} to a size such as 500MB, 100GiB or 0 for no limit",
        )
    unit = (match.group(2) or "").lower()
    base = 1024 if "i" in unit else 1000
    power = "kmgtp".find(unit[:1]) + 1 if unit[:1] in "kmgtp" and unit else 0
    return int(float(match.group(1)) * base**power)


def default_root(environ: Mapping[str, str]) -> Path:
    """``$RUNNER_TOOL_CACHE/gpuci/local`` on a runner, else ~/.cache/gpuci/local."""
    tool_cache = environ.get("RUNNER_TOOL_CACHE", "").strip()
    if tool_cache:
        return Path(tool_cache) / "gpuci" / "local"
    xdg = environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg else Path(environ.get("HOME") or Path.home()) / ".cache"
    return base / "gpuci" / "local"


@dataclass
class Placed:
    """How one file got into place: ``reflink``, ``hardlink`` or ``copy``."""

    how: str
    size: int


class LocalTier:
    """A runner-local, content-addressed blob folder with LRU eviction."""

    def __init__(self, root: Path, limit: int = 0) -> None:
        self.root = root
        self.limit = limit

    # ----- names ---------------------------------------------------------------------------
    def path(self, digest: str) -> Path:
        return self.root / layout.blob_key(digest)

    def _temp(self) -> Path:
        folder = self.root / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{uuid.uuid4().hex}{layout.INCOMPLETE}"

    @contextlib.contextmanager
    def _lock(self, name: str, shared: bool = False) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ----- lookups -------------------------------------------------------------------------
    def has(self, digest: str, size: int, repair: bool = True) -> bool:
        """True when an intact blob is there; a tampered one is removed on sight (``repair``)."""
        path = self.path(digest)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return False
        if int(st.st_mtime) != FROZEN_MTIME or st.st_size != size:
            if repair:  # written through a link: never serve it again
                with contextlib.suppress(OSError):
                    path.unlink()
            return False
        return True

    # ----- filling -------------------------------------------------------------------------
    def _publish(self, temp: Path, digest: str) -> None:
        """Freeze and make visible a verified file; losing a race to an identical one is fine."""
        os.chmod(temp, 0o444)
        os.utime(temp, (time.time(), FROZEN_MTIME))
        final = self.path(digest)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(temp, final)
        except FileExistsError:
            pass

    def adopt(self, path: Path, digest: str) -> bool:
        """Hardlink a freshly verified restore file into the tier (it becomes read-only too).

        Used by restore: the bytes were just hashed on their way to disk, so the tier gets them
        for free. Falls back to a copy when the tier is on another filesystem.
        """
        final = self.path(digest)
        if final.exists():
            return False
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o444)
            os.utime(path, (time.time(), FROZEN_MTIME))
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, final)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
                return self.copy_in(path, digest)
            return True
        except OSError:
            return False  # the tier is a cache: failing to fill it never fails the job

    def copy_in(self, path: Path, digest: str) -> bool:
        """Copy a file in (a reflink where the filesystem can); used by save."""
        if self.path(digest).exists():
            return False
        temp = None
        try:
            temp = self._temp()
            _clone_or_copy(path, temp)
            self._publish(temp, digest)
            return True
        except OSError:
            return False
        finally:
            if temp is not None:
                temp.unlink(missing_ok=True)

    # ----- placing -------------------------------------------------------------------------
    def place(self, digest: str, size: int, dest: Path, mode: int) -> Placed | None:
        """Put the blob at ``dest``: reflink, else hardlink (read-only), else copy.

        None when the blob is gone (evicted or dropped meanwhile); the caller fetches it.
        A hardlink is used only for files of LINK_MIN bytes or more without exec bits, so what
        lands in the tree is what the manifest says, minus write on large files.
        """
        src = self.path(digest)
        if not self.has(digest, size):
            return None
        try:
            with contextlib.suppress(PermissionError):  # another user's tier: still usable
                os.utime(src, (time.time(), FROZEN_MTIME))  # last use, for LRU
            if _reflink(src, dest):
                os.chmod(dest, mode & 0o777)
                return Placed("reflink", size)
            if size >= LINK_MIN and not mode & 0o111:
                try:
                    os.link(src, dest)
                    return Placed("hardlink", size)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                        raise
            _copy(src, dest)
            os.chmod(dest, mode & 0o777)
            return Placed("copy", size)
        except FileNotFoundError:
            with contextlib.suppress(FileNotFoundError):
                dest.unlink()
            return None

    # ----- eviction ------------------------------------------------------------------------
    def blobs(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of every blob."""
        out: list[tuple[float, int, Path]] = []
        base = self.root / layout.BLOBS
        if not base.is_dir():
            return out
        for entry in os.scandir(base):
            if not entry.is_dir():
                continue
            for blob in os.scandir(entry.path):
                try:
                    st = blob.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append((st.st_atime, st.st_size, Path(blob.path)))
        return out

    def usage(self) -> int:
        return sum(size for _, size, _ in self.blobs())

    def evict(self) -> tuple[int, int]:
        """Remove least recently used blobs until under the limit; returns (blobs, bytes)."""
        if self.limit <= 0:
            return 0, 0
        try:
            return self._evict()
        except OSError:
            return 0, 0  # an unwritable tier only means no eviction; the job goes on

    def _evict(self) -> tuple[int, int]:
        with self._lock("evict"):
            blobs = sorted(self.blobs(), key=lambda b: b[0])
            total = sum(size for _, size, _ in blobs)
            removed = freed = 0
            for _, size, path in blobs:
                if total <= self.limit:
                    break
                path.unlink(missing_ok=True)
                total -= size
                removed += 1
                freed += size
            self._sweep_temp()
        return removed, freed

    def _sweep_temp(self) -> None:
        """Remove temp files of fills that died long ago (an hour is far past any live copy)."""
        folder = self.root / "tmp"
        if not folder.is_dir():
            return
        cutoff = time.time() - 3600
        for item in folder.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if item.stat().st_mtime < cutoff:
                    item.unlink()


def open_tier(raw: str | None, size: str | None, environ: Mapping[str, str]) -> LocalTier | None:
    """The tier asked for (input, then ``GPUCI_LOCAL_CACHE``, then the default); None if off."""
    text = (raw or "").strip() or environ.get(TIER_ENV, "").strip()
    if text.lower() in _OFF:
        return None
    root = Path(os.path.abspath(os.path.expanduser(text))) if text else default_root(environ)
    return LocalTier(root, parse_size(size or DEFAULT_SIZE))


def _reflink(src: Path, dest: Path) -> bool:
    """Copy-on-write clone (btrfs, XFS, bcachefs); False where the filesystem cannot."""
    with open(src, "rb") as s:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.ioctl(fd, FICLONE, s.fileno())
            return True
        except OSError:
            pass
        finally:
            os.close(fd)
    os.unlink(dest)
    return False


def _copy(src: Path, dest: Path) -> None:
    """In-kernel copy (sendfile on Linux), no bytes through Python."""
    shutil.copyfile(src, dest)


def _clone_or_copy(src: Path, dest: Path) -> None:
    if not _reflink(src, dest):
        _copy(src, dest)
