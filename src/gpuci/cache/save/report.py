"""The save's last phase: the journal record, the headline, outputs, summary and report
(and the plans a dry run gives when the tree or the credentials are not there)."""

from __future__ import annotations

import time
from typing import Any

from gpuci import journal
from gpuci.cache.common import CREDENTIAL_SOURCES, Connections, summary_table
from gpuci.cache.format import manifest as mf
from gpuci.cache.format.tree import Tree
from gpuci.cache.save.state import Saver, SaveStats
from gpuci.runtime import Result
from gpuci.units import human_bytes

# The ``outcome`` output: one word per outcome, for `if:` conditions in a workflow.
OUTCOMES = {
    "saved": "saved",
    "updated": "updated",
    "unchanged": "unchanged",
    "saved by another job (same content)": "same-content",
    "lost race": "lost-race",
    "would save": "would-save",
    "would update": "would-update",
}


def save_outputs(
    outcome: str,
    manifest: str,
    uploaded: int,
    files: int,
    seconds: float,
    connections: Connections | None = None,
) -> dict[str, Any]:
    """Save's own outputs: no cache-hit or matched-key, which only a restore can mean."""
    return {
        "outcome": OUTCOMES[outcome],
        "manifest": manifest,
        "bytes-uploaded": uploaded,
        "files": files,
        "seconds": round(seconds, 3),
        "connections": connections.used if connections else 0,
    }


def plan_missing_paths(paths: list[str] | None, key: str, url: str, start: float) -> Result:
    result = Result(command="cache-weights save", headline=f"would save {key}: path not there yet")
    result.outputs = save_outputs("would save", "", 0, 0, time.monotonic() - start)
    result.report = {"plan": {"key": key, "store": url, "paths": paths}}
    return result


def report(
    saver: Saver,
    paths: list[str],
    manifest: mf.Manifest,
    digest: str,
    outcome: str,
    start: float,
    result: Result,
) -> Result:
    """Journal the save (not a dry run's), then the headline, outputs, summary and report."""
    key, store, rt, stats = saver.key, saver.store, saver.rt, saver.stats
    files, size = len(manifest.files), manifest.total_bytes
    seconds = time.monotonic() - start
    uploaded = stats.data_bytes + stats.meta_bytes
    if not rt.dry_run:
        journal.record(
            "cache-save",
            {
                "key": key,
                "manifest": digest,
                "store": store.url,
                "paths": paths,
                "files": files,
                "bytes": size,
                "bytes_uploaded": uploaded,
                "outcome": outcome,
            },
            rt.environ,
        )
    sent = stats.data_bytes > 0 and not rt.dry_run  # connections only mean something then
    connections = Connections.of(saver.uploads) if sent else None
    result.headline = _headline(outcome, key, files, size, stats, seconds, rt.dry_run)
    if connections is not None:
        result.headline += f" (connections: {connections.text()})"
    result.outputs = save_outputs(outcome, digest, uploaded, files, seconds, connections)
    result.summary.append(summary_table(key, outcome, files, size, uploaded, seconds, connections))
    result.report = {
        "key": key,
        "store": store.url,
        "outcome": outcome,
        "manifest": digest,
        "files": files,
        "bytes": size,
        "dry_run": rt.dry_run,
        "bytes_data": stats.data_bytes,
        "bytes_metadata": stats.meta_bytes,
        "blobs_uploaded": stats.blobs,
        "packs_uploaded": stats.packs,
        "small_files_reused": stats.reused_files,
        "connections": connections.report() if connections else None,
    }
    return result


def plan_without_credentials(key: str, url: str, tree: Tree, start: float) -> Result:
    """A dry run with no AWS credentials here: the tree is measured, the store is not asked."""
    files = [e for e in tree.entries if e.type == "file"]
    size = sum(e.size for e in files)
    seconds = time.monotonic() - start
    result = Result(command="cache-weights save")
    result.headline = (
        f"would need credentials: would save {key} ({len(files)} files, {human_bytes(size)}) "
        f"to {url}, but no AWS credentials on this machine to ask what it lacks (at most "
        f"{human_bytes(size)} to upload); a real run needs read and write access to the "
        f"bucket ({CREDENTIAL_SOURCES})"
    )
    result.outputs = save_outputs("would save", "", 0, len(files), seconds)
    result.summary.append(
        summary_table(key, "would save: store not asked (no credentials)", len(files), size, 0, 0)
    )
    result.report = {
        "key": key,
        "store": url,
        "dry_run": True,
        "files": len(files),
        "bytes": size,
        "lookup": "skipped",
        "reason": "no AWS credentials on this machine",
        "needs": f"read and write access to the bucket: {CREDENTIAL_SOURCES}",
    }
    return result


def _headline(
    outcome: str, key: str, files: int, size: int, stats: SaveStats, seconds: float, plan: bool
) -> str:
    """What happened, or in a dry run what would: a plan never speaks in the past tense."""
    tree = f"{files} files, {human_bytes(size)}"
    uploaded = stats.data_bytes + stats.meta_bytes
    if not plan:
        return f"{outcome} {key}: {tree}, uploaded {human_bytes(uploaded)} in {seconds:.1f}s"
    if outcome == "unchanged":
        return f"unchanged {key}: {tree}; the key already names this tree, nothing would upload"
    return (
        f"{outcome} {key}: {tree}; would upload {human_bytes(uploaded)} "
        f"({stats.blobs} new blob(s), {stats.packs} new pack(s), "
        f"{human_bytes(stats.meta_bytes)} of manifest and ref)"
    )
