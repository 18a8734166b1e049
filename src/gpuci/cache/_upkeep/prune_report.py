"""What ``cache-weights prune`` says: its headline, the table of what it deleted (or would),
what the grace period held back and until when, and the JSON report."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from gpuci.cache import _layout as layout
from gpuci.cache._common import no_credentials
from gpuci.cache._upkeep.prune_plan import Outcome, Plan
from gpuci.runtime import Result, markdown_table
from gpuci.units import human_age, human_bytes

__all__ = ["report", "without_credentials"]


def report(
    result: Result,
    url: str,
    namespace: str,
    what: tuple[Plan, Outcome],
    grace: float,
    dry_run: bool,
) -> None:
    """What was (or would be) deleted, what the re-checks kept, and what the grace period held
    back."""
    work, done = what
    verb = "would delete" if dry_run else "deleted"
    for warning in work.ignored:
        result.warning(warning, "gpu-ci cache prune: ref ignored")
    for warning in work.unreadable + done.warnings:
        result.warning(warning, "gpu-ci cache prune: data kept")
    for warning in work.notes:
        result.warning(warning, "gpu-ci cache prune: leftovers")
    keys = [layout.key_from_ref(namespace, k) for k in done.refs]
    swept = f", {len(done.leftovers)} temp file(s) left by killed saves" if done.leftovers else ""
    kept = f"; {work.pinned} pinned manifest(s) kept" if work.pinned else ""
    if work.cut:
        kept += f"; stopped listing at {work.cut:,} objects planned: prune again to go on"
    if done.kept:
        kept += (
            f"; kept {len(done.kept)} object(s) saved, restored, pinned or reused since the listing"
        )
    result.headline = (
        f"{verb} {len(keys)} key(s), {len(done.manifests)} manifest(s), "
        f"{len(done.data)} blob(s)/pack(s){swept}, freeing {human_bytes(done.bytes)}{kept}"
    ) + _held_note(work, grace, dry_run)
    rows = [["key", k, ""] for k in keys]
    rows += [["manifest", o.key, human_bytes(o.size)] for o in done.manifests]
    rows += [["data", o.key, human_bytes(o.size)] for o in done.data]
    rows += [["temp file", o.key, human_bytes(o.size)] for o in done.leftovers]
    if rows:
        result.summary.append(markdown_table(["kind", "object", "size"], rows[:200]))
    if work.held_manifests or work.held_data:
        note = _held_note(work, grace, dry_run).removeprefix("; ")
        result.summary.append(f"{note[0].upper()}{note[1:]}.")
    result.report = {
        "store": url,
        "namespace": namespace,
        "dry_run": dry_run,
        "keys": keys,
        "manifests": [o.key for o in done.manifests],
        "data": [o.key for o in done.data],
        "leftovers": [o.key for o in done.leftovers],
        "bytes_freed": done.bytes,
        "kept_changed": done.kept,
        "kept_young": work.kept_young,
        "kept_pinned": work.pinned,
        "stopped_at": work.cut or None,
        "held_by_grace": {
            "grace_seconds": grace,
            "manifests": [o.key for o in work.held_manifests],
            "data": [o.key for o in work.held_data],
            "bytes": work.held_bytes,
            "deletable_after": _iso(work.held_until(grace)),
        },
    }


def without_credentials(url: str) -> Result:
    """A dry run with no AWS credentials here: nothing to list, so say what a run needs."""
    skipped = f"listing {url} skipped, no AWS credentials on this machine"
    return no_credentials("cache-weights prune", url, skipped, "list, read and delete")


def _iso(when: float | None) -> str | None:
    """A time for the report; "far future" for one no date can show (a store's clock or a
    hostile object's time past year 9999 must not fail a prune that already deleted)."""
    if when is None:
        return None
    try:
        return datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return "far future"


def _held_note(work: Plan, grace: float, plan: bool) -> str:
    """Why unnamed data stays: the grace period (a save may be writing it), and until when."""
    until = work.held_until(grace)
    if until is None:
        return ""
    keeps = "would keep" if plan else "kept"
    return (
        f"; the {human_age(grace)} grace period {keeps} {len(work.held_manifests)} manifest(s) and "
        f"{len(work.held_data)} blob(s)/pack(s) ({human_bytes(work.held_bytes)}) that no "
        f"remaining key names, since a save may still be writing them: a prune after "
        f"{_iso(until)} (in {_wait(until - time.time())}) deletes them"
    )


def _wait(seconds: float) -> str:
    minutes = max(1, int(seconds + 59) // 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    return "".join(parts)
