"""``cache-weights save``: hash a tree, upload only what the store lacks, then manifest, then ref.

Order is the whole safety story: blobs and packs first, the manifest once every object it names
exists, the ref last and conditionally. A save killed at any point leaves, at worst, orphan
blobs (harmless, prunable), never a ref naming something missing. Small files are deduplicated
against the manifests this job already knows (the key's current one and any restored earlier in
the job), so re-saving after changing one file uploads that file plus metadata.

The phases: scan (:mod:`gpuci.cache.format.tree`); hash and upload, together
(:mod:`gpuci.cache.save.upload`: each large file read once, its upload started as soon as its
name is known; small files in packs); publish (:func:`publish_tree`: the manifest, then the ref,
moved conditionally; a lost race leaves the other job's tree standing and says so); report
(:mod:`gpuci.cache.save.report`); over one :class:`gpuci.cache.save.state.Saver`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from gpuci.cache import layout
from gpuci.cache.common import plan_store, store_url, tier_line
from gpuci.cache.format import hf, refs
from gpuci.cache.format import manifest as mf
from gpuci.cache.format.tree import Tree, resolve_path, scan
from gpuci.cache.options import SaveInputs
from gpuci.cache.save.report import (
    OUTCOMES,
    plan_missing_paths,
    plan_without_credentials,
    report,
    save_outputs,
)
from gpuci.cache.save.state import Saver, SaveStats
from gpuci.cache.save.upload import BlobUploads, pack_small
from gpuci.cache.stores.base import Store
from gpuci.cache.stores.tier import open_tier
from gpuci.cache.stores.tier_policy import choose
from gpuci.errors import ConflictError, InputError
from gpuci.runtime import Result, Runtime
from gpuci.units import human_bytes

__all__ = ["OUTCOMES", "SaveStats", "Saver", "run", "save_outputs"]


@dataclass
class _Planned:
    """What hashing and sending found: the manifest and whether the ref already names it."""

    manifest: mf.Manifest
    unchanged: bool


def run(inp: SaveInputs, rt: Runtime) -> Result:
    """Save: scan -> hash and upload (together) -> publish (manifest, ref) -> report."""
    start = time.monotonic()
    key = refs.check_key(inp.key)
    paths = hf.paths(inp.hf_repo, inp.path, rt.environ) if inp.layout == "hf" else inp.path
    if not paths:
        raise InputError("no path to save", hint="list the folders or files to cache in path")
    store = plan_store(inp, rt)
    url = store.url if store is not None else store_url(inp, rt)
    try:
        tree = scan(paths)
    except InputError:
        if rt.dry_run:
            return plan_missing_paths(inp.path or None, key, url, start)
        raise
    if store is None:
        return plan_without_credentials(key, url, tree, start)
    if inp.layout == "hf" and inp.hf_revision.strip():
        _keep_revision(tree, inp.hf_revision.strip())
    saver = Saver(store, layout.namespace(rt.environ), key, rt)
    tier_notes: list[str] = []
    if rt.dry_run:  # a plan fills nothing: it only says whether a run would
        tier_choice = choose(rt.environ, inp.local_cache)
    else:
        saver.tier, tier_notes, tier_choice = open_tier(
            rt.environ,
            local_cache=inp.local_cache,
            local_cache_size=inp.local_cache_size,
            local_cache_mode=inp.local_cache_mode,
        )
    current = _current_ref(store, saver, rt)
    planned = _hash_and_send(saver, tree, current)
    result = Result(command="cache-weights save")
    for warning in tree.warnings:
        result.warning(warning, "gpu-ci cache")
    digest, outcome = _publish(saver, planned, current, result)
    if not rt.dry_run:
        saver.fill_tier(tree, planned.manifest.files)
    for note in tier_notes + (saver.tier.warnings() if saver.tier else []):
        result.warning(note, "gpu-ci local cache")
    done = report(saver, paths, planned.manifest, digest, outcome, start, result)
    done.summary.append(tier_line(tier_choice))
    done.report["local_cache_policy"] = tier_choice.text
    return done


def _current_ref(store: Store, saver: Saver, rt: Runtime) -> refs.Ref | None:
    """The ref as it stands (a dry run on a store that does not exist yet has none)."""
    if not rt.dry_run or store.exists():
        started = time.monotonic()
        current = refs.read(store, saver.namespace, saver.key)
        saver.uploads.first_byte(time.monotonic() - started)  # one GET: a distance sample
        return current
    return None


def _hash_and_send(saver: Saver, tree: Tree, current: refs.Ref | None) -> _Planned:
    """Hash each large file as it is read and send the blobs the store lacks, meanwhile pack
    the small ones (reusing the current packs where they still match); then the manifest,
    and whether it is the tree the ref already names."""
    rt = saver.rt
    known, current_manifest = saver.known_small_files(current)
    files = [e for e in tree.entries if e.type == "file"]
    large = [e for e in files if e.size >= layout.PACK_THRESHOLD]
    small = [e for e in files if e.size < layout.PACK_THRESHOLD]
    blobs = BlobUploads(saver, tree, large, rt.dry_run)
    blobs.start()  # large files hash and upload on their own threads while small ones pack
    try:
        pack_small(saver, tree, small, known, rt.dry_run)
    except BaseException:
        blobs.cancel()
        with contextlib.suppress(Exception):
            blobs.finish()
        raise
    blobs.finish()
    manifest = mf.Manifest(
        key=saver.key,
        roots=tree.roots,
        entries=tree.entries,
        created=mf.now_iso(),
        producer=mf.producer(rt.environ),
    )
    unchanged = current_manifest is not None and manifest.same_tree(current_manifest)
    return _Planned(manifest, unchanged)


def _publish(
    saver: Saver, planned: _Planned, current: refs.Ref | None, result: Result
) -> tuple[str, str]:
    """Nothing to do when the ref already names this tree; else the manifest (every blob and
    pack it names is stored by now) and the ref: the manifest's digest and the outcome."""
    if planned.unchanged:
        digest = current.manifest if current else planned.manifest.digest()
        return digest, "unchanged"
    return publish_tree(saver, planned.manifest, current, result)


