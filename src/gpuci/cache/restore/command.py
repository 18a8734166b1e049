"""``cache-weights restore``, the command: lookup -> plan -> place -> report.

Look up the ref (by manifest digest, exact key, then restore-keys prefixes, newest first) and
fetch its manifest; plan what to place (include, layout, the number of roots); place it with
:func:`gpuci.cache.restore.place.restore_tree`; report (record the use and the journal entry, then
headline, outputs, summary and report). A miss, a dry run and lookup-only stop early, each with
its own report; a miss or a partial hit may populate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpuci import journal
from gpuci.cache import layout
from gpuci.cache.common import (
    CREDENTIAL_SOURCES,
    plan_store,
    store_url,
    summary_table,
    tier_line,
)
from gpuci.cache.common import outputs as _outputs
from gpuci.cache.format import hf, refs
from gpuci.cache.format import manifest as mf
from gpuci.cache.format.refs import fetch_by_digest, fetch_manifest
from gpuci.cache.format.select import select, unmatched
from gpuci.cache.options import RestoreInputs
from gpuci.cache.restore.place import Moved, read_entry, restore_tree
from gpuci.cache.stores.base import Store, describe
from gpuci.cache.stores.file import LocalStore
from gpuci.cache.stores.tier import LocalTier, open_tier
from gpuci.cache.stores.tier_policy import TierChoice
from gpuci.errors import ExitCode, InputError
from gpuci.runtime import Result, Runtime
from gpuci.units import human_bytes


def run(inp: RestoreInputs, rt: Runtime) -> Result:
    """Restore: lookup -> plan -> place -> report (a miss, a dry run or lookup-only stop early)."""
    start = time.monotonic()
    by_manifest = _manifest_input(inp)
    label = f"manifest {by_manifest[:12]}"
    key = refs.check_key(inp.key) if inp.key else label
    paths = target_paths(inp, rt)
    restore_keys = [refs.check_key(p, "restore-keys") for p in inp.restore_keys]
    store = plan_store(inp, rt)
    if store is None:
        return _plan_without_credentials(key, store_url(inp, rt), start)
    tier, tier_notes, tier_choice = open_tier(
        rt.environ,
        local_cache=inp.local_cache,
        local_cache_size=inp.local_cache_size,
        local_cache_mode=inp.local_cache_mode,
    )
    req = _Request(
        inp=inp,
        start=start,
        key=key,
        label=label,
        by_manifest=by_manifest,
        paths=paths,
        restore_keys=restore_keys,
        store=store,
        empty_local=isinstance(store, LocalStore) and not store.exists(),
        tier=tier,
        tier_choice=tier_choice,
        namespace=layout.namespace(rt.environ),
        lookup_only=inp.lookup_only,
        fail_on_miss=inp.fail_on_miss,
        populate=inp.populate.strip(),
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
    # No key was used by a restore by digest: nothing to record.
    recording = (
        None if req.by_manifest else refs.UseRecording(req.store, req.namespace, match.ref.key)
    )
    moved = restore_tree(
        req.store, match.manifest, req.paths, rt, f"restore {match.ref.key}", req.tier
    )
    return _report_restore(req, match, moved, rt, result, recording)


@dataclass
class _Request:
    """A restore's inputs, checked: what to look up, where, and what to do on a miss."""

    inp: RestoreInputs
    start: float
    key: str
    label: str
    by_manifest: str
    paths: list[str]
    restore_keys: list[str]
    store: Store
    empty_local: bool  # a local store with nothing saved yet
    tier: LocalTier | None
    tier_choice: TierChoice
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


def _manifest_input(inp: RestoreInputs) -> str:
    """The manifest digest to restore by ('' when restoring by key), checked against the rest."""
    by_manifest = inp.manifest.strip()
    if by_manifest:
        by_manifest = layout.manifest_digest(by_manifest)
        if inp.populate.strip() or inp.restore_keys:
            raise InputError(
                "manifest restores one exact tree: populate and restore-keys do not apply",
                hint="drop populate and restore-keys, or restore by key instead",
            )
    elif not inp.key.strip():
        raise InputError(
            "restore needs a key or manifest",
            hint="give key (a cache key) or manifest (a sha256 from provenance.json)",
        )
    return by_manifest


def _lookup(req: _Request, result: Result) -> _Match | None:
    """Find the ref (by manifest, key or restore-keys prefix) and fetch its manifest."""
    store, inp = req.store, req.inp
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
    hf_layout = whole is not None and inp.layout == "hf"
    if whole is not None and hf_layout and (other := hf.foreign_folder(whole, inp.hf_repo)):
        _foreign_repo(result, found, other, inp)
        found = None
    if found is None:
        return None
    assert whole is not None
    ref, exact = found
    return _Match(ref, exact, whole, manifest_bytes, whole, False, "", "", {})


