"""The metrics history: one small object per default-branch (or scheduled) run, in a store.

A chart of "this PR against the default branch" needs the default branch's past values, and a
runner keeps nothing between jobs, so the history lives in a store (``s3://bucket/prefix`` or
``file:///dir``, the same forms as the weights cache and the pods ledger), beside the ledger:

- ``metrics-history/<series>/<newest-first>-<commit>-<nonce>.json``: the run's gated metrics,
  commit, ref, date, run URL and model digest. ``<newest-first>`` is 9,999,999,999,999 minus
  the epoch in milliseconds, 13 digits, so a listing (S3 and the file store list in key order)
  yields the newest run first and the last N runs cost one listing page and N small GETs, however
  long the history. ``<series>`` is the report's marker, so two models keep two histories.

Objects are written with ``If-None-Match`` (never overwritten) and read as input: capped at
64 KiB, parsed by :mod:`gpuci.untrusted_json`, non-numbers dropped, malformed objects skipped.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpuci import settings, untrusted_json
from gpuci.cache._stores import open_store
from gpuci.cache._stores.base import Store
from gpuci.charts import finite
from gpuci.redact import clip
from gpuci.training import _ci as ci
from gpuci.training._rules import gate_passed
from gpuci.units import utc_iso

__all__ = [
    "FORMAT",
    "MAX_METRICS",
    "MAX_NAME",
    "MAX_OBJECT",
    "MAX_POINTS",
    "ROOT",
    "append",
    "entry",
    "gated_metrics",
    "history_url",
    "last",
    "object_key",
    "open_history",
    "prefix",
    "read_past",
    "record_run",
    "series_key",
    "should_append",
]

ROOT = "metrics-history"
FORMAT = 1
MAX_OBJECT = 64 * 1024
MAX_METRICS = 100  # per run: the gated metrics, which a person wrote rules for
MAX_NAME = 200
MAX_POINTS = 200  # the most runs a report reads back
_NEWEST_FIRST = 10**13 - 1  # epoch milliseconds stay under this until the year 2286
_KEY = re.compile(r"^\d{13}-[0-9a-z]{1,12}-[0-9a-f]{8}\.json$")


def history_url(value: str | None, environ: Mapping[str, str]) -> str:
    """The history's store URL: the input, then ``GPUCI_METRICS_HISTORY``; empty means none."""
    return (value or "").strip() or settings.METRICS_HISTORY.value(environ)


def open_history(url: str, environ: Mapping[str, str], mask: Callable[[str], None]) -> Store:
    """The history's store (its S3 endpoint from ``GPUCI_METRICS_HISTORY_ENDPOINT_URL``);
    raises InputError for a bad URL and StoreError when it cannot be opened."""
    return open_store(
        url,
        endpoint_url=settings.METRICS_HISTORY_ENDPOINT_URL.value(environ) or None,
        region=None,
        environ=environ,
        mask=mask,
    )


