"""A save's :class:`~gpuci.runtime.Result`, rendered from its typed outcome
(:class:`gpuci.cache._save.operation.Save`): the headline, outputs, summary, report and warnings
(and the plans a dry run gives when the tree or the credentials are not there)."""

from __future__ import annotations

from typing import Any

from gpuci.cache._common import Connections, no_credentials, summary_table, tier_line
from gpuci.cache._save.operation import OUTCOMES, Save
from gpuci.cache._save.state import SaveStats
from gpuci.runtime import Result
from gpuci.units import human_bytes

__all__ = ["render"]


def render(done: Save) -> Result:
    """The Result a save reports.

    Args:
        done: what :func:`gpuci.cache._save.operation.save` returned.

    Returns:
        The step's headline, outputs, summary, report and warnings.
    """
    if done.stage == "missing-paths":
        return _plan_missing_paths(done)
    if done.stage == "no-credentials":
        return _plan_without_credentials(done)
    return _report(done)


def _outputs(
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


def _plan_missing_paths(done: Save) -> Result:
    """A dry run before the tree exists (an earlier step makes it): the plan names it only."""
    key, seconds = done.key, done.seconds
    result = Result(command="cache-weights save", headline=f"would save {key}: path not there yet")
    result.outputs = _outputs("would save", "", 0, 0, seconds)
    result.report = {"plan": {"key": key, "store": done.store, "paths": done.paths}}
    return result


def _report(done: Save) -> Result:
    """The headline, outputs, summary and report of a save that ran (or a dry run's plan)."""
    key, stats, seconds, connections = done.key, done.stats, done.seconds, done.connections
    files, size, uploaded, outcome = done.files, done.size, done.bytes_uploaded, done.outcome
    result = Result(command="cache-weights save")
    for message, title in done.warnings:
        result.warning(message, title)
    result.headline = _headline(outcome, key, files, size, stats, seconds, done.dry_run)
    if connections is not None:
        result.headline += f" (connections: {connections.text()})"
    result.outputs = _outputs(outcome, done.digest, uploaded, files, seconds, connections)
    result.summary.append(summary_table(key, outcome, files, size, uploaded, seconds, connections))
    result.report = {
        "key": key,
        "store": done.store,
        "outcome": outcome,
        "manifest": done.digest,
        "files": files,
        "bytes": size,
        "dry_run": done.dry_run,
        "bytes_data": stats.data_bytes,
        "bytes_metadata": stats.meta_bytes,
        "blobs_uploaded": stats.blobs,
        "packs_uploaded": stats.packs,
        "small_files_reused": stats.reused_files,
        "connections": connections.report() if connections else None,
    }
    if done.tier_choice is not None:
        result.summary.append(tier_line(done.tier_choice))
        result.report["local_cache_policy"] = done.tier_choice.text
    return result


def _plan_without_credentials(done: Save) -> Result:
    """A dry run with no AWS credentials here: the tree is measured, the store is not asked."""
    key, url, files, size, seconds = done.key, done.store, done.files, done.size, done.seconds
    skipped = (
        f"would save {key} ({files} files, {human_bytes(size)}) to {url}, but no AWS "
        f"credentials on this machine to ask what it lacks (at most {human_bytes(size)} to "
        "upload)"
    )
    result = no_credentials(
        "cache-weights save", url, skipped, "read and write", key=key, files=files, bytes=size
    )
    result.outputs = _outputs("would save", "", 0, files, seconds)
    result.summary.append(
        summary_table(key, "would save: store not asked (no credentials)", files, size, 0, 0)
    )
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