def _keep_revision(tree: Tree, revision: str) -> None:
    """hf-revision on save: keep only that revision's ref, snapshot and the blobs it links."""
    root = resolve_path(tree.roots[0]["path"])
    commit = hf.commit_of(root, revision)
    probe = mf.Manifest(key="", roots=tree.roots, entries=tree.entries)
    picked = hf.pick_revision(probe, revision, commit)
    keep = {(e.root, e.path) for e in picked.entries}
    tree.entries = [e for e in tree.entries if (e.root, e.path) in keep]


def publish_tree(
    saver: Saver,
    manifest: mf.Manifest,
    current: refs.Ref | None,
    result: Result,
) -> tuple[str, str]:
    """The manifest (every object it names is stored by now), then move the ref (or say what a
    dry run would): the manifest's digest and the outcome."""
    store, namespace, key, rt = saver.store, saver.namespace, saver.key, saver.rt
    digest = manifest.digest()
    body = manifest.canonical()
    if len(body) > mf.MAX_MANIFEST:
        raise InputError(
            f"the manifest of {key} would be {human_bytes(len(body))}, over the "
            f"{mf.MAX_MANIFEST >> 20} MiB cap restore accepts ({len(manifest.entries)} "
            "entries)",
            hint="save the tree under several keys, or exclude what the job does not need",
        )
    ref_body = refs.ref_body(key, digest, len(manifest.files), manifest.total_bytes)
    if rt.dry_run:
        saver.stats.add(meta_bytes=len(body) + len(ref_body))
        return digest, "would save" if current is None else "would update"
    store.put(layout.manifest_key(digest), body)
    saver.stats.add(meta_bytes=len(body))
    if not refs.conditional_writes_honoured(store):
        result.warning(refs.CONDITIONAL_WRITES_UNSAFE.format(url=store.url), "gpu-ci cache")
    try:
        refs.write(store, namespace, key, ref_body, current)
        saver.stats.add(meta_bytes=len(ref_body))
        return digest, "saved" if current is None else "updated"
    except ConflictError:
        outcome = _lost_race(store, namespace, key, manifest, saver, result)
        winner = refs.read(store, namespace, key)
        return (winner.manifest if winner else digest), outcome


def _lost_race(
    store: Store, namespace: str, key: str, ours: mf.Manifest, saver: Saver, result: Result
) -> str:
    """Another job moved the ref between our read and our write: theirs stands, say so."""
    winner = refs.read(store, namespace, key)
    if winner is not None:
        theirs = saver.load_manifest(winner.manifest)
        if theirs is not None and theirs.same_tree(ours):
            return "saved by another job (same content)"
    won = f" (manifest {winner.manifest})" if winner is not None else ""
    result.warning(
        f"another job saved {key} at the same time and its tree won{won}; this job's blobs "
        "are stored but the key names the other tree",
        "gpu-ci cache: concurrent save",
    )
    return "lost race"
