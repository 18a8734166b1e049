"""A restore's :class:`~gpuci.runtime.Result`, rendered from its typed outcome: the headline,
outputs, summary, report and warnings (a miss, a plan, a restore, or a plan without
credentials). Nothing here touches the store: :mod:`gpuci.cache._restore.operation` did."""

from __future__ import annotations

from typing import Any

from gpuci.cache._common import no_credentials, summary_table, tier_line
from gpuci.cache._common import outputs as shared_outputs
from gpuci.cache._restore.operation import Match, Request, Restore
from gpuci.cache._stores.base import describe
from gpuci.runtime import Result, Runtime
from gpuci.units import human_bytes

__all__ = ["render"]


def render(done: Restore, rt: Runtime) -> Result:
    """The Result a restore reports (before any populate or fail-on-miss acts on it).

    Args:
        done: what :func:`gpuci.cache._restore.operation.restore` returned.
        rt: the runtime it ran under (a dry run speaks in the conditional).

    Returns:
        The step's headline, outputs, summary, report and warnings.
    """
    req, match = done.request, done.match
    if req is None:
        return _plan_without_credentials(done)
    result = Result(command="cache-weights restore")
    for message, title in done.warnings:
        result.warning(message, title)
    if match is None:
        _report_miss(done, req, rt, result)
    elif done.stage == "plan":
        _report_plan(done, req, match, rt, result)
    else:
        _report_restore(done, req, match, result)
    return result


def _outputs(**values: Any) -> dict[str, Any]:
    """Restore's outputs: the shared ones plus ``populated`` (false unless populate ran)."""
    return shared_outputs(populated=False, **values)


def _report_miss(done: Restore, req: Request, rt: Runtime, result: Result) -> None:
    """Nothing matched: say so."""
    key, store, restore_keys = req.key, req.store, req.restore_keys
    seconds = done.seconds
    verb = "would miss" if rt.dry_run else "miss"
    where = describe(store) + (" (no cache saved there yet)" if req.empty_local else "")
    result.headline = (
        f"{verb}: no cache for {key}"
        + (f" or prefixes {', '.join(restore_keys)}" if restore_keys else "")
        + f" in {where}"
    )
    result.outputs = _outputs(
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


def _report_plan(done: Restore, req: Request, match: Match, rt: Runtime, result: Result) -> None:
    """A dry run or lookup-only: what a restore would place, and from where."""
    ref, files, size = match.ref, match.files, match.size
    seconds, local = done.seconds, done.local
    verb = "would restore" if rt.dry_run else "found"
    would_populate = bool(req.populate and not match.exact)
    result.headline = (
        f"{verb} {ref.key} ({match.outcome}): {files} files, {human_bytes(size)}"
        + (f" ({human_bytes(local)} from the local tier)" if local else "")
        + (f", picked from {len(match.whole.files)}" if match.partial else "")
        + ("; then populate and save" if rt.dry_run and would_populate else "")
    )
    result.outputs = _outputs(
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
        "lookup_only": req.inp.lookup_only,
        "would_populate": would_populate,
    }


def _report_restore(done: Restore, req: Request, match: Match, result: Result) -> None:
    """After placing: headline, outputs, summary and report."""
    moved = done.moved
    assert moved is not None
    ref, manifest = match.ref, match.manifest
    files, size = match.files, match.size
    seconds = done.seconds
    rate = (moved.downloaded + moved.from_local) / seconds / 1e6 if seconds > 0 else 0.0
    result.headline = (
        f"{match.outcome}: restored {ref.key}, {files} files, {human_bytes(size)} "
        f"({human_bytes(moved.downloaded)} from the store, "
        f"{human_bytes(moved.from_local)} from the local tier) in {seconds:.1f}s "
        f"({rate:.0f} MB/s"
        + (f", connections: {moved.connections.text()}" if moved.connections else "")
        + ")"
    )
    result.outputs = _outputs(
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


def _plan_without_credentials(done: Restore) -> Result:
    """A dry run with no AWS credentials here: the lookup is skipped, not failed."""
    key, url, seconds = done.key, done.store, done.seconds
    skipped = f"lookup of {key} in {url} skipped, no AWS credentials on this machine"
    result = no_credentials("cache-weights restore", url, skipped, "read", key=key)
    result.outputs = _outputs(
        hit=False, matched="", manifest="", down=0, up=0, files=0, seconds=seconds
    )
    result.summary.append(summary_table(key, "lookup skipped: no credentials", 0, 0, 0, seconds))
    return result
