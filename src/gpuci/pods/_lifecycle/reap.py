"""``pods reap``: terminate every gpu-ci pod past its expiry (and stop forgotten hand-made
ones); a missing pod is success, so it is safe to run on a schedule.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from gpuci import redact, settings
from gpuci.errors import GpuciError
from gpuci.pods import _notify as notify
from gpuci.pods._budgets import ledger, prune
from gpuci.pods._budgets.cost import LIVE, billing_start, usd
from gpuci.pods._lifecycle.common import (
    clean_runners,
    each_pod,
    end_pod,
    ledger_quietly,
    offline_plan,
    open_client,
    record_event,
    tagged_pods,
)
from gpuci.pods._runpod.client import NotFound, RunPodClient
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.errors import InvalidTransition
from gpuci.pods._runpod.naming import PodTag, tag_of
from gpuci.pods.health import _repeat_failures as repeat_failures
from gpuci.pods.options import ReapInputs
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import parse_iso, utc_iso


def reap(inp: ReapInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Terminate every gpu-ci pod past its expiry (plus ``grace``), naming who forgot it;
    with ``untagged-older-than``, stop (never terminate) hand-made pods older than that.

    Phases: find -> (a dry run stops here) terminate the expired -> stop the hand-made and
    clean up runners -> report and notify.
    """
    grace = inp.grace
    owner = inp.owner
    untagged_s = inp.untagged_older_than
    targets = notify.parse_targets(inp.notify or None, rt.mask)
    if rt.dry_run and not settings.RUNPOD_API_KEY.is_set(rt.environ):
        return offline_plan("pods reap", "would terminate every gpu-ci pod past its expiry")
    book = ledger_quietly(inp.ledger, rt)
    with open_client(rt, clock) as client:
        now = clock.now()
        every = client.list_pods()
        found = _find(every, owner, grace, untagged_s, now)
        if rt.dry_run:
            planned = Result(
                command="pods reap",
                headline=f"would terminate {len(found.expired)} expired pod(s)"
                + (f" and stop {len(found.hand_made)} hand-made pod(s)" if found.hand_made else ""),
                outputs={
                    "pod-ids": ",".join(p["id"] for p, _ in found.expired),
                    "count": len(found.expired),
                },
            )
            _prune_ledger(client, book, every, now, rt, planned)
            return planned
        result = _terminate_expired(client, book, found, now, rt, clock)
        stopped = _stop_hand_made(client, book, found.hand_made, rt, clock)
        gone = {r["pod"] for r in result.report.get("reaped") or []}
        end_runnerless = functools.partial(end_pod, client, rt, book, clock, reason="runner gone")
        clean_runners(result, rt, inp.runner_scope, every, gone, clock, end_runnerless)
        _prune_ledger(client, book, every, now, rt, result)
    _report_reap(result, stopped, found.unknown, untagged_s, targets, rt)
    repeat_failures.add_to_report(result, inp.health_store, inp.failure_days, rt, now)
    return result


class _Found(NamedTuple):
    """What a reap acts on."""

    pods: list[tuple[dict[str, Any], PodTag | None]]  # gpu-ci's pods (of the owner)
    expired: list[tuple[dict[str, Any], PodTag]]  # past expiry plus grace
    unknown: list[str]  # tagged, but no readable expiry: left alone
    hand_made: list[tuple[dict[str, Any], float]]  # untagged, live, older than the limit: age


def _find(
    every: list[dict[str, Any]], owner: str, grace: float, untagged_s: Any, now: float
) -> _Found:
    pods = tagged_pods(every, owner)
    expired = [
        (p, t)
        for p, t in pods
        if t and not math.isnan(t.expires_at) and t.expires_at + grace <= now
    ]
    unknown = [p["id"] for p, t in pods if t and math.isnan(t.expires_at)]
    hand_made = []
    if untagged_s is not None and not owner:
        for p in every:
            age = _age_s(p, now)
            if tag_of(p) is None and p.get("status") in LIVE and age and age >= untagged_s:
                hand_made.append((p, age))
    return _Found(pods, expired, unknown, hand_made)


