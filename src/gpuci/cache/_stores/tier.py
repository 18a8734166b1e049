"""The runner-local tier: one verified copy of each file's bytes on the runner's own disk.

Self-hosted runners keep their disks between jobs, so a warm restore should place files from
disk instead of fetching them. The tier is a folder of files named by their sha256
(``blobs/sha256/<ab>/<hex>``, the same names as the store's blobs, but one per *file*), and of
runs of packs for the packed small files (``runs/sha256/<ab>/<pack>.<start>-<end>``: one file per
run, not one per small file; in ``link`` mode small files are blobs too, to be hardlinked).

Trust (docs/security.md): the tier must never place bytes that do not hash to their name,
whatever a job sharing the runner did. So

- a blob is only ever made by hashing the bytes *as they are copied in* (or hashing the private
  reflink clone), and it is published under the digest of what was copied, never under a name
  the caller computed earlier; a run is trusted for nothing but its name: each file cut from it
  is hashed against the manifest before it is written, in every mode;
- the folder is ours alone: created 0700, refused when it, or a folder above it, can be written
  by another user; each entry is opened ``O_NOFOLLOW`` and served only when it is a regular
  file we own that nobody else can write;
- how placed files relate to the tier is an explicit trust mode (``local-cache-mode``):
  ``copy`` (default) gives the job an independent file (a reflink where the filesystem can,
  else a copy), so nothing a job does to its tree reaches the tier; ``verify`` also hashes every
  file it places, against anything that edits the tier as the runner's own user; ``link``
  hardlinks every file without exec bits into the tree (read-only), which trusts every job on
  the runner (one tenant).

Blobs are read-only with their mtime frozen at :data:`FROZEN_MTIME`, a cheap tripwire for
accidental writes through a ``link``-mode hardlink (not a defence: a job can set mtime back).
Last use is the atime, set explicitly on use (at most once an hour per blob,
:data:`TOUCH_AFTER`), which eviction reads (:mod:`gpuci.cache._stores.tier_evict`). Runs of
packs are :mod:`gpuci.cache._stores.tier_runs`; opening the tier a job asked for, with its
folder checked, is :mod:`gpuci.cache._stores.tier_open`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpuci import ownership
from gpuci.cache import _layout as layout
from gpuci.cache._stores import copying
from gpuci.cache._stores.tier_entry import FROZEN_MTIME, touch
from gpuci.cache._stores.tier_fill import TierFill
from gpuci.cache._stores.tier_runs import Runs
from gpuci.errors import InputError

if TYPE_CHECKING:
    from threading import Event

# Free space a fill leaves on the tier's filesystem (as a restore leaves on its target's).
ROOM_MARGIN = 64 << 20
MODES = ("copy", "verify", "link")
DEFAULT_MODE = "copy"
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block
_CREATE = copying.CREATE_NEW


def parse_mode(raw: str | None) -> str:
    mode = (raw or "").strip().lower() or DEFAULT_MODE
    if mode not in MODES:
        raise InputError(
            f"input 'local-cache-mode' is '{raw}', not one of {', '.join(MODES)}",
            hint="set local-cache-mode to copy (the default), verify, or link (one tenant only)",
        )
    return mode


class _Held(Protocol):
    """A manifest's file entry, as :meth:`LocalTier.holds` reads it."""

    sha256: str
    size: int
    pack: str
    offset: int


@dataclass
class Placed:
    """How one file got into place: ``reflink``, ``hardlink`` or ``copy``."""

    how: str
    size: int


