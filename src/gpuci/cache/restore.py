"""``cache-weights restore``: find the key, check the manifest, stream the tree into place.

Read top to bottom: look up the ref (exact key, then restore-keys prefixes, newest first);
fetch the manifest and verify it hashes to its name; refuse anything that would write outside
the target before touching the disk; build each root in a staging folder next to it (same
filesystem, so the final rename is atomic); stream every file in with parallel ranged GETs,
checking sha256 on the way; rename into place. Any failure removes the staging folder, and a
killed restore's leftovers are swept by the next one, so a partial file never carries a final
name.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci import journal
from gpuci.cache import hf, layout, refs, usage
from gpuci.cache import manifest as mf
from gpuci.cache.common import (
    CREDENTIAL_SOURCES,
    Connections,
    plan_store,
    store_url,
    summary_table,
    throttle_signals,
)
from gpuci.cache.common import outputs as _outputs
from gpuci.cache.refs import fetch_by_digest, fetch_manifest
from gpuci.cache.select import select, unmatched
from gpuci.cache.store import LocalStore, Store, describe
from gpuci.cache.tier import LINK_MIN, LocalTier, open_tier
from gpuci.cache.tree import resolve_path
from gpuci.errors import ExitCode, InfraError, InputError, IntegrityError
from gpuci.retry import aws_max_attempts
from gpuci.runtime import Result, Runtime
from gpuci.units import human_bytes

_TRASH_SUFFIX = "-replaced"  # the staging folder's sibling holding what a merge replaced
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Headroom kept free on the target filesystem beyond the tree itself.
DISK_MARGIN = 64 << 20


@dataclass
class _Root:
    index: int
    kind: str
    target: Path
    staging: Path

    @property
    def trash(self) -> Path:
        """Where a merge moves what stood in the way (swept like the staging folder)."""
        return self.staging.with_name(self.staging.name + _TRASH_SUFFIX)

    @property
    def build(self) -> Path:
        """Where entries of this root are created inside the staging folder."""
        return self.staging if self.kind == "dir" else self.staging / self.target.name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(target: Path) -> None:
    """Remove staging folders left by killed restores of ``target`` (their process is gone)."""
    parent = target.parent
    if not parent.is_dir():
        return
    stem = f"{layout.STAGING_PREFIX}{target.name}."
    for item in parent.iterdir():
        if not item.name.startswith(stem):
            continue
        pid = item.name[len(stem) :].removesuffix(_TRASH_SUFFIX)
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(item, ignore_errors=True)


def _disk_error(exc: OSError, where: Path, need: int) -> InfraError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return InfraError(
            f"disk full while restoring into {where.parent} (the tree needs {human_bytes(need)})",
            hint="free disk space on the runner or restore to a larger volume",
        )
    return InfraError(
        f"cannot write the restore into {where.parent}: {exc.strerror or exc}",
        hint="check the path is writable and on a healthy filesystem",
    )


def _place(root: _Root) -> None:
    """Move a finished staging tree into place: one rename when the target is new."""
    target = root.target
    if root.kind == "file":
        if not os.path.lexists(root.build):  # a partial restore that picked nothing here
            root.staging.rmdir()
            return
        os.replace(root.build, target)  # a rename replaces a link at target, never follows it
        root.staging.rmdir()
        return
    if not os.path.lexists(target):
        os.rename(root.staging, target)
        return
    try:
        top = os.open(target, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        raise InputError(
            f"path '{target}' exists and is not a folder, so the cached folder cannot go there",
            hint="remove it or restore to another path",
        ) from None
    try:
        _merge(root.staging, top, root.trash)
    finally:
        os.close(top)
    shutil.rmtree(root.staging, ignore_errors=True)
    shutil.rmtree(root.trash, ignore_errors=True)


# Descending into the target when merging: never through a symlink (ELOOP instead).
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _merge(src: Path, dest: int, trash: Path) -> None:
    """Merge the staged folder ``src`` into the open folder ``dest``, one name at a time.

    Every step is relative to a folder descriptor opened with ``O_NOFOLLOW``, so a symlink
    planted in the target (``models -> /etc``) is replaced by what the manifest says, never
    written through. A name the manifest makes a file or link replaces its namesake atomically.
    """
    for item in sorted(os.scandir(src), key=lambda i: i.name):
        name = item.name
        if not item.is_dir(follow_symlinks=False):  # a file or a link: one atomic rename
            if _is_real_dir(name, dest):
                _move_aside(name, dest, trash)
            os.replace(item.path, name, dst_dir_fd=dest)
            continue
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=dest)
        except FileNotFoundError:
            os.rename(item.path, name, dst_dir_fd=dest)  # new here: the whole subtree at once
            continue
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            _move_aside(name, dest, trash)  # a file or a (planted) link where a folder belongs
            os.rename(item.path, name, dst_dir_fd=dest)
            continue
        try:
            _merge(Path(item.path), sub, trash)
            os.fchmod(sub, stat.S_IMODE(item.stat(follow_symlinks=False).st_mode))
        finally:
            os.close(sub)


def _is_real_dir(name: str, dest: int) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(name, dir_fd=dest).st_mode)
    except FileNotFoundError:
        return False


def _move_aside(name: str, dest: int, trash: Path) -> None:
    """Move whatever holds ``name`` into the staging trash (removed with the staging folder)."""
    trash.mkdir(exist_ok=True)
    os.rename(name, trash / f"{len(os.listdir(trash))}", src_dir_fd=dest)


def _refuse_escaping_links(manifest: mf.Manifest, roots: list[_Root]) -> None:
    """A restored tree never holds a link that resolves outside it on the real filesystem.

    The manifest's links were checked against each other before anything was written; a merge
    into an existing folder can still meet links the job made there. A restored link that
    leaves its target through those is removed again, and the restore fails.
    """
    for entry in manifest.entries:
        if entry.type != "symlink":
            continue
        root = roots[entry.root].target
        link = root / entry.path
        inside = os.path.realpath(root)
        resolved = os.path.realpath(link)
        if resolved != inside and not resolved.startswith(inside + os.sep):
            link.unlink(missing_ok=True)
            raise InputError(
                f"restored symlink {link} -> {entry.target} resolves to {resolved}, outside "
                f"{root}, through links already in that folder; the link was removed",
                hint="restore into an empty folder, or remove the links the job left there",
            )


def check_space(
    manifest: mf.Manifest, roots: list[_Root], linked: AbstractSet[str] = frozenset()
) -> None:
    """Fail before downloading when a target filesystem cannot hold its share of the tree.

    Files the local tier will hardlink (``linked`` digests) take no new space.
    """
    need_by_dev: dict[int, tuple[int, Path]] = {}
    for root in roots:
        dev = os.stat(root.target.parent).st_dev
        size = sum(
            e.size for e in manifest.files if e.root == root.index and e.sha256 not in linked
        )
        prior = need_by_dev.get(dev, (0, root.target.parent))[0]
        need_by_dev[dev] = (prior + size, root.target.parent)
    for need, where in need_by_dev.values():
        free = shutil.disk_usage(where).free
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


def _fill_tier(tier: LocalTier, fetched: list[tuple[mf.Entry, Path]]) -> None:
    """Give the local tier the files just fetched and verified (links, no second copy)."""
    for entry, path in fetched:
        if entry.size >= LINK_MIN and not entry.mode & 0o111:
            tier.adopt(path, entry.sha256)
        else:  # small or executable: the job keeps its own writable file with its mode
            tier.copy_in(path, entry.sha256)


def _linkable(tier: LocalTier | None, manifest: mf.Manifest, roots: list[_Root]) -> set[str]:
    """Digests the tier holds and will hardlink (same filesystem, large, not executable)."""
    if tier is None or tier.mode != "link" or not tier.root.is_dir():
        return set()
    devs = {os.stat(r.target.parent).st_dev for r in roots}
    if devs != {os.stat(tier.root).st_dev}:
        return set()
    return {
        e.sha256
        for e in manifest.files
        if e.size >= LINK_MIN and not e.mode & 0o111 and tier.has(e.sha256, e.size, repair=False)
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
    roots: list[_Root] = []
    for index, (spec, raw) in enumerate(zip(manifest.roots, paths, strict=True)):
        target = resolve_path(raw)
        staging = target.parent / f"{layout.STAGING_PREFIX}{target.name}.{os.getpid()}"
        roots.append(_Root(index, spec["kind"], target, staging))
    need = manifest.total_bytes
    try:
        for root in roots:
            root.target.parent.mkdir(parents=True, exist_ok=True)
            sweep_stale(root.target)
        check_space(manifest, roots, _linkable(tier, manifest, roots))
    except OSError as exc:
        raise _disk_error(exc, roots[0].target, need) from None
    files: list[tuple[mf.Entry, Path]] = []
    moved = Moved(placed={})
    try:
        for root in roots:
            root.staging.mkdir()
        dirs: list[tuple[Path, int]] = []
        for entry in manifest.entries:
            base = roots[entry.root].build
            path = base / entry.path if entry.path else base
            if entry.type == "dir":
                path.mkdir(parents=True, exist_ok=True)
                dirs.append((path, entry.mode))
            elif entry.type == "file":
                path.parent.mkdir(parents=True, exist_ok=True)
                if entry.size == 0:
                    if entry.sha256 != EMPTY_SHA256:
                        raise IntegrityError(
                            f"{entry.path}: the manifest gives an empty file a non-empty hash",
                            hint="the manifest is corrupt; save the key again",
                        )
                    path.touch()
                    path.chmod(mf.placed_mode(entry.mode))
                elif tier is not None and (
                    got := tier.place(entry.sha256, entry.size, path, mf.placed_mode(entry.mode))
                ):
                    moved.from_local += got.size
                    assert moved.placed is not None
                    moved.placed[got.how] = moved.placed.get(got.how, 0) + 1
                else:
                    files.append((entry, path))
        if files:  # a warm restore from the tier skips the network machinery entirely
            moved.downloaded, moved.connections = _download(store, files, rt, label)
        if tier is not None and files:
            _fill_tier(tier, files)
        for entry in manifest.entries:
            if entry.type == "symlink":
                base = roots[entry.root].build
                link = base / entry.path
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(entry.target, link)
        for path, mode in reversed(dirs):
            path.chmod(mf.placed_mode(mode) | 0o700)
        for root in roots:
            _place(root)
        _refuse_escaping_links(manifest, roots)
    except OSError as exc:
        _cleanup(roots)
        raise _disk_error(exc, roots[0].target, need) from None
    except BaseException:
        _cleanup(roots)
        raise
    if tier is not None:
        tier.evict()
    return moved


def _download(
    store: Store, files: list[tuple[mf.Entry, Path]], rt: Runtime, label: str
) -> tuple[int, Connections]:
    from gpuci.cache.transfer import Downloader, download_concurrency  # only when fetching

    meter = rt.progress(label, sum(e.size for e, _ in files))
    _, attempts = retry_settings_for(rt)
    control = download_concurrency(rt.environ)
    downloader = Downloader(store, control, meter.advance, attempts)
    try:
        with throttle_signals(store, control):
            downloader.fetch(files)
    finally:
        meter.close()
    return downloader.bytes, Connections.of(control)


def _endpoint(store: Store) -> str:
    """The S3 endpoint when not AWS's, fit to record and print (provenance replays it)."""
    from gpuci.cache.store import redact_url

    endpoint = getattr(store, "endpoint_url", None)
    return redact_url(str(endpoint)) if endpoint else ""