def series_key(series: str) -> str:
    """A store-safe, collision-free path component for a series name (never ``..`` or ``/``)."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", series)[:40] or "_"
    return f"{readable}-{hashlib.sha256(series.encode()).hexdigest()[:12]}"


def prefix(series: str) -> str:
    return f"{ROOT}/{series_key(series)}/"


def object_key(series: str, epoch: float, commit: str) -> str:
    newest_first = max(0, _NEWEST_FIRST - int(epoch * 1000))
    short = re.sub(r"[^0-9a-z]", "", commit.lower())[:12] or "none"
    return f"{prefix(series)}{newest_first:013d}-{short}-{secrets.token_hex(4)}.json"


def _default_branch_github(environ: Mapping[str, str]) -> str:
    repo = ci.github_event(environ).get("repository")
    branch = repo.get("default_branch") if isinstance(repo, dict) else None
    return branch if isinstance(branch, str) else ""


# What ran the job when its commit is the branch's own: a push, a schedule, a manual run.
# pull_request_target and issue_comment set GITHUB_REF to the default branch too, but run for
# a pull request (whose values are not the branch's history); GitLab's merge request
# pipelines likewise. Schedules run on the default branch (GitHub) or a branch a maintainer set.
_GITHUB_EVENTS = frozenset({"push", "schedule", "workflow_dispatch"})
_GITLAB_SOURCES = frozenset({"push", "schedule", "web"})
# A child (parent_pipeline) or multi-project (pipeline) pipeline: GitLab gives it no variable
# saying what started its parent (a merge request's, a push's), so auto never appends it.
_GITLAB_DOWNSTREAM = frozenset({"parent_pipeline", "pipeline"})


def should_append(mode: str, environ: Mapping[str, str]) -> tuple[bool, str]:
    """``auto``: a push or manual run on the default branch, or a schedule (a PR's values are
    not history, whatever branch its job runs on); ``always``; ``never``."""
    if mode == "always":
        return True, "history-append is always"
    if mode == "never":
        return False, "history-append is never"
    if settings.GITHUB_ACTIONS.is_true(environ) or settings.GITHUB_REPOSITORY.is_set(environ):
        event = settings.GITHUB_EVENT_NAME.value(environ)
        ref = settings.GITHUB_REF.value(environ)
        branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else ""
        default = _default_branch_github(environ)
        return _on_default_branch(event, _GITHUB_EVENTS, branch, default)
    if settings.GITLAB_CI.is_true(environ):
        if settings.CI_MERGE_REQUEST_IID.is_set(environ):
            return False, "a merge request pipeline"
        source = settings.CI_PIPELINE_SOURCE.value(environ)
        if source in _GITLAB_DOWNSTREAM:
            return False, (
                f"a downstream pipeline ({source}): what started its parent is not known "
                "(set history-append: always on the jobs that should record it)"
            )
        branch = settings.CI_COMMIT_BRANCH.value(environ)
        default = settings.CI_DEFAULT_BRANCH.value(environ)
        return _on_default_branch(source, _GITLAB_SOURCES, branch, default)
    return False, "not in CI (set history-append: always to record a local run)"


def _on_default_branch(
    event: str, events: frozenset[str], branch: str, default: str
) -> tuple[bool, str]:
    """Whether ``event`` on ``branch`` is the default branch's own run, and why (or why not)."""
    if event not in events:
        shown = clip(event, 40) or "unknown"
        return False, f"the event {shown} is not a push, schedule or manual run"
    if event == "schedule":
        return True, "a scheduled run"
    if default and branch == default:
        return (
            True,
            f"a {'push' if event == 'push' else 'manual run'} on the default branch {default}",
        )
    return False, "not the default branch or a schedule"


def gated_metrics(gate: Mapping[str, Any]) -> dict[str, float]:
    """The numeric values of the gated metrics, by name, from a gate record."""
    out: dict[str, float] = {}
    rows = gate.get("rows")
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("metric"), str):
            continue
        value = finite(row.get("value"))
        if value is not None and len(out) < MAX_METRICS:
            out[row["metric"][:MAX_NAME]] = value
    return out


def entry(
    gate: Mapping[str, Any],
    prov: Mapping[str, Any] | None,
    ctx: ci.RunContext,
    now: float | None = None,
) -> dict[str, Any]:
    """One run's history object."""
    epoch = time.time() if now is None else now
    return {
        "format": FORMAT,
        "epoch": round(epoch, 3),
        "date": utc_iso(epoch),
        "commit": ctx.commit,
        "ref": ctx.ref,
        "run_url": ctx.run_url,
        "passed": gate_passed(gate),  # a report is input: "false" or 1 is no pass
        "model_digest": str((prov or {}).get("statement_digest") or ""),
        "metrics": gated_metrics(gate),
    }


def append(store: Store, series: str, item: Mapping[str, Any]) -> str:
    """Write one run's object (create-only); returns its key."""
    from gpuci.files import json_bytes

    key = object_key(series, float(item["epoch"]), str(item.get("commit") or ""))
    store.put_if_absent(key, json_bytes(dict(item)))
    return key