class LocalTier:
    """A runner-local, content-addressed blob folder with LRU eviction."""

    def __init__(self, root: Path, limit: int = 0, mode: str = DEFAULT_MODE) -> None:
        self.root = root
        # A str: building a Path per file is a measurable cost per small file (figure:
        # docs/benchmarks.md#figures-behind-the-code).
        self._blobs = os.path.join(root, layout.BLOBS)
        self.limit = limit
        self.mode = parse_mode(mode)
        self.ignored: dict[str, str] = {}  # entry -> why it was not served (and dropped)
        self.changed: list[str] = []  # sources that changed between hashing and copying in
        self.filled_up = False  # its disk filled during a restore: the rest skipped the tier
        # The last copy_in met a full disk or quota (ENOSPC, EDQUOT): a save's copies end then.
        self.copy_met_full = False
        self._ready = False
        # ``link`` mode: a hardlink from the tier worked where a reflink had just failed, so the
        # tier's filesystem cannot clone, and a later file that links is on that filesystem too:
        # link it straight away instead of creating a file only to learn that again (on ext4,
        # creating a file costs many times a link, most of a warm restore of many small files;
        # docs/benchmarks.md#figures-behind-the-code).
        self._links_first = False
        self.runs = Runs(self)

    # ----- names ---------------------------------------------------------------------------
    def path(self, digest: str) -> Path:
        return self.root / layout.blob_key(digest)

    def _blob(self, digest: str) -> str:
        """:meth:`path` as a str, for the per-file calls of a warm restore."""
        return f"{self._blobs}/{digest[:2]}/{digest}"

    def ensure_root(self) -> None:
        """Create the tier 0700 (or tighten ours to 0700) before the first write."""
        if self._ready:
            return
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(self.root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != ownership.current_uid():
            raise PermissionError(errno.EPERM, "the local cache folder is not ours", str(self.root))
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(self.root, 0o700)
        self._ready = True

    def _folder(self, rel: str) -> Path:
        self.ensure_root()
        folder = self.root / rel
        os.makedirs(folder, mode=0o700, exist_ok=True)
        return folder

    def links(self, size: int, mode: int) -> bool:
        """Whether a file is placed by a hardlink to its blob (where no reflink can be had).

        Only in ``link`` mode, and only for files with bytes (an empty file is never a blob)
        whose mode the blob's ``0444`` does not widen or narrow in a way that matters: an
        executable keeps its exec bits, and a file others may not read (``0600``) stays private,
        so both get their own copy with their own mode.
        """
        return self.mode == "link" and size > 0 and not mode & 0o111 and mode & 0o044 == 0o044

    def temp_path(self) -> Path:
        return self._folder("tmp") / f"{os.urandom(16).hex()}{layout.INCOMPLETE}"

    def drop(self, path: Path | str, why: str, repair: bool = True) -> None:
        """Never serve this entry; remove it from our folder when allowed to write."""
        self.ignored.setdefault(str(path), why)
        if repair:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def warnings(self) -> list[str]:
        """One line per kind of thing the tier refused, for the command's annotations."""
        out = []
        if self.ignored:
            first, why = next(iter(self.ignored.items()))
            out.append(
                f"local cache: did not serve {first} ({why}){_more(self.ignored)}; "
                "the store's copy is used instead"
            )
        if self.changed:
            out.append(
                f"local cache: {self.changed[0]} changed after it was hashed"
                f"{_more(self.changed)}; kept only under the hash of what was copied, if at all"
            )
        if self.filled_up:
            out.append(
                "local cache: a disk filled up during the restore; the files not placed yet "
                "were fetched again straight into the job's folder (free space on the runner)"
            )
        return out

    # ----- lookups -------------------------------------------------------------------------
    def intact(self, path: Path | str, st: os.stat_result, size: int, repair: bool) -> bool:
        why = ownership.not_ours_alone(st)
        if why is None and st.st_size != size:
            why = f"{st.st_size} bytes, not {size}"
        if why is None and int(st.st_mtime) != FROZEN_MTIME:
            why = "modified after it was stored"
        if why is not None:
            self.drop(path, why, repair)
            return False
        return True

    def has(self, digest: str, size: int, repair: bool = True) -> bool:
        """True when a trustworthy blob is there; an untrusted one is removed on sight."""
        path = self._blob(digest)
        st = self._lstat(path)
        return st is not None and self.intact(path, st, size, repair)

    def _lstat(self, path: str) -> os.stat_result | None:
        """The entry's own status; None when it is not there or cannot be looked at (a folder
        of the tier someone made unsearchable: the store's copy is used, never a failed job)."""
        try:
            return os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self.ignored.setdefault(path, f"cannot be looked at: {exc.strerror or exc}")
            return None

    def _open(self, digest: str, size: int) -> tuple[int, os.stat_result] | None:
        """An open, checked blob (never through a symlink), or None."""
        return self.open_entry(self._blob(digest), size)

    def open_entry(self, path: str, size: int) -> tuple[int, os.stat_result] | None:
        """An open, checked blob or run of ``size`` bytes (never through a symlink), or None."""
        try:
            fd = os.open(path, _READ)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self.drop(path, "a symlink")
            return None
        st = os.fstat(fd)
        if not self.intact(path, st, size, repair=True):
            os.close(fd)
            return None
        return fd, st

    # ----- filling -------------------------------------------------------------------------
    def room_for(
        self, size: int, job_devices: AbstractSet[int] = frozenset(), job_bytes: int = 0
    ) -> bool:
        """Whether the tier's filesystem can take ``size`` more bytes, with :data:`ROOM_MARGIN`
        to spare, while a restore writes ``job_bytes`` into folders on ``job_devices`` (they
        count too when one is the tier's). A tier is never filled to the last byte of a disk
        the job may need."""
        try:
            self.ensure_root()
            free = os.statvfs(self.root)
            same = os.stat(self.root).st_dev in job_devices
        except OSError:
            return False
        return free.f_bavail * free.f_frsize >= size + (job_bytes if same else 0) + ROOM_MARGIN

    def start_fill(self, digest: str, size: int) -> TierFill | None:
        """The temp file a cold restore writes this file into, the job's copy made from it after
        (:mod:`gpuci.cache._stores.tier_fill`); None when the tier has it already or cannot take
        it (a cache never fails a job)."""
        if self.has(digest, size):
            return None
        try:
            temp = self.temp_path()
            fd = os.open(temp, _CREATE, 0o600)
        except OSError:
            return None
        return TierFill(self.publish_temp, FROZEN_MTIME, digest, fd, str(temp))

    def keep(self, digest: str, chunks: Sequence[bytes]) -> bool:
        """Store bytes a save holds in memory and has just hashed to ``digest``: no second read
        and no second hash (:meth:`copy_in` does both). Returns whether a blob was added (a
        cache never fails a job)."""
        size = sum(len(chunk) for chunk in chunks)
        if not size or not self.room_for(size):  # an empty file is never a blob
            return False
        fill = self.start_fill(digest, size)
        return fill is not None and fill.keep(chunks, digest)

    def publish_temp(self, temp: str, digest: str) -> None:
        """Publish a filled temp file under ``digest``, the hash of exactly its bytes."""
        self._publish(Path(temp), digest)

    def _publish(self, temp: Path, digest: str) -> None:
        """Make a verified file visible; replaces whatever held the name (an identical blob,
        or something planted there), atomically."""
        final = self.path(digest)
        os.makedirs(final.parent, mode=0o700, exist_ok=True)
        os.replace(temp, final)

    def adopt(self, path: Path, digest: str) -> bool:
        """``link`` mode only: hardlink a file restore just fetched and verified into the tier.

        The file is in this job's own staging folder and its bytes were hashed on their way to
        disk. In ``copy`` and ``verify`` modes the job's file and the tier never share an inode,
        so this falls back to :meth:`copy_in`.
        """
        size = os.lstat(path).st_size
        if self.mode != "link":
            return self._copy_in_if_room(path, digest, size)
        if self.has(digest, size):
            return False
        try:
            self._folder(os.path.dirname(layout.blob_key(digest)))
            os.chmod(path, 0o444)
            os.utime(path, (time.time(), FROZEN_MTIME))
            try:
                os.link(path, self.path(digest), follow_symlinks=False)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
                return self._copy_in_if_room(path, digest, size)
            return True
        except OSError:
            return False  # the tier is a cache: failing to fill it never fails the job

    def _copy_in_if_room(self, path: Path, digest: str, size: int) -> bool:
        """:meth:`copy_in` where no link could be made: a copy takes room, so only while the
        tier's disk has it to spare, as for any other fill."""
        return not self.filled_up and self.room_for(size) and self.copy_in(path, digest, size=size)

    def copy_in(
        self,
        path: Path,
        digest: str,
        source: int | None = None,
        stop: Event | None = None,
        size: int | None = None,
    ) -> bool:
        """Copy a file in, hashing exactly the bytes stored; used by save and restore.

        ``source`` is the file already open (the save's, checked to be the very file it read
        and sent: a file swapped in under ``path`` since is never copied), left open; else
        ``path`` is opened, never through a link. The blob is named by what was copied: a
        source that changed after the caller hashed it is stored under its new hash (which no
        manifest names), never under ``digest``. ``size`` is the size the caller read (and
        made room for; None: the file's now): a file that reads on past it, one a job still
        appends to, is not copied in at all, where the copy went on to wherever the writer
        was. ``stop`` set (a failed or interrupted save) ends the copy at its next chunk, its
        temp file removed.
        """
        temp, self.copy_met_full = None, False
        try:
            src = os.open(path, _READ) if source is None else source
            try:
                st = os.fstat(src)
                size = st.st_size if size is None else size
                if not stat.S_ISREG(st.st_mode) or self.has(digest, size):
                    return False
                temp = self.temp_path()
                dst = os.open(temp, _CREATE, 0o600)
                try:  # a reflink is a private clone: hash the clone, i.e. what is stored
                    actual = (
                        copying.hash_fd(dst, stop, size)
                        if copying.reflink(src, dst)
                        else copying.copy_hashing(src, dst, stop, size)
                    )
                    os.fchmod(dst, 0o444)
                    os.utime(dst, (time.time(), FROZEN_MTIME))
                finally:
                    os.close(dst)
            finally:
                if source is None:
                    os.close(src)
            if actual != digest:
                self.changed.append(str(path))
            self._publish(temp, actual)
            return actual == digest
        except OSError as exc:
            if exc.errno == errno.EFBIG:  # it grew past what the caller read
                self.changed.append(str(path))
            self.copy_met_full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            return False  # the tier is a cache: failing to fill it never fails the job
        finally:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)

    # ----- packed small files: runs of their packs -----------------------------------------
    @property
    def keeps_runs(self) -> bool:
        """Whether packed small files are kept as runs of their pack (``copy`` and ``verify``):
        one tier file per run of a pack, where a blob per file cost an inode, a rename and
        often a folder each, several times the write itself on ext4 (docs/cache-format.md).
        ``link`` mode keeps a blob per file, which it hardlinks."""
        return self.mode != "link"

    def holds(self, entries: Sequence[_Held], repair: bool = True) -> list[bool]:
        """Whether the tier holds each file (size > 0): a packed one in a run of its pack that
        passes the checks a restore makes before reading it (its bytes are hashed then), any
        one as a trustworthy blob (an untrusted blob is removed when ``repair``)."""
        runs = {pack: self.runs.intact(pack) for pack in {e.pack for e in entries if e.pack}}
        return [
            e.size > 0
            and (
                any(a <= e.offset and e.offset + e.size <= b for a, b, _ in runs.get(e.pack, ()))
                or self.has(e.sha256, e.size, repair)
            )
            for e in entries
        ]

    # ----- placing -------------------------------------------------------------------------
    def place(self, digest: str, size: int, dest: str | Path, mode: int) -> Placed | None:
        """Put the blob at ``dest`` as the trust mode says; None when the blob is not usable
        (gone, untrusted, or in ``verify`` mode not hashing to its name): the caller fetches it.

        ``copy``: reflink, else copy. ``verify``: the same, hashing what was placed.
        ``link``: reflink, else a hardlink for files without exec bits (read-only, shared with
        the tier), else copy.
        """
        linkable = self.links(size, mode)
        if linkable and self._links_first:
            path = self._blob(digest)
            st = self._lstat(path)  # lstat, as the open below: a symlink is untrusted
            if st is None or not self.intact(path, st, size, repair=True):
                return None
            touch(path, st)
            linked = self._hardlink(digest, st, dest)
            if linked == "linked":
                return Placed("hardlink", st.st_size)
            if linked == "swapped":  # not the inode checked: the store's copy is used instead
                return None
        opened = self._open(digest, size)
        if opened is None:
            return None
        src, st = opened
        try:
            touch(src, st)
            return self._place_from(src, st, digest, dest, mode, linkable)
        except copying.Mismatch as exc:
            self.drop(self.path(digest), str(exc))
            os.unlink(dest)
            return None
        except OSError as exc:  # a blob that cannot be read (a failing disk): the store serves
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise  # the job's disk is full: fetching would not help
            self.ignored.setdefault(self._blob(digest), f"it cannot be read: {exc.strerror}")
            with contextlib.suppress(OSError):
                os.unlink(dest)
            return None
        finally:
            os.close(src)

    def _place_from(
        self, src: int, st: os.stat_result, digest: str, dest: str | Path, mode: int, linkable: bool
    ) -> Placed:
        dst = os.open(dest, _CREATE, 0o600)
        try:
            reflinked = copying.reflink(src, dst)
            if not reflinked and linkable:
                os.close(dst)
                dst = -1
                os.unlink(dest)
                if self._hardlink(digest, st, dest) == "linked":
                    self._links_first = True
                    return Placed("hardlink", st.st_size)
                dst = os.open(dest, _CREATE, 0o600)
            if self.mode == "verify":
                actual = copying.hash_fd(dst) if reflinked else copying.copy_hashing(src, dst)
                if actual != digest:
                    raise copying.Mismatch("bytes that do not hash to its name")
            elif not reflinked:
                copying.copy_fd(src, dst, st.st_size)
            os.fchmod(dst, mode & 0o777)
        finally:
            if dst >= 0:
                os.close(dst)
        return Placed("reflink" if reflinked else "copy", st.st_size)

    def _hardlink(self, digest: str, st: os.stat_result, dest: str | Path) -> str:
        """``link`` mode: link the very inode that was checked, else leave nothing at dest.

        Returns ``linked``, ``refused`` (another filesystem, a link count at its limit) or
        ``swapped`` (the name held another inode by then: linked, seen and unlinked again).
        """
        try:
            os.link(self._blob(digest), dest, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOENT):
                return "refused"
            raise
        linked = os.lstat(dest)
        if (linked.st_ino, linked.st_dev) != (st.st_ino, st.st_dev):  # swapped meanwhile
            os.unlink(dest)
            return "swapped"
        return "linked"


def _more(items: Any) -> str:
    return f" (and {len(items) - 1} more)" if len(items) > 1 else ""