def retry_settings_for(rt: Runtime) -> tuple[str, int]:
    """The same attempt count botocore uses, for the data path (no boto3 import needed)."""
    return "standard", aws_max_attempts(rt.environ)


def _cleanup(roots: list[_Root]) -> None:
    for root in roots:
        shutil.rmtree(root.staging, ignore_errors=True)
        shutil.rmtree(root.trash, ignore_errors=True)


def outputs(**values: Any) -> dict[str, Any]:
    """Restore's outputs: the shared ones plus ``populated`` (false unless populate ran)."""
    return _outputs(populated=False, **values)


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


def pick(store: Store, manifest: mf.Manifest, values: dict[str, Any]) -> mf.Manifest:
    """Apply hf-revision, then include/exclude: the part of the tree this restore wants."""
    revision = str(values.get("hf-revision") or "").strip()
    if values.get("layout") == "hf" and revision:
        commit = revision
        for entry in manifest.files:
            if entry.path == f"refs/{revision}" and 0 < entry.size <= 4096:
                commit = read_entry(store, entry).decode(errors="replace").strip()
        manifest = hf.pick_revision(manifest, revision, commit)
    return select(manifest, values.get("include") or [], values.get("exclude") or [])


def target_paths(values: dict[str, Any], rt: Runtime) -> list[str]:
    if values.get("layout") == "hf":
        return hf.paths(values, rt.environ)
    paths: list[str] = values.get("path") or []
    if not paths:
        raise InputError("no path to restore into", hint="list the target folders in path")
    return paths


