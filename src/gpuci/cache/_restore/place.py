"""Place a manifest's tree: the restore's place phase (the command is
:mod:`gpuci.cache._restore.command`: lookup -> plan -> place -> report).

The manifest is fetched and verified by then; refuse anything that would write outside
the target before touching the disk (and what the targets already hold would make fail: a
target of the wrong type, a path given twice, a cached link leaving through the job's links);
build each root in a staging folder next to it (same filesystem, so the final rename is atomic;
:mod:`gpuci.cache._restore.staging`); stream every file in with parallel ranged GETs, checking
sha256 on the way; rename or merge into place (:mod:`gpuci.cache._restore.merge`). Any failure
puts back what the merge replaced and removes the staging folder, and a killed restore's
leftovers are swept by the next one, so a partial file never carries a final name. The
runner's SIGTERM waits out the merge and its undo (:mod:`gpuci.sigterm_hold`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from gpuci.cache import _layout as layout
from gpuci.cache._common import (
    Connections,
    throttle_signals,
)
from gpuci.cache._format import manifest as mf
from gpuci.cache._restore import staging as stage
from gpuci.cache._restore.merge import (
    Placement,
    not_a_file,
    not_a_folder,
    refuse_escaping_links,
    refuse_links_leaving,
)
from gpuci.cache._stores import tier_evict
from gpuci.cache._stores.base import Store
from gpuci.cache._stores.tier import LocalTier, Placed
from gpuci.errors import InfraError, InputError, IntegrityError
from gpuci.inputs import resolve_path
from gpuci.runtime import Runtime
from gpuci.sigterm_hold import sigterm_held
from gpuci.units import human_bytes

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Headroom kept free on the target filesystem beyond the tree itself.


DISK_MARGIN = 64 << 20
# Files placed from the local tier at once: enough to overlap kernel copies on a few cores; more
# only queue on the same disk.
PLACE_THREADS = min(4, os.cpu_count() or 1)
PARALLEL_MIN = 8 << 20  # files this large go to the placing threads; smaller ones are copied inline
_File = tuple[mf.Entry, str]  # a file to fill and where, in staging


@dataclass
class _Root:
    """One path the restore places a root of the manifest at, and where it is built."""

    index: int
    kind: str
    target: Path
    staging: stage.Staging | None = None  # made once the checks before writing passed
    placement: Placement | None = None

    @property
    def build(self) -> Path:
        """Where this root is built: the folder, or the one file."""
        assert self.staging is not None
        return self.staging.tree


def _disk_error(exc: OSError, where: Path, need: int) -> InfraError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return InfraError(
            f"disk full while restoring into {where.parent} (the tree needs {human_bytes(need)})",
            hint="free disk space on the runner or restore to a larger volume",
        )
    if exc.errno == errno.EXDEV:
        return InfraError(
            f"cannot move the restore into {where}: a folder in it is on another filesystem "
            f"({exc.strerror or exc})",
            hint="restore to a path with no mount point inside it",
        )
    return InfraError(
        f"cannot write the restore into {where.parent}: {exc.strerror or exc}",
        hint="check the path is writable and on a healthy filesystem",
    )


def check_space(
    manifest: mf.Manifest, roots: list[_Root], linked: AbstractSet[str] = frozenset()
) -> None:
    """Fail before downloading when a target filesystem cannot hold its share of the tree.

    Files the local tier will hardlink (``linked`` digests) take no new space.
    """
    need_by_dev: dict[int, tuple[int, Path]] = {}
    for root in roots:
        home = stage.home(root.target)  # the filesystem the root is built on
        dev = os.stat(home).st_dev
        size = sum(
            e.size for e in manifest.files if e.root == root.index and e.sha256 not in linked
        )
        prior = need_by_dev.get(dev, (0, home))[0]
        need_by_dev[dev] = (prior + size, home)
    for need, where in need_by_dev.values():
        fs = os.statvfs(where)  # what shutil.disk_usage reads, without importing shutil
        free = fs.f_bavail * fs.f_frsize
        if need + DISK_MARGIN > free:
            raise InfraError(
                f"not enough disk to restore into {where}: the tree needs {human_bytes(need)}, "
                f"{human_bytes(free)} is free",
                hint="free disk space on the runner or restore to a larger volume",
            )


@dataclass
class Moved:
    """Bytes a restore fetched from the store and bytes it placed from the local tier."""

    downloaded: int = 0
    from_local: int = 0
    placed: dict[str, int] | None = None  # how local files got there: reflink/hardlink/copy
    connections: Connections | None = None  # None: nothing came from the store


def _fill_tier(tier: LocalTier, fetched: list[tuple[mf.Entry, Path]], room: bool) -> None:
    """Give the local tier the files just fetched and verified: in ``link`` mode by linking
    them (:meth:`LocalTier.adopt`: no second copy, no room needed, but for a tier on another
    filesystem than the job's, where it copies only with room to spare). The others are there
    already, written there once (:mod:`gpuci.cache._stores.tier_fill`), when the tier's disk had
    ``room`` for them; this copies only what that could not write, which ``copy_in`` sees in
    one lstat. Without room (or once the disk filled up), nothing is copied in: the disk may
    be the one the job needs next."""
    copies = room and not tier.filled_up
    for entry, path in fetched:
        if tier.links(entry.size, entry.mode):
            tier.adopt(path, entry.sha256)
        elif copies and not (entry.pack and tier.keeps_runs):  # runs hold packed files
            # executable or private: the job keeps its own
            tier.copy_in(path, entry.sha256, size=entry.size)


def _place_local(tier: LocalTier, files: list[_File], moved: Moved) -> list[_File]:
    """Place what the tier holds, several files at once; returns the files left to fetch.

    The kernel copies (``copy_file_range`` and ``FICLONE`` release the GIL), so on a runner
    with a few cores the copies of different files overlap, where ``cp -a`` does one at a time.
    Largest first, so one big shard does not start last; the small files meanwhile in this
    thread, where a thread hop per 64 KiB file would cost more than the copy, and the packed
    ones cut from runs there too, where the tier keeps them. The first failure is raised once
    every copy has stopped (the pool's ``with`` waits), so the caller's cleanup never races a
    copy still writing into staging.
    """

    def one(item: _File) -> Placed | None:
        entry, path = item
        return tier.place(entry.sha256, entry.size, path, mf.placed_mode(entry.mode))

    def small_ones() -> tuple[list[_File], list[Placed | None]]:
        rest = small + (_place_from_runs(tier, packed, moved) if packed else [])
        return rest, [one(item) for item in rest]

    # Runs first for packed files, whatever their size: a blob of one is only an older tier's.
    packed = [f for f in files if f[0].pack] if tier.keeps_runs else []
    others = [f for f in files if not f[0].pack] if packed else files
    big, small = _big_copies(tier, others)
    if big and len(files) > 1 and PLACE_THREADS > 1:
        from concurrent.futures import ThreadPoolExecutor  # (and logging): only when it pays

        with ThreadPoolExecutor(min(PLACE_THREADS, len(big))) as pool:
            pending = [pool.submit(one, item) for item in big]
            small, placed_small = small_ones()
            results = [future.result() for future in pending] + placed_small
    else:
        small, placed_small = small_ones()
        results = [one(item) for item in big] + placed_small
    order = big + small
    left = []
    assert moved.placed is not None
    for item, got in zip(order, results, strict=True):
        if got is None:
            left.append(item)
        else:
            moved.from_local += got.size
            moved.placed[got.how] = moved.placed.get(got.how, 0) + 1
    if not tier.keeps_runs:  # ``link``: its blobs first (hardlinks), then any runs
        left = _place_from_runs(tier, left, moved)
    return left


def _big_copies(tier: LocalTier, files: list[_File]) -> tuple[list[_File], list[_File]]:
    """(the big files the tier copies, largest first; the rest). A file ``link`` mode links is
    no copy, whatever its size: a link (or a clone) only writes an inode, so it is made inline
    like a small file's, and a warm ``link`` restore starts no thread (nor imports the pool's
    modules; docs/benchmarks.md#figures-behind-the-code)."""
    big: list[_File] = []
    small: list[_File] = []
    tier_dev = _device(tier.root) if tier.mode == "link" else None
    for item in files:
        entry, path = item
        copies = entry.size >= PARALLEL_MIN and not (
            tier.links(entry.size, entry.mode) and _device(os.path.dirname(path)) == tier_dev
        )
        (big if copies else small).append(item)
    big.sort(key=lambda f: -f[0].size)
    return big, small


def _device(path: str | Path) -> int | None:
    """The filesystem ``path`` is on (None when it cannot be looked at): a hardlink from the
    tier needs the tier's."""
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def _place_from_runs(tier: LocalTier, files: list[_File], moved: Moved) -> list[_File]:
    """Place the packed files the tier's runs hold (each hashed on its way out); returns the
    files left: the unpacked ones, and packed ones no run holds (a blob may, from ``link``
    mode or an older tier). ``link`` mode, which keeps a blob per file, adopts the files it
    cut from a run, so its next restore hardlinks them."""
    by_pack: dict[str, list[_File]] = {}
    left = []
    for item in files:
        if item[0].pack:
            by_pack.setdefault(item[0].pack, []).append(item)
        else:
            left.append(item)
    assert moved.placed is not None
    for pack, items in by_pack.items():
        wanted = [(e.offset, e.size, e.sha256, Path(p), mf.placed_mode(e.mode)) for e, p in items]
        for item, placed in zip(items, tier.runs.place(pack, wanted), strict=True):
            if placed:
                moved.from_local += item[0].size
                moved.placed["copy"] = moved.placed.get("copy", 0) + 1
                if tier.links(item[0].size, item[0].mode):
                    tier.adopt(Path(item[1]), item[0].sha256)
            else:
                left.append(item)
    return left


def _linkable(tier: LocalTier | None, manifest: mf.Manifest, roots: list[_Root]) -> set[str]:
    """Digests the tier holds and will hardlink (same filesystem, see LocalTier.links)."""
    if tier is None or tier.mode != "link" or not tier.root.is_dir():
        return set()
    devs = {os.stat(stage.home(r.target)).st_dev for r in roots}
    if devs != {os.stat(tier.root).st_dev}:
        return set()
    return {
        e.sha256
        for e in manifest.files
        if tier.links(e.size, e.mode) and tier.has(e.sha256, e.size, repair=False)
    }


def restore_tree(
    store: Store,
    manifest: mf.Manifest,
    paths: list[str],
    rt: Runtime,
    label: str,
    tier: LocalTier | None = None,
) -> Moved:
    """Materialise ``manifest`` at ``paths``, from the local tier first, then the store."""
    roots = _roots(manifest, paths)
    need = manifest.total_bytes
    try:
        _prepare(roots, manifest, tier)
    except OSError as exc:
        raise _disk_error(exc, roots[0].target, need) from None
    moved = Moved(placed={})
    try:
        for root in roots:
            root.staging = stage.make(root.target)
            if root.kind == "dir":
                root.build.mkdir()
        files, dirs = _build_skeleton(manifest, roots)
        _fill_files(store, files, rt, label, tier, moved)
        _make_symlinks(manifest, roots)
        for path, mode in reversed(dirs):
            os.chmod(path, mf.placed_mode(mode) | 0o700)
        with sigterm_held():
            _merge_or_undo(manifest, roots)
    except OSError as exc:
        _put_back(roots)
        raise _disk_error(exc, roots[0].target, need) from None
    except BaseException:
        _put_back(roots)
        raise
    for root in roots:
        assert root.staging is not None
        root.staging.remove()
    if tier is not None:
        tier_evict.evict(tier)
    return moved


def _roots(manifest: mf.Manifest, paths: list[str]) -> list[_Root]:
    """One root per manifest root; a path given twice would have two roots fight over it."""
    roots: list[_Root] = []
    seen: set[Path] = set()
    for index, (spec, raw) in enumerate(zip(manifest.roots, paths, strict=True)):
        target = resolve_path(raw)
        if target in seen:
            raise InputError(
                f"path '{target}' is given twice: each of the cache's {len(paths)} roots needs "
                "its own path",
                hint="list each path once",
            )
        seen.add(target)
        roots.append(_Root(index, spec["kind"], target))
    return roots


def _prepare(roots: list[_Root], manifest: mf.Manifest, tier: LocalTier | None) -> None:
    """Make the parents, sweep a killed restore's leftovers, refuse what the targets hold that
    would fail the restore once merging (before a byte is fetched), and check the free space."""
    for root in roots:
        _make_parent(root.target)
        stage.sweep_stale(root.target)
        _refuse_what_is_there(manifest, root)
    try:
        check_space(manifest, roots)
    except InfraError:  # only then ask the tier what it links (a lstat per file)
        linked = _linkable(tier, manifest, roots)
        if not linked:
            raise
        check_space(manifest, roots, linked)


def _make_parent(target: Path) -> None:
    """The target's folder, made as needed; a file on the way, or a name over the system's
    limit, is the path input's fault (exit 2), not the runner's disk."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG):
            raise
        why = "a name too long" if exc.errno == errno.ENAMETOOLONG else "a file on the way"
        raise InputError(
            f"path '{target}' cannot be restored to: {why} ({exc.filename})",
            hint="restore to a path whose folders are folders, with names of at most 255 bytes",
        ) from None


def _refuse_what_is_there(manifest: mf.Manifest, root: _Root) -> None:
    """A folder where the cached file goes, anything else where the cached folder goes, or a
    folder whose own links would lead a cached link outside: refused before any merge."""
    try:
        mode = os.lstat(root.target).st_mode
    except FileNotFoundError:
        return
    if root.kind == "file":
        if stat.S_ISDIR(mode) and any(e.root == root.index for e in manifest.entries):
            raise not_a_file(root.target)
    elif not stat.S_ISDIR(mode):
        raise not_a_folder(root.target)
    else:
        refuse_links_leaving(manifest, root.index, root.target)


def _place(roots: list[_Root]) -> None:
    """Move each finished staging tree into place: one rename when the target is new."""
    for root in roots:
        assert root.staging is not None
        if root.kind == "file" and not os.path.lexists(root.build):
            continue  # a partial restore that picked nothing here
        root.placement = Placement(root.target, root.staging)
        root.placement.place(root.kind)


def _merge_or_undo(manifest: mf.Manifest, roots: list[_Root]) -> None:
    """Place every root, and on any failure undo what the merges did. The caller holds the
    runner's SIGTERM over both (:mod:`gpuci.sigterm_hold`), so a cancel never leaves a
    target half old, half new; both are renames within the target's filesystem, so the
    hold is as short as the merge itself (no download, no staging folder's removal)."""
    try:
        _place(roots)
        refuse_escaping_links(manifest, [root.target for root in roots])
    except BaseException:
        _undo(roots)
        raise


def _undo(roots: list[_Root]) -> None:
    """What the merges replaced goes back (once: an undone placement has nothing left)."""
    for root in reversed(roots):
        if root.placement is not None:
            try:
                root.placement.undo()
            except OSError:
                pass  # the target's folder is gone: nothing to put back into


def _put_back(roots: list[_Root]) -> None:
    """A failed restore: what the merges replaced goes back, then the staging folders go."""
    _undo(roots)
    for root in roots:
        if root.staging is not None:
            root.staging.remove()


def _build_skeleton(
    manifest: mf.Manifest, roots: list[_Root]
) -> tuple[list[_File], list[tuple[str, int]]]:
    """Make the folders and empty files in staging; return the files to fill and the folders.

    Paths are ``str``s: a ``Path`` per file cost more than placing it from the tier
    (docs/benchmarks.md#figures-behind-the-code); the manifest's paths are normalised and
    relative (:func:`gpuci.cache._format.manifest.path_problem`), so joining them is one format.
    """
    files: list[_File] = []
    dirs: list[tuple[str, int]] = []
    made: set[str] = set()
    bases = [str(root.build) for root in roots]
    for entry in manifest.entries:
        base = bases[entry.root]
        path = f"{base}/{entry.path}" if entry.path else base
        if entry.type == "dir":
            Path(path).mkdir(parents=True, exist_ok=True)  # a Path per folder, not per file
            dirs.append((path, entry.mode))
        elif entry.type == "file":
            parent = os.path.dirname(path)
            if parent not in made:  # one mkdir per folder, not one per file
                Path(parent).mkdir(parents=True, exist_ok=True)
                made.add(parent)
            if entry.size == 0:
                if entry.sha256 != EMPTY_SHA256:
                    raise IntegrityError(
                        f"{entry.path}: the manifest gives an empty file a non-empty hash",
                        hint="the manifest is corrupt; save the key again",
                    )
                Path(path).touch()
                os.chmod(path, mf.placed_mode(entry.mode))
            else:
                files.append((entry, path))
    return files, dirs


def _fill_files(
    store: Store,
    files: list[_File],
    rt: Runtime,
    label: str,
    tier: LocalTier | None,
    moved: Moved,
) -> None:
    """Fill the files from the local tier, then the rest from the store (and into the tier)."""
    if tier is not None:
        files = _place_local(tier, files, moved)
    if not files:  # a warm restore from the tier skips the network machinery entirely
        return
    fetched = [(entry, Path(path)) for entry, path in files]
    moved.downloaded, moved.connections, room = _download(store, fetched, rt, label, tier)
    if tier is not None:
        _fill_tier(tier, fetched, room)


def _make_symlinks(manifest: mf.Manifest, roots: list[_Root]) -> None:
    """The manifest's symlinks, made last (their escapes are refused after placing)."""
    for entry in manifest.entries:
        if entry.type == "symlink":
            base = roots[entry.root].build
            link = base / entry.path
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(entry.target, link)


def _download(
    store: Store,
    files: list[tuple[mf.Entry, Path]],
    rt: Runtime,
    label: str,
    tier: LocalTier | None = None,
) -> tuple[int, Connections, bool]:
    """Fetch ``files``; returns the bytes downloaded, the connections used, and whether the
    tier's disk had room for them (the files were written into the tier as they came)."""
    from gpuci.cache._transfer.download import (  # only when fetching
        Downloader,
        download_concurrency,
    )

    meter = rt.progress(label, sum(e.size for e, _ in files))
    _, attempts = retry_settings_for(rt)
    control = download_concurrency(rt.environ)
    downloader = Downloader(store, control, meter.advance, attempts, tier)
    try:
        with throttle_signals(store, control):
            downloader.fetch(files)
    finally:
        meter.close()
    return downloader.bytes, Connections.of(control), downloader.fills_tier


def retry_settings_for(rt: Runtime) -> tuple[str, int]:
    """The same attempt count botocore uses, for the data path (no boto3 import needed)."""
    from gpuci.retry import aws_max_attempts  # only when fetching

    return "standard", aws_max_attempts(rt.environ)


def read_entry(store: Store, entry: mf.Entry) -> bytes:
    """One small file's bytes straight from the store (its blob, or its run of a pack)."""
    key = layout.pack_key(entry.pack) if entry.pack else layout.blob_key(entry.sha256)
    reader = store.open_range(key, entry.offset if entry.pack else 0, entry.size)
    buf = bytearray(entry.size)
    view, got = memoryview(buf), 0
    try:
        while got < entry.size:
            n = reader.readinto(view[got:])
            if n == 0:
                break
            got += n
    finally:
        reader.close()
    data = bytes(buf[:got])
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise IntegrityError(
            f"{entry.path}: the store's bytes do not match the manifest's hash",
            hint="the store holds a corrupt object; delete it and save the key again",
        )
    return data
