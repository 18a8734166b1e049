"""``cache-weights save``: hash a tree, upload only what the store lacks, then manifest, then ref.

Order is the whole safety story: blobs and packs first, the manifest once every object it names
exists, the ref last and conditionally. A save killed at any point leaves, at worst, orphan
blobs (harmless, prunable), never a ref naming something missing. Small files are deduplicated
against the manifests this job already knows (the key's current one and any restored earlier in
the job), so re-saving after changing one file uploads that file plus metadata.

The phases, each in a module of its own: scan (:mod:`gpuci.cache.tree`); hash and upload,
together (large files: :mod:`gpuci.cache.save_blobs`, each read once, its upload started as
soon as its name is known; small files: :mod:`gpuci.cache.save_packs`); publish
(:mod:`gpuci.cache.save_publish`); report (:mod:`gpuci.cache.save_report`); over one
:class:`gpuci.cache.saver.Saver`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from gpuci.cache import hf, layout, refs
from gpuci.cache import manifest as mf
from gpuci.cache.common import plan_store, store_url, tier_line
from gpuci.cache.options import SaveInputs
from gpuci.cache.save_blobs import BlobUploads
from gpuci.cache.save_packs import pack_small
from gpuci.cache.save_publish import publish
from gpuci.cache.save_report import (
    OUTCOMES,
    plan_missing_paths,
    plan_without_credentials,
    report,
    save_outputs,
)
from gpuci.cache.saver import Saver, SaveStats
from gpuci.cache.store import Store
from gpuci.cache.tier import open_tier
from gpuci.cache.tier_policy import choose
from gpuci.cache.tree import Tree, resolve_path, scan
from gpuci.errors import InputError
from gpuci.runtime import Result, Runtime

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
    return publish(saver, planned.manifest, current, result)


def _keep_revision(tree: Tree, revision: str) -> None:
    """hf-revision on save: keep only that revision's ref, snapshot and the blobs it links."""
    root = resolve_path(tree.roots[0]["path"])
    commit = hf.commit_of(root, revision)
    probe = mf.Manifest(key="", roots=tree.roots, entries=tree.entries)
    picked = hf.pick_revision(probe, revision, commit)
    keep = {(e.root, e.path) for e in picked.entries}
    tree.entries = [e for e in tree.entries if (e.root, e.path) in keep]