def _tier_warnings(result: Result, tier: LocalTier | None) -> None:
    for note in tier.warnings() if tier is not None else []:
        result.warning(note, "gpu-ci local cache")


def _local_bytes(tier: LocalTier | None, manifest: mf.Manifest) -> int:
    if tier is None:
        return 0
    return sum(
        e.size for e in manifest.files if e.size and tier.has(e.sha256, e.size, repair=False)
    )


def fill_on_miss(*args: Any) -> Result:
    from gpuci.cache.populate import fill_on_miss as fill  # subprocess only when populating

    return fill(*args)


def _plan_without_credentials(key: str, url: str, start: float) -> Result:
    """A dry run with no AWS credentials here: the lookup is skipped, not failed."""
    result = Result(command="cache-weights restore")
    result.headline = (
        f"would need credentials: lookup of {key} in {url} skipped, no AWS credentials on this "
        f"machine; a real run needs read access to the bucket ({CREDENTIAL_SOURCES})"
    )
    seconds = time.monotonic() - start
    result.outputs = outputs(
        hit=False, matched="", manifest="", down=0, up=0, files=0, seconds=seconds
    )
    result.summary.append(summary_table(key, "lookup skipped: no credentials", 0, 0, 0, seconds))
    result.report = {
        "key": key,
        "store": url,
        "dry_run": True,
        "lookup": "skipped",
        "reason": "no AWS credentials on this machine",
        "needs": f"read access to the bucket: {CREDENTIAL_SOURCES}",
    }
    return result