def _terminate_expired(
    client: RunPodClient,
    book: ledger.Ledger | None,
    found: _Found,
    now: float,
    rt: Runtime,
    clock: Clock,
) -> Result:
    """Terminate the expired pods, recording who forgot each and what it cost."""
    expired = found.expired
    billed = _billed_quietly(client, now - 30 * 86400, now, rt) if expired else {}
    rows = {p["id"]: _forgotten(p, t, now, billed) for p, t in expired}
    if not expired:
        result = Result(command="pods reap", headline=f"no expired pods of {len(found.pods)}")
        result.outputs = {"pod-ids": "", "count": 0}
        return result

    def one(pod_id: str) -> str:
        row = rows[pod_id]
        return end_pod(
            client,
            rt,
            book,
            clock,
            pod_id,
            "reaped",
            owner=row["owner"],
            gpu=row["gpu"],
            costPerHr=row["usd_per_hr"],
            runUrl=row["run_url"],
            hoursPastTtl=row["hours_past_ttl"],
            pastTtlUsd=row["past_ttl_usd"],
            spentUsd=row["spent_usd"],
        )

    result = each_pod(list(rows), one, "pods reap", rt)
    done = [rows[k] for k in result.report.get("done", {})]
    result.report["reaped"] = done
    result.summary = ["### Reaped pods (past their TTL)\n\n" + _reaped_table(done)]
    return result


def _report_reap(
    result: Result,
    stopped: list[dict[str, Any]],
    unknown: list[str],
    untagged_s: Any,
    targets: list[notify.Target],
    rt: Runtime,
) -> None:
    """Name the hand-made pods stopped and the tags left alone; notify when anything ended."""
    if stopped:
        result.report["hand_made_stopped"] = stopped
        result.summary.append(
            "### Hand-made pods stopped (untagged, older than "
            f"{float(untagged_s or 0) / 3600:g}h)\n\n"
            + markdown_table(
                ["pod", "name", "GPU", "age h"],
                [[s["pod"], s["name"], s["gpu"], s["age_h"]] for s in stopped],
            )
        )
        result.warning(
            "stopped hand-made pod(s) older than the limit: "
            + ", ".join(f"{s['pod']} ({s['name']})" for s in stopped)
        )
    for pod_id in unknown:
        result.warning(f"pod {pod_id} has a gpu-ci tag without a readable expiry; left alone")
    reaped = result.report.get("reaped") or []
    if reaped or stopped:
        notify.deliver(targets, rt, result, *_reap_message(reaped, stopped))


def _age_s(pod: dict[str, Any], now: float) -> float | None:
    try:
        return now - parse_iso(str(pod.get("createdAt") or ""))
    except ValueError:
        return None


def _forgotten(
    pod: dict[str, Any], tag: PodTag, now: float, billed: dict[str, float] | None
) -> dict[str, Any]:
    """Who forgot this pod and what forgetting it cost: for the summary, JSON and ledger."""
    rate = float(pod.get("cost") or 0.0)
    past_h = max(0.0, now - tag.expires_at) / 3600
    return {
        "pod": pod["id"],
        "owner": tag.owner,
        "gpu": (pod.get("gpu") or {}).get("id", "cpu"),
        "status": pod.get("status", "?"),
        "usd_per_hr": rate,
        "hours_past_ttl": round(past_h, 3),
        "past_ttl_usd": round(rate * past_h, 4) if pod.get("status") in LIVE else 0.0,
        "spent_usd": None if billed is None else round(billed.get(pod["id"], 0.0), 4),
        "run_url": tag.run_url,
    }


def _billed_quietly(
    client: RunPodClient, since: float, now: float, rt: Runtime
) -> dict[str, float] | None:
    """USD billed per pod since ``since``; None (said in a warning) when billing is unread."""
    try:
        records = client.pod_billing(utc_iso(since), utc_iso(now))
    except GpuciError as exc:
        rt.log(f"warning: no billing for the reap report: {exc.one_line()}")
        return None
    out: dict[str, float] = {}
    for rec in records:
        out[rec["podId"]] = out.get(rec["podId"], 0.0) + float(rec.get("totalAmount") or 0.0)
    return out


