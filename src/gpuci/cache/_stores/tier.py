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
Last use is the atime, set explicitly on use (``noatime`` mounts do not matter; at most once
an hour per blob, :data:`TOUCH_AFTER`), and
eviction removes the least recently used blobs under an exclusive lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuci import files, inputs, settings
from gpuci.cache import _layout as layout
from gpuci.cache._stores import copying
from gpuci.cache._stores.tier_fill import TierFill
from gpuci.cache._stores.tier_policy import TierChoice, choose
from gpuci.errors import InputError

# 2000-01-01T00:00:00Z: every tier blob carries this mtime; anything else means it was written.
FROZEN_MTIME = 946684800
# A blob's last use (its atime) is rewritten only when older than this: eviction needs no finer
# order, and a warm restore of 1,000 small files then writes no inode of the tier.
TOUCH_AFTER = 3600
DEFAULT_SIZE = "100GiB"
# Free space a fill leaves on the tier's filesystem (as a restore leaves on its target's).
ROOM_MARGIN = 64 << 20
MODES = ("copy", "verify", "link")
DEFAULT_MODE = "copy"
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block
_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def current_uid() -> int:
    """The user the tier belongs to (a seam: tests simulate another user here)."""
    return os.geteuid()


def parse_size(raw: str, what: str = "local-cache-size") -> int:
    """``500MB``, ``100GiB``, ``2T``, ``0`` or ``none`` (no limit) -> bytes, 0 meaning no limit.

    The units are those of every size input (:func:`gpuci.inputs.parse_size`): ``MB`` is 1000^2,
    ``MiB`` and a bare ``M`` 1024^2, so ``local-cache-size`` and ``max-bytes`` read alike.
    """
    try:
        limit = inputs.parse_size(raw or "")
    except ValueError:
        raise InputError(
            f"input '{what}' is '{raw}', not a size",
            hint=f"set {what} to a size such as 500MB, 100GiB or 0 for no limit",
        ) from None
    return limit or 0


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


def untrusted(st: os.stat_result, uid: int | None = None) -> str | None:
    """Why an existing tier entry must not be served (None: it may be)."""
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    uid = current_uid() if uid is None else uid
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & _OTHERS_WRITE:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def runner_uid(environ: Mapping[str, str]) -> int | None:
    """In GitHub Actions, the runner's own user: the owner of ``RUNNER_TEMP``.

    It runs the job anyway; trusting the folders it owns lets a container job (root inside,
    the runner's uid on the mounted ``/__w`` and ``/__t``) keep its tier.
    """
    temp = settings.RUNNER_TEMP.value(environ)
    if not settings.GITHUB_ACTIONS.is_true(environ) or not temp:
        return None
    try:
        return os.stat(temp).st_uid
    except OSError:
        return None