def _foreign_repo(result: Result, found: Any, other: str, values: dict[str, Any]) -> None:
    """A match saved for another Hugging Face repo: exit 2 for the key itself, a miss for a
    restore-keys prefix (another repo's weights are never a start for this one)."""
    ref, exact = found
    wanted = hf.repo_folder(str(values.get("hf-repo")))
    if exact:
        raise InputError(
            f"key {ref.key} holds {other}, not {wanted}: restoring it would load another model",
            hint="give each hf-repo its own key (e.g. put the repo id in the key)",
        )
    result.warning(
        f"restore-keys matched {ref.key}, saved for {other}, not {wanted}: skipped",
        "gpu-ci cache: another repo",
    )


@dataclass
class _Request:
    """A restore's inputs, checked: what to look up, where, and what to do on a miss."""

    values: dict[str, Any]
    start: float
    key: str
    label: str
    by_manifest: str
    paths: list[str]
    restore_keys: list[str]
    store: Store
    empty_local: bool  # a local store with nothing saved yet
    tier: LocalTier | None
    namespace: str
    lookup_only: bool
    fail_on_miss: bool
    populate: str


@dataclass
class _Match:
    """What the lookup found and the plan picked from it."""

    ref: refs.Ref
    exact: bool
    whole: mf.Manifest
    manifest_bytes: int
    manifest: mf.Manifest
    partial: bool
    matched_key: str  # "" for a restore by digest: it matched no key (the digest is `manifest`)
    outcome: str
    described: dict[str, Any]  # what the report says of the match, planned or done

    @property
    def files(self) -> int:
        return len(self.manifest.files)

    @property
    def size(self) -> int:
        return self.manifest.total_bytes


def run(values: dict[str, Any], rt: Runtime) -> Result:
    """Restore: lookup -> plan -> place -> report (a miss, a dry run or lookup-only stop early)."""
    start = time.monotonic()
    by_manifest = _manifest_input(values)
    label = f"manifest {by_manifest[:12]}"
    key = refs.check_key(values["key"]) if values.get("key") else label
    paths = target_paths(values, rt)
    restore_keys = [refs.check_key(p, "restore-keys") for p in values.get("restore-keys") or []]
    store = plan_store(values, rt)
    if store is None:
        return _plan_without_credentials(key, store_url(values, rt), start)
    tier, tier_notes = open_tier(values, rt.environ)
    req = _Request(
        values=values,
        start=start,
        key=key,
        label=label,
        by_manifest=by_manifest,
        paths=paths,
        restore_keys=restore_keys,
        store=store,
        empty_local=isinstance(store, LocalStore) and not store.exists(),
        tier=tier,
        namespace=layout.namespace(rt.environ),
        lookup_only=bool(values.get("lookup-only")),
        fail_on_miss=bool(values.get("fail-on-miss")),
        populate=str(values.get("populate") or "").strip(),
    )
    result = Result(command="cache-weights restore")
    for note in tier_notes:
        result.warning(note, "gpu-ci local cache")
    match = _lookup(req, result)
    if match is None:
        return _report_miss(req, rt, result)
    _plan(req, match, result)
    if rt.dry_run or req.lookup_only:
        return _report_plan(req, match, rt, result)
    moved = restore_tree(
        req.store, match.manifest, req.paths, rt, f"restore {match.ref.key}", req.tier
    )
    return _report_restore(req, match, moved, rt, result)