def _clean(data: Any) -> dict[str, Any] | None:
    """A history object read back, reduced to what we wrote, or None when it is not ours."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    metrics = data.get("metrics")
    epoch = finite(data.get("epoch"))
    if not isinstance(metrics, dict) or epoch is None:
        return None
    values = {
        str(name)[:MAX_NAME]: number
        for name, value in list(metrics.items())[:MAX_METRICS]
        if (number := finite(value)) is not None
    }

    def text(name: str, limit: int) -> str:
        value = data.get(name)
        return value[:limit] if isinstance(value, str) else ""

    return {
        "epoch": epoch,
        "date": text("date", 40),
        "commit": text("commit", 64),
        "ref": text("ref", 200),
        "run_url": text("run_url", 500),
        "passed": data.get("passed") is True,
        "model_digest": text("model_digest", 100),
        "metrics": values,
    }


def last(store: Store, series: str, count: int) -> tuple[list[dict[str, Any]], int]:
    """The newest ``count`` runs, oldest first, and how many objects were unusable.

    Stops listing after ``count`` keys of our shape: a history of any length costs one listing
    page and at most ``count`` GETs of at most 64 KiB each.
    """
    count = max(0, min(count, MAX_POINTS))
    keys: list[str] = []
    if count:
        base = prefix(series)
        for info in store.list(base):
            name = info.key[len(base) :]
            if _KEY.match(name):
                keys.append(info.key)
                if len(keys) >= count:
                    break
    runs: list[dict[str, Any]] = []
    skipped = 0
    for key in keys:
        got = store.get(key, limit=MAX_OBJECT)
        if got is None or len(got[0]) > MAX_OBJECT:
            skipped += 1
            continue
        try:
            item = _clean(untrusted_json.loads(got[0]))
        except untrusted_json.Unusable:
            item = None
        if item is None:
            skipped += 1
            continue
        runs.append(item)
    runs.sort(key=lambda r: r["epoch"])
    return runs, skipped


def read_past(
    rt: Any, result: Any, *, url: str, series: str, points: int
) -> list[dict[str, Any]] | None:
    """The newest ``points`` runs of ``series``; None when no history is set.

    ``url`` is the ``history`` input (empty: ``GPUCI_METRICS_HISTORY``), ``series`` the report's
    marker (empty: training).
    A history that cannot be read is a warning: the chart is a courtesy, never the verdict.
    """
    from gpuci.errors import GpuciError

    url = history_url(url, rt.environ)
    if not url:
        return None
    series = series or "training"
    try:
        runs, skipped = last(open_history(url, rt.environ, rt.mask), series, points or 20)
    except GpuciError as exc:
        result.warning(f"metrics history not read: {exc.one_line()}", "gpu-ci history")
        return None
    if skipped:
        result.warning(
            f"metrics history: {skipped} object(s) under {prefix(series)} were not usable "
            "and were left out",
            "gpu-ci history",
        )
    result.report["history"] = {"series": series, "runs": runs}
    return runs


def record_run(
    rt: Any,
    gate: Mapping[str, Any],
    prov: Mapping[str, Any] | None,
    result: Any,
    *,
    url: str,
    mode: str = "auto",
    series: str = "training",
) -> None:
    """Append this run to ``series`` of the history when it belongs there.

    ``mode`` is the history-append input (auto: a push or manual run on the default branch, or
    a schedule; always; never). A store that fails is a warning: nothing is raised.
    """
    from gpuci import journal
    from gpuci.errors import GpuciError

    url = history_url(url, rt.environ)
    if not url:
        return
    wanted, why = should_append(mode or "auto", rt.environ)
    if not wanted:
        result.report.setdefault("history", {})["appended"] = {"key": "", "why": why}
        return
    if any(journal.read("history", rt.environ)):
        return  # the gate already recorded this run
    series = series or "training"
    item = entry(gate, prov, ci.detect(rt.environ))
    if rt.dry_run:
        result.notice(f"dry run: would add this run to the metrics history ({why})", "gpu-ci")
        return
    try:
        key = append(open_history(url, rt.environ, rt.mask), series, item)
    except GpuciError as exc:
        result.warning(f"metrics history not written: {exc.one_line()}", "gpu-ci history")
        return
    journal.record("history", {"key": key}, rt.environ)
    result.report.setdefault("history", {})["appended"] = {"key": key, "why": why}
    rt.log(f"added this run to the metrics history ({why}): {key}")