def private_root_problem(root: Path, runner: int | None = None) -> str | None:
    """Why ``root`` cannot be the tier (None: it can).

    The tier itself, when it exists, must be a folder owned by the current user that nobody
    else can write; every folder above it must be owned by us, root or the runner's user and
    not writable by others unless sticky (``/tmp``), so no other user can swap any part of the
    path.
    """
    uid = current_uid()
    for parent in reversed(root.parents):
        try:
            st = os.lstat(parent)
        except FileNotFoundError:
            break  # we create the rest, as ourselves
        if st.st_uid not in (0, uid, runner):
            return f"{parent} is owned by uid {st.st_uid}, who could replace the folder"
        if st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
            return f"{parent} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return f"{root} is not a folder"
    if st.st_uid != uid:
        return f"{root} is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & _OTHERS_WRITE:
        return f"{root} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


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
        self._runs = os.path.join(root, layout.TIER_RUNS)
        self.limit = limit
        self.mode = parse_mode(mode)
        self.ignored: dict[str, str] = {}  # entry -> why it was not served (and dropped)
        self.changed: list[str] = []  # sources that changed between hashing and copying in
        self.filled_up = False  # its disk filled during a restore: the rest skipped the tier
        self._ready = False
        # ``link`` mode: a hardlink from the tier worked where a reflink had just failed, so the
        # tier's filesystem cannot clone, and a later file that links is on that filesystem too:
        # link it straight away instead of creating a file only to learn that again (on ext4,
        # creating a file costs many times a link, most of a warm restore of many small files;
        # docs/benchmarks.md#figures-behind-the-code).
        self._links_first = False

    # ----- names ---------------------------------------------------------------------------
    def path(self, digest: str) -> Path:
        return self.root / layout.blob_key(digest)

    def _blob(self, digest: str) -> str:
        """:meth:`path` as a str, for the per-file calls of a warm restore."""
        return f"{self._blobs}/{digest[:2]}/{digest}"

    def _ensure_root(self) -> None:
        """Create the tier 0700 (or tighten ours to 0700) before the first write."""
        if self._ready:
            return
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(self.root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != current_uid():
            raise PermissionError(errno.EPERM, "the local cache folder is not ours", str(self.root))
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(self.root, 0o700)
        self._ready = True

    def _folder(self, rel: str) -> Path:
        self._ensure_root()
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

    def _temp(self) -> Path:
        return self._folder("tmp") / f"{os.urandom(16).hex()}{layout.INCOMPLETE}"

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[bool]:
        """Hold ``name``'s lock when it is free; yields False, never waiting, when another
        process holds it (that one is doing the work; any other holder, such as a child that
        inherited the descriptor, must not hang the job)."""
        self._ensure_root()
        fd = os.open(self.root / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _drop(self, path: Path | str, why: str, repair: bool = True) -> None:
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
                f"{_more(self.changed)}; stored under the hash of what was copied"
            )
        if self.filled_up:
            out.append(
                "local cache: a disk filled up during the restore; the files not placed yet "
                "were fetched again straight into the job's folder (free space on the runner)"
            )
        return out

    # ----- lookups -------------------------------------------------------------------------
    def _intact(self, path: Path | str, st: os.stat_result, size: int, repair: bool) -> bool:
        why = untrusted(st)
        if why is None and st.st_size != size:
            why = f"{st.st_size} bytes, not {size}"
        if why is None and int(st.st_mtime) != FROZEN_MTIME:
            why = "modified after it was stored"
        if why is not None:
            self._drop(path, why, repair)
            return False
        return True

    def has(self, digest: str, size: int, repair: bool = True) -> bool:
        """True when a trustworthy blob is there; an untrusted one is removed on sight."""
        path = self._blob(digest)
        st = self._lstat(path)
        return st is not None and self._intact(path, st, size, repair)

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
        return self._open_entry(self._blob(digest), size)

    def _open_entry(self, path: str, size: int) -> tuple[int, os.stat_result] | None:
        """An open, checked blob or run of ``size`` bytes (never through a symlink), or None."""
        try:
            fd = os.open(path, _READ)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._drop(path, "a symlink")
            return None
        st = os.fstat(fd)
        if not self._intact(path, st, size, repair=True):
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
            self._ensure_root()
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
            temp = self._temp()
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
        return not self.filled_up and self.room_for(size) and self.copy_in(path, digest)

    def copy_in(self, path: Path, digest: str) -> bool:
        """Copy a file in, hashing exactly the bytes stored; used by save and restore.

        The blob is named by what was copied: a source that changed after the caller hashed it
        is stored under its new hash (which no manifest names), never under ``digest``.
        """
        temp = None
        try:
            src = os.open(path, _READ)
            try:
                st = os.fstat(src)
                if not stat.S_ISREG(st.st_mode) or self.has(digest, st.st_size):
                    return False
                temp = self._temp()
                dst = os.open(temp, _CREATE, 0o600)
                try:  # a reflink is a private clone: hash the clone, i.e. what is stored
                    actual = (
                        copying.hash_fd(dst)
                        if copying.reflink(src, dst)
                        else copying.copy_hashing(src, dst)
                    )
                    os.fchmod(dst, 0o444)
                    os.utime(dst, (time.time(), FROZEN_MTIME))
                finally:
                    os.close(dst)
            finally:
                os.close(src)
            if actual != digest:
                self.changed.append(str(path))
            self._publish(temp, actual)
            return actual == digest
        except OSError:
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

    def start_run(self, pack: str, start: int, end: int) -> TierFill | None:
        """The temp file a cold restore writes bytes ``start`` to ``end`` of ``pack`` into as
        they arrive; None when it cannot be made (a cache never fails a job)."""
        try:
            temp = self._temp()
            fd = os.open(temp, _CREATE, 0o600)
        except OSError:
            return None
        name = layout.run_name(pack, start, end)
        return TierFill(self._publish_run, FROZEN_MTIME, name, fd, str(temp))

    def keep_run(self, pack: str, data: bytes, start: int = 0) -> bool:
        """Keep bytes ``start`` on of ``pack`` that a save has just hashed: a whole pack it
        sent, or the files it found in a pack already stored, each hashed to the manifest's
        digest (``bytes`` are immutable: what is written is what was hashed; a restore hashes
        every file it cuts from a run all the same). Returns whether a run was added."""
        if not data or not self.room_for(len(data)):
            return False
        name = layout.run_name(pack, start, start + len(data))
        fill = self.start_run(pack, start, start + len(data))
        return fill is not None and fill.keep((data,), name)

    def _publish_run(self, temp: str, name: str) -> None:
        folder = f"{self._runs}/{name[:2]}"
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.replace(temp, f"{folder}/{name}")

    def runs_of(self, pack: str) -> list[tuple[int, int, str]]:
        """(start, end, path) of the runs of ``pack`` the tier names: one listing per pack."""
        folder = f"{self._runs}/{pack[:2]}"
        try:
            names = os.listdir(folder)
        except OSError:
            return []
        spans = ((layout.run_span(name, pack), name) for name in names)
        return sorted((span[0], span[1], f"{folder}/{name}") for span, name in spans if span)

    def holds(self, entries: Sequence[_Held], repair: bool = True) -> list[bool]:
        """Whether the tier holds each file (size > 0): a packed one in a run of its pack that
        passes the checks a restore makes before reading it (its bytes are hashed then), any
        one as a trustworthy blob (an untrusted blob is removed when ``repair``)."""
        runs = {pack: self._intact_runs(pack) for pack in {e.pack for e in entries if e.pack}}
        return [
            e.size > 0
            and (
                any(a <= e.offset and e.offset + e.size <= b for a, b, _ in runs.get(e.pack, ()))
                or self.has(e.sha256, e.size, repair)
            )
            for e in entries
        ]

    def _intact_runs(self, pack: str) -> list[tuple[int, int, str]]:
        out = []
        for start, end, path in self.runs_of(pack):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if self._intact(path, st, end - start, repair=False):
                out.append((start, end, path))
        return out

    def place_from_runs(
        self, pack: str, wanted: Sequence[tuple[int, int, str, Path, int]]
    ) -> list[bool]:
        """Write each wanted file (offset in ``pack``, size, sha256, dest, mode) that a run of
        ``pack`` holds; returns which were placed, the rest are the caller's to fetch.

        A run is trusted for nothing but its name: it is opened and checked as a blob is, and
        every file cut from it is hashed against the manifest before it is written, in every
        mode; a run holding other bytes is dropped on sight.
        """
        placed = [False] * len(wanted)
        for start, end, path in self.runs_of(pack):
            todo = [
                i
                for i, (offset, size, *_) in enumerate(wanted)
                if not placed[i] and start <= offset and offset + size <= end
            ]
            opened = self._open_entry(path, end - start) if todo else None
            if opened is None:
                continue
            fd, st = opened
            try:
                _touch(fd, st)
                for i in todo:
                    offset, size, digest, dest, mode = wanted[i]
                    why = _cut(fd, offset - start, size, digest, dest, mode)
                    if why is not None:
                        self._drop(path, why)
                        break
                    placed[i] = True
            finally:
                os.close(fd)
        return placed

    # ----- placing -------------------------------------------------------------------------
    def place(self, digest: str, size: int, dest: Path, mode: int) -> Placed | None:
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
            if st is None or not self._intact(path, st, size, repair=True):
                return None
            _touch(path, st)
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
            _touch(src, st)
            return self._place_from(src, st, digest, dest, mode, linkable)
        except copying.Mismatch as exc:
            self._drop(self.path(digest), str(exc))
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
        self, src: int, st: os.stat_result, digest: str, dest: Path, mode: int, linkable: bool
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

    def _hardlink(self, digest: str, st: os.stat_result, dest: Path) -> str:
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

    # ----- eviction ------------------------------------------------------------------------
    def blobs(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of every blob and run; a fan-out folder that cannot be listed
        is passed over (and said), so the rest is still counted and evicted."""
        out: list[tuple[float, int, Path]] = []
        for kind in (layout.BLOBS, layout.TIER_RUNS):
            base = self.root / kind
            if base.is_dir() and not base.is_symlink():
                out.extend(_entries(base, self.ignored))
        return out

    def usage(self) -> int:
        return sum(size for _, size, _ in self.blobs())

    def evict(self) -> tuple[int, int]:
        """Remove the temp files of fills that died long ago, whatever the limit, then the least
        recently used blobs and runs until under the limit; returns (entries, bytes). Nothing
        while another process evicts (it is doing the work)."""
        try:
            with self._lock("evict") as ours:
                if not ours:
                    return 0, 0
                self._sweep_temp()
                return self._evict() if self.limit > 0 else (0, 0)
        except OSError:
            return 0, 0  # an unwritable tier only means no eviction; the job goes on

    def _evict(self) -> tuple[int, int]:
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
        return removed, freed

    def _sweep_temp(self) -> None:
        """Remove temp files of fills that died long ago (an hour is far past any live copy)."""
        folder = self.root / "tmp"
        if not folder.is_dir() or folder.is_symlink():
            return
        cutoff = time.time() - 3600
        for item in folder.iterdir():
            with contextlib.suppress(OSError):
                if os.lstat(item).st_mtime < cutoff:
                    item.unlink()


def _cut(run: int, at: int, size: int, digest: str, dest: Path, mode: int) -> str | None:
    """Write ``size`` bytes of the open run from ``at`` to a new file ``dest`` (``mode``),
    hashing them on the way. Returns None when placed; else why the run is not to be served
    (bytes that do not hash to ``digest``, or a read that failed: the store's copy is used, a
    cache never fails a job), with nothing left at ``dest``. Writing ``dest`` may fail: that is
    the job's disk. A slice at a time: a manifest may call a file of any size packed."""
    hasher = hashlib.sha256()
    out = os.open(dest, _CREATE, 0o600)
    why = "bytes that do not hash to the manifest's"
    try:
        done = 0
        while done < size:
            try:
                data = os.pread(run, min(layout.IO_CHUNK, size - done), at + done)
            except OSError as exc:
                why = f"it cannot be read: {exc.strerror or exc}"
                break
            if not data:  # the run shrank since its size was checked
                break
            hasher.update(data)
            files.write_all(out, data)
            done += len(data)
        if done == size and hasher.hexdigest() == digest:
            os.fchmod(out, mode & 0o777)
            return None
    finally:
        os.close(out)
    os.unlink(dest)
    return why


def _entries(base: Path, unlisted: dict[str, str]) -> Iterator[tuple[float, int, Path]]:
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


def _touch(blob: int | str, st: os.stat_result) -> None:
    """Record a blob's use (its atime, for LRU eviction) when the last one is an hour old."""
    now = time.time()
    if st.st_atime < now - TOUCH_AFTER:
        with contextlib.suppress(OSError):
            if isinstance(blob, int):  # an open blob
                os.utime(blob, (now, FROZEN_MTIME))
            else:  # a name just checked by lstat: never through a link swapped in since
                os.utime(blob, (now, FROZEN_MTIME), follow_symlinks=False)


def _more(items: Any) -> str:
    return f" (and {len(items) - 1} more)" if len(items) > 1 else ""


def open_tier(
    environ: Mapping[str, str],
    *,
    local_cache: str = "",
    local_cache_size: str = "",
    local_cache_mode: str = "",
) -> tuple[LocalTier | None, list[str], TierChoice]:
    """The tier asked for (``local-cache``, then ``GPUCI_LOCAL_CACHE``, then ``auto``: see
    :mod:`gpuci.cache._stores.tier_policy`).

    Returns (tier, warnings, choice): the tier is None when off, or when the folder could be
    written by another user (then the warning says why, and the job goes on with the store
    alone); ``choice`` says which and why, for the output and the summary. Raises InputError
    for an unknown mode or an unreadable size.
    """
    mode = parse_mode(local_cache_mode)
    limit = parse_size(local_cache_size or DEFAULT_SIZE)
    choice = choose(environ, local_cache)
    if not choice.on or choice.root is None:
        return None, [], choice
    problem = private_root_problem(choice.root, runner_uid(environ))
    if problem is not None:
        return (
            None,
            [
                f"local cache not used: {problem} (fix: point local-cache at a folder only "
                "this user can write, or remove it so gpu-ci recreates it 0700)"
            ],
            TierChoice(False, None, f"{choice.root} is not private to this user"),
        )
    return LocalTier(choice.root, limit, mode), [], choice