def _manifest_input(values: dict[str, Any]) -> str:
    """The manifest digest to restore by ('' when restoring by key), checked against the rest."""
    by_manifest = str(values.get("manifest") or "").strip()
    if by_manifest:
        by_manifest = layout.manifest_digest(by_manifest)
        if str(values.get("populate") or "").strip() or values.get("restore-keys"):
            raise InputError(
                "manifest restores one exact tree: populate and restore-keys do not apply",
                hint="drop populate and restore-keys, or restore by key instead",
            )
    elif not str(values.get("key") or "").strip():
        raise InputError(
            "restore needs a key or manifest",
            hint="give key (a cache key) or manifest (a sha256 from provenance.json)",
        )
    return by_manifest


def _lookup(req: _Request, result: Result) -> _Match | None:
    """Find the ref (by manifest, key or restore-keys prefix) and fetch its manifest."""
    store, values = req.store, req.values
    ignored: list[str] = []
    whole: mf.Manifest | None = None
    manifest_bytes = 0
    if req.by_manifest:  # one exact tree, whatever the keys name now
        found: tuple[refs.Ref, bool] | None = (
            refs.Ref(key=req.label, manifest=req.by_manifest),
            True,
        )
        whole, manifest_bytes = fetch_by_digest(store, req.by_manifest)
    else:
        found = (
            None
            if req.empty_local
            else refs.lookup(store, req.namespace, req.key, req.restore_keys, ignored)
        )
    for warning in ignored:
        result.warning(warning, "gpu-ci cache: ref ignored")
    if found is not None and whole is None:
        whole, manifest_bytes = fetch_manifest(store, found[0].manifest)
    hf_layout = whole is not None and values.get("layout") == "hf"
    if whole is not None and hf_layout and (other := hf.foreign_folder(whole, values)):
        _foreign_repo(result, found, other, values)
        found = None
    if found is None:
        return None
    assert whole is not None
    ref, exact = found
    return _Match(ref, exact, whole, manifest_bytes, whole, False, "", "", {})


def _plan(req: _Request, match: _Match, result: Result) -> None:
    """Pick the files to place (include/layout) and describe the match for the report."""
    ref, whole, paths, values = match.ref, match.whole, req.paths, req.values
    if len(whole.roots) != len(paths):
        raise InputError(
            f"{ref.key} was saved from {len(whole.roots)} path(s), this restore lists {len(paths)}",
            hint="list as many paths, in the same order, as the save did",
        )
    match.manifest = pick(req.store, whole, values)
    nothing = unmatched(whole, values.get("include") or [])
    if nothing:
        result.warning(
            f"include {', '.join(repr(p) for p in nothing)} matches nothing in {ref.key} "
            f"({len(whole.files)} files); check the pattern (no '/' matches a file name "
            "anywhere, with '/' the whole path)",
            "gpu-ci cache: include matched nothing",
        )
    match.partial = len(match.manifest.files) != len(whole.files)
    match.matched_key = "" if req.by_manifest else ref.key
    match.outcome = "hit" if match.exact else f"partial hit ({ref.key})"
    tier = req.tier
    match.described = {
        "key": req.key,
        "matched_key": ref.key,
        "hit": match.exact,
        "manifest": ref.manifest,
        "store": req.store.url,
        "local_cache": str(tier.root) if tier else None,
        "local_cache_mode": tier.mode if tier else None,
        "files": match.files,
        "bytes": match.size,
    }


def _report_miss(req: _Request, rt: Runtime, result: Result) -> Result:
    """Nothing matched: say so, then populate, fail (fail-on-miss) or just report the miss."""
    key, store, restore_keys = req.key, req.store, req.restore_keys
    seconds = time.monotonic() - req.start
    verb = "would miss" if rt.dry_run else "miss"
    where = describe(store) + (" (no cache saved there yet)" if req.empty_local else "")
    result.headline = (
        f"{verb}: no cache for {key}"
        + (f" or prefixes {', '.join(restore_keys)}" if restore_keys else "")
        + f" in {where}"
    )
    result.outputs = outputs(
        hit=False, matched="", manifest="", down=0, up=0, files=0, seconds=seconds
    )
    result.summary.append(summary_table(key, verb, 0, 0, 0, seconds))
    result.report = {"key": key, "store": store.url, "hit": False, "dry_run": rt.dry_run}
    if req.populate and not req.lookup_only:
        return fill_on_miss(req.values, rt, result, req.paths, req.start)
    if req.fail_on_miss:
        result.exit_code = ExitCode.CHECK_FAILED
        result.error(
            f"cache miss for {key} in {describe(store)} and fail-on-miss is set",
            "gpu-ci cache: miss",
        )
    return result