def _plan(req: _Request, match: _Match, result: Result) -> None:
    """Pick the files to place (include/layout) and describe the match for the report."""
    ref, whole, paths, inp = match.ref, match.whole, req.paths, req.inp
    if len(whole.roots) != len(paths):
        raise InputError(
            f"{ref.key} was saved from {len(whole.roots)} path(s), this restore lists {len(paths)}",
            hint="list as many paths, in the same order, as the save did",
        )
    match.manifest = pick(req.store, whole, inp)
    nothing = unmatched(whole, inp.include)
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
        "local_cache_policy": req.tier_choice.text,
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
    result.summary.append(tier_line(req.tier_choice))
    result.report = {
        "key": key,
        "store": store.url,
        "hit": False,
        "dry_run": rt.dry_run,
        "local_cache_policy": req.tier_choice.text,
    }
    if req.populate and not req.lookup_only:
        return fill_on_miss(req.inp, rt, result, req.paths, req.start)
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
    result.summary.append(tier_line(req.tier_choice))
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
    req: _Request,
    match: _Match,
    moved: Moved,
    rt: Runtime,
    result: Result,
    recording: refs.UseRecording | None,
) -> Result:
    """After placing: record it, then headline, outputs, summary and report (and populate a
    partial hit)."""
    ref, manifest = match.ref, match.manifest
    files, size = match.files, match.size
    seconds = time.monotonic() - req.start
    _record_restore(req, match, moved, rt, result, recording)
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
    result.summary.append(tier_line(req.tier_choice))
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
        return fill_on_miss(req.inp, rt, result, req.paths, req.start)
    return result


def _record_restore(
    req: _Request,
    match: _Match,
    moved: Moved,
    rt: Runtime,
    result: Result,
    recording: refs.UseRecording | None,
) -> None:
    """The key's last use in the store (prune reads it; written while the tree came) and the
    journal entry."""
    ref, store = match.ref, req.store
    if recording is not None:
        unrecorded = recording.result()
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
            "files": match.files,
            "bytes": match.size,
            "bytes_local": moved.from_local,
            "producer": match.manifest.producer,
        },
        rt.environ,
    )


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


def _foreign_repo(result: Result, found: Any, other: str, inp: RestoreInputs) -> None:
    """A match saved for another Hugging Face repo: exit 2 for the key itself, a miss for a
    restore-keys prefix (another repo's weights are never a start for this one)."""
    ref, exact = found
    wanted = hf.repo_folder(inp.hf_repo)
    if exact:
        raise InputError(
            f"key {ref.key} holds {other}, not {wanted}: restoring it would load another model",
            hint="give each hf-repo its own key (e.g. put the repo id in the key)",
        )
    result.warning(
        f"restore-keys matched {ref.key}, saved for {other}, not {wanted}: skipped",
        "gpu-ci cache: another repo",
    )


def fill_on_miss(*args: Any) -> Result:
    from gpuci.cache.restore.populate import fill_on_miss as fill  # subprocess only when populating

    return fill(*args)


def target_paths(inp: RestoreInputs, rt: Runtime) -> list[str]:
    if inp.layout == "hf":
        return hf.paths(inp.hf_repo, inp.path, rt.environ)
    paths = inp.path
    if not paths:
        raise InputError("no path to restore into", hint="list the target folders in path")
    return paths


def pick(store: Store, manifest: mf.Manifest, inp: RestoreInputs) -> mf.Manifest:
    """Apply hf-revision, then include/exclude: the part of the tree this restore wants."""
    revision = inp.hf_revision.strip()
    if inp.layout == "hf" and revision:
        commit = revision
        for entry in manifest.files:
            if entry.path == f"refs/{revision}" and 0 < entry.size <= 4096:
                commit = read_entry(store, entry).decode(errors="replace").strip()
        manifest = hf.pick_revision(manifest, revision, commit)
    return select(manifest, inp.include, inp.exclude)


def outputs(**values: Any) -> dict[str, Any]:
    """Restore's outputs: the shared ones plus ``populated`` (false unless populate ran)."""
    return _outputs(populated=False, **values)


def _endpoint(store: Store) -> str:
    """The S3 endpoint when not AWS's, fit to record and print (provenance replays it)."""
    from gpuci.cache.stores.base import redact_url

    endpoint = getattr(store, "endpoint_url", None)
    return redact_url(str(endpoint)) if endpoint else ""


def _local_bytes(tier: LocalTier | None, manifest: mf.Manifest) -> int:
    if tier is None:
        return 0
    return sum(
        e.size for e in manifest.files if e.size and tier.has(e.sha256, e.size, repair=False)
    )


def _tier_warnings(result: Result, tier: LocalTier | None) -> None:
    for note in tier.warnings() if tier is not None else []:
        result.warning(note, "gpu-ci local cache")