def _prune_ledger(
    client: RunPodClient,
    book: ledger.Ledger | None,
    every: list[dict[str, Any]],
    now: float,
    rt: Runtime,
    result: Result,
) -> None:
    """Delete (a dry run: name) the ledger objects no budget period can count, so the ledger
    stays bounded on a scheduled reap: the day's first (see :mod:`gpuci.pods._budgets.prune`);
    bookkeeping: a failure warns, never fails the reap."""
    if book is None:
        return
    try:
        at = now if rt.dry_run else prune.due(book, now, result.warning)  # store's if earlier
        if at is None:
            rt.log("pods ledger: pruned already today")
            return
        billed = _billed_quietly(client, billing_start(at, prune.HORIZON_S), at, rt)
        done = prune.prune(book, every, billed, at, rt.dry_run)
        if done.cut and done.deleted and not rt.dry_run:
            prune.rearm(book, at)
    except (OSError, GpuciError) as exc:
        result.warning(f"pods ledger {book.where} not pruned: {exc}")
        return
    verb = "would delete" if rt.dry_run else "deleted"
    line = (
        f"pods ledger: {verb} {len(done.deleted)} object(s) no budget period can count "
        f"(older than {prune.HORIZON_S / 86400:.0f} days), kept {done.kept}"
    )
    rt.log(line)
    result.summary.append(f"### Pods ledger\n\n{line}" + "".join(f"; {n}" for n in done.notes))
    result.report["ledger_prune"] = {
        "dry_run": rt.dry_run,
        "deleted": done.deleted,
        "kept": done.kept,
        "notes": done.notes,
    }
    if book.skipped_line():
        result.warning(book.skipped_line())


def _reap_message(
    reaped: Sequence[dict[str, Any]], stopped: Sequence[dict[str, Any]]
) -> tuple[str, str]:
    lines = [
        f"- {r['pod']}: {r['owner']}, {r['gpu']}, {r['hours_past_ttl']:.2f} h past TTL, "
        f"${usd(r['past_ttl_usd'])} past TTL, run {r['run_url']}"
        for r in reaped
    ] + [f"- {s['pod']} ({s['name']}): hand-made, {s['age_h']} h old, stopped" for s in stopped]
    subject = f"gpu-ci: reaped {len(reaped)} forgotten pod(s)" + (
        f", stopped {len(stopped)} hand-made" if stopped else ""
    )
    return subject, "\n".join(lines)


def _reaped_table(rows: Sequence[dict[str, Any]]) -> str:
    return markdown_table(
        ["pod", "owner", "GPU", "hours past TTL", "USD/h", "cost past TTL", "spent USD", "run"],
        [
            [
                r["pod"],
                r["owner"],
                r["gpu"],
                f"{r['hours_past_ttl']:.2f}",
                usd(r["usd_per_hr"]),
                usd(r["past_ttl_usd"]),
                "?" if r["spent_usd"] is None else usd(r["spent_usd"]),
                r["run_url"],
            ]
            for r in rows
        ],
    )


def _stop_hand_made(
    client: RunPodClient,
    book: ledger.Ledger | None,
    pods: Sequence[tuple[dict[str, Any], float]],
    rt: Runtime,
    clock: Clock,
) -> list[dict[str, Any]]:
    """Stop (never terminate: their disks may hold someone's work) old untagged pods."""
    stopped = []
    for pod, age in pods:
        try:
            client.action(pod["id"], "stop")
        except (InvalidTransition, NotFound):
            continue
        except GpuciError as exc:
            rt.log(f"warning: could not stop hand-made pod {pod['id']}: {exc.one_line()}")
            continue
        row = {
            "pod": pod["id"],
            "name": redact.clip(redact.single_line(str(pod.get("name") or "")), 80),
            "gpu": (pod.get("gpu") or {}).get("id", "cpu"),
            "age_h": round(age / 3600, 1),
        }
        stopped.append(row)
        record_event(
            rt, book, "stopped", pod["id"], clock.now(), reason="untagged-older-than", **row
        )
    return stopped
