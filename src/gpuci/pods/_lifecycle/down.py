"""``pods down``: terminate pods by id, or all of this CI run's; a missing pod is success."""

from __future__ import annotations

import functools

from gpuci import settings
from gpuci.errors import GpuciError, InputError
from gpuci.pods._budgets import ledger
from gpuci.pods._lifecycle.common import (
    clean_runners,
    each_pod,
    end_pod,
    ledger_quietly,
    offline_plan,
    open_client,
    tagged_pods,
)
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.naming import run_url
from gpuci.pods.options import DownInputs
from gpuci.runtime import Result, Runtime


def down(inp: DownInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Terminate pods by id, or every pod of this CI run; a missing pod is success."""
    ids = list(inp.pod_id)
    this_run = run_url(rt.environ)
    if (
        rt.dry_run
        and not ids
        and (this_run == "local" or not settings.RUNPOD_API_KEY.is_set(rt.environ))
    ):
        return offline_plan("pods down", "would terminate every gpu-ci pod of this CI run")
    if not ids and this_run == "local":
        raise InputError(
            "down needs pod-id outside CI (no CI run URL to match)",
            hint="pass --pod-id ID, or run inside GitHub Actions / GitLab CI",
        )
    if rt.dry_run and ids:
        return Result(command="pods down", headline="would terminate " + ", ".join(ids))
    book = ledger_quietly(inp.ledger, rt)
    with open_client(rt, clock) as client:
        # every pod, before anything ends: the runner sweep needs the pods that still exist
        listing = client.list_pods() if not ids or _runner_tokens(rt) else None
        if not ids:
            ids = [p["id"] for p, t in tagged_pods(listing or []) if t and t.run_url == this_run]
            rt.log(f"pods of {this_run}: {', '.join(ids) or 'none'}")
        if rt.dry_run:
            return Result(command="pods down", headline="would terminate " + ", ".join(ids))
        if not ids:
            result = Result(
                command="pods down",
                headline="nothing to terminate",
                outputs={"pod-ids": "", "count": 0},
            )
        else:
            end = functools.partial(end_pod, client, rt, book, clock, reason="down")
            result = each_pod(ids, end, "pods down", rt)
        if listing is not None:
            gone = set(result.report.get("done") or {})
            ours = _run_runners(rt, book, this_run, clock.now()) if not inp.pod_id else set()
            clean_runners(result, rt, inp.runner_scope, listing, gone, clock, ours=ours)
        return result


RUN_LOOKBACK_S = 3 * 86400  # how far back down looks in the ledger for this run's runners


def _run_runners(rt: Runtime, book: ledger.Ledger | None, run: str, now: float) -> set[str]:
    """Runner names this CI run created pods for, from the ledger: a runner whose pod already
    ended itself (idle timeout) is deleted by the run's own ``down``, without the grace."""
    if book is None or run == "local":
        return set()
    try:
        records = book.events(since=now - RUN_LOOKBACK_S)
    except (OSError, GpuciError) as exc:
        rt.log(f"warning: could not read the pods ledger for this run's runners: {exc}")
        return set()
    return {
        str(e["runner"])
        for e in records
        if e.get("event") == "created" and e.get("runUrl") == run and e.get("runner")
    }


def _runner_tokens(rt: Runtime) -> bool:
    """Whether this job can list runners (so down/reap sweep them)."""
    return settings.RUNNER_TOKEN.is_set(rt.environ) or settings.GITLAB_TOKEN.is_set(rt.environ)