def _report_plan(req: _Request, match: _Match, rt: Runtime, result: Result) -> Result:
    """A dry run or lookup-only: what a restore would place, and from where."""
    ref, files, size = match.ref, match.files, match.size
    seconds = time.monotonic() - req.start
    local = _local_bytes(req.tier, match.manifest)
    verb = "would restore" if rt.dry_run else "found"
    would_populate = bool(req.populate and not match.exact)
    result.headline = (
        f"{verb} {ref.key} ({match.outcome}): {files} files, {human_bytes(size)}"
        + (f" ({human_bytes(local)} from the local tier)" if local else "")
        + (f", picked from {len(match.whole.files)}" if match.partial else "")
        + ("; then populate and save" if rt.dry_run and would_populate else "")
    )
    result.outputs = outputs(
        hit=match.exact,
        matched=match.matched_key,
        manifest=ref.manifest,
        down=0,
        up=0,
        files=files,
        seconds=seconds,
    )
    result.summary.append(
        summary_table(req.key, f"{verb}: {match.outcome}", files, size, 0, seconds)
    )
    result.report = {
        **match.described,
        "bytes_local": local,
        "bytes_remote": size - local,
        "dry_run": rt.dry_run,
        "lookup_only": req.lookup_only,
        "would_populate": would_populate,
    }
    _tier_warnings(result, req.tier)
    return result


def _report_restore(
    req: _Request, match: _Match, moved: Moved, rt: Runtime, result: Result
) -> Result:
    """After placing: record the use and the journal entry, then report (and populate a
    partial hit)."""
    ref, store, manifest = match.ref, req.store, match.manifest
    files, size = match.files, match.size
    seconds = time.monotonic() - req.start
    if not req.by_manifest:  # no key was used: nothing to record
        unrecorded = usage.touch(store, req.namespace, ref.key)
        if unrecorded:
            result.warning(
                f"restored, but the last use of {ref.key} was not recorded ({unrecorded}): prune "
                "--older-than will judge the key by when it was saved; to record uses, let these "
                "credentials write uses/ in the store",
                "gpu-ci cache: last use not recorded",
            )
    journal.record(
        "cache-restore",
        {
            "key": req.key,
            "matched_key": ref.key,
            "manifest": ref.manifest,
            "store": store.url,
            "endpoint_url": _endpoint(store),
            "path": req.paths,
            "files": files,
            "bytes": size,
            "bytes_local": moved.from_local,
            "producer": manifest.producer,
        },
        rt.environ,
    )
    rate = (moved.downloaded + moved.from_local) / seconds / 1e6 if seconds > 0 else 0.0
    result.headline = (
        f"{match.outcome}: restored {ref.key}, {files} files, {human_bytes(size)} "
        f"({human_bytes(moved.downloaded)} from the store, "
        f"{human_bytes(moved.from_local)} from the local tier) in {seconds:.1f}s "
        f"({rate:.0f} MB/s"
        + (f", connections: {moved.connections.text()}" if moved.connections else "")
        + ")"
    )
    result.outputs = outputs(
        hit=match.exact,
        matched=match.matched_key,
        manifest=ref.manifest,
        down=moved.downloaded,  # the tree's bytes; the manifest is in the report
        up=0,
        files=files,
        seconds=seconds,
        local=moved.from_local,
        connections=moved.connections,
    )
    result.summary.append(
        summary_table(
            req.key,
            match.outcome,
            files,
            size,
            moved.downloaded + moved.from_local,
            seconds,
            moved.connections,
        )
    )
    result.report = {
        **match.described,
        "bytes_downloaded": moved.downloaded,
        "bytes_from_local": moved.from_local,
        "bytes_metadata": match.manifest_bytes,
        "placed": moved.placed,
        "producer": manifest.producer,
        "connections": moved.connections.report() if moved.connections else None,
    }
    _tier_warnings(result, req.tier)
    if req.populate and not match.exact and not req.lookup_only:
        return fill_on_miss(req.values, rt, result, req.paths, req.start)
    return result
