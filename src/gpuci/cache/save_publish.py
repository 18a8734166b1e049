"""The save's publish phase: the manifest once every object it names is stored, then the ref,
moved conditionally; a lost race leaves the other job's tree standing and says so."""

from __future__ import annotations

from gpuci.cache import conditional, layout, refs
from gpuci.cache import manifest as mf
from gpuci.cache.saver import Saver
from gpuci.cache.store import Store
from gpuci.errors import ConflictError, InputError
from gpuci.runtime import Result
from gpuci.units import human_bytes


def publish(
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
    if not conditional.honoured(store):
        result.warning(conditional.UNSAFE.format(url=store.url), "gpu-ci cache")
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
