"""Spend per owner and per GPU type, and the budget check ``up`` runs before it creates.

Spend is RunPod's pod billing for the period, attributed to owners through the live pods'
tags and the local ledger (billing names only pod ids). An owner's exposure is that spend plus
what their live pods are committed to: cost per hour times the time left until each pod's
expiry plus one reaper interval (the self-stop timer ends it at expiry; if that layer failed,
the reaper ends it within one interval). ``up`` refuses a candidate when exposure plus the new
pod's cost per hour times (TTL + reaper interval) would pass ``budget-usd``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.pods import ledger
from gpuci.pods.clock import SYSTEM, Clock, iso
from gpuci.pods.naming import tag_of
from gpuci.runtime import Result, Runtime, markdown_table

UNATTRIBUTED = "(unattributed)"
LIVE = ("PROVISIONING", "STARTING", "RUNNING")


@dataclass
class Spend:
    """Attributed billing plus live commitments, for one period."""

    billed_by_owner: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    billed_by_gpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    committed_by_owner: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    rate_by_owner: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    pods_by_owner: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    running_by_gpu: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def exposure(self, owner: str) -> float:
        return self.billed_by_owner.get(owner, 0.0) + self.committed_by_owner.get(owner, 0.0)


def attribute(
    records: Iterable[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    book: Mapping[str, Mapping[str, Any]],
    now: float,
    grace_s: float = 0.0,
) -> Spend:
    owner_of: dict[str, str] = {pid: e.get("owner", UNATTRIBUTED) for pid, e in book.items()}
    gpu_of: dict[str, str] = {pid: e.get("gpu", "?") for pid, e in book.items()}
    spend = Spend()
    for pod in pods:
        tag = tag_of(pod)
        if tag is not None:
            owner_of[pod["id"]] = tag.owner
        gpu_of[pod["id"]] = (pod.get("gpu") or {}).get("id", "cpu")
        if tag is None or pod.get("status") not in LIVE:
            continue
        rate = float(pod.get("cost") or 0.0)
        left_h = (
            0.0 if math.isnan(tag.expires_at) else max(0.0, tag.expires_at + grace_s - now) / 3600
        )
        spend.committed_by_owner[tag.owner] += rate * left_h
        spend.rate_by_owner[tag.owner] += rate
        spend.pods_by_owner[tag.owner].add(pod["id"])
        spend.running_by_gpu[gpu_of[pod["id"]]] += 1
    for rec in records:
        pid = rec["podId"]
        amount = float(rec.get("totalAmount") or 0.0)
        owner = owner_of.get(pid, UNATTRIBUTED)
        spend.billed_by_owner[owner] += amount
        spend.billed_by_gpu[gpu_of.get(pid, "?")] += amount
        spend.pods_by_owner[owner].add(pid)
    return spend


def gather(
    client: Any, environ: Mapping[str, str], period_s: float, now: float, grace_s: float = 0.0
) -> Spend:
    """Billing for [now - period, now) plus the live pods, attributed."""
    records = client.pod_billing(iso(now - period_s), iso(now))
    return attribute(records, client.list_pods(), ledger.read(environ), now, grace_s)


def verdict(budget: float, exposure: float, rate: float, ttl_s: float) -> tuple[bool, float]:
    """(fits, projected total) for a new pod at ``rate`` $/h living ``ttl_s`` seconds."""
    projected = exposure + rate * ttl_s / 3600
    return projected <= budget + 1e-9, projected


def tables(spend: Spend) -> tuple[str, str]:
    owners = sorted(
        set(spend.billed_by_owner) | set(spend.committed_by_owner),
        key=lambda o: -spend.billed_by_owner.get(o, 0.0),
    )
    by_owner = markdown_table(
        ["owner", "spent USD", "live pods", "live USD/h", "committed USD"],
        [
            [
                o,
                f"{spend.billed_by_owner.get(o, 0.0):.2f}",
                sum(1 for _ in spend.pods_by_owner.get(o, ())),
                f"{spend.rate_by_owner.get(o, 0.0):.2f}",
                f"{spend.committed_by_owner.get(o, 0.0):.2f}",
            ]
            for o in owners
        ],
    )
    gpus = sorted(set(spend.billed_by_gpu) | set(spend.running_by_gpu))
    by_gpu = markdown_table(
        ["GPU type", "spent USD", "live pods"],
        [
            [g, f"{spend.billed_by_gpu.get(g, 0.0):.2f}", spend.running_by_gpu.get(g, 0)]
            for g in sorted(gpus, key=lambda g: -spend.billed_by_gpu.get(g, 0.0))
        ],
    )
    return by_owner, by_gpu


def run_cost(values: dict[str, Any], rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """``pods cost``: spend per owner and per GPU type, as tables and JSON."""
    from gpuci.pods.client import RunPodClient

    period_s = float(values.get("period") or 30 * 86400)
    only = values.get("owner") or ""
    now = clock.now()
    result = Result(command="pods cost")
    if rt.dry_run:
        result.headline = f"would read pod billing since {iso(now - period_s)} and list pods"
        result.report = {"plan": {"billing_from": iso(now - period_s), "billing_to": iso(now)}}
        return result
    with RunPodClient.from_env(rt.environ, rt.mask, clock, read_only=rt.dry_run) as client:
        spend = gather(client, rt.environ, period_s, now)
    owners = sorted(set(spend.billed_by_owner) | set(spend.committed_by_owner))
    if only:
        owners = [o for o in owners if o == only]
    total = sum(spend.billed_by_owner.get(o, 0.0) for o in owners)
    by_owner, by_gpu = tables(spend)
    result.summary = [
        f"### RunPod spend since {iso(now - period_s)}\n\n{by_owner}",
        f"### By GPU type\n\n{by_gpu}",
    ]
    result.headline = f"${total:.2f} spent" + (f" by {only}" if only else "")
    result.outputs = {
        "total-usd": round(total, 4),
        "live-usd-per-hr": round(sum(spend.rate_by_owner.get(o, 0.0) for o in owners), 4),
    }
    result.report = {
        "period": {"from": iso(now - period_s), "to": iso(now)},
        "owners": {
            o: {
                "spent_usd": round(spend.billed_by_owner.get(o, 0.0), 4),
                "live_usd_per_hr": round(spend.rate_by_owner.get(o, 0.0), 4),
                "committed_usd": round(spend.committed_by_owner.get(o, 0.0), 4),
                "pods": sorted(spend.pods_by_owner.get(o, ())),
            }
            for o in owners
        },
        "gpu_types": {
            g: {"spent_usd": round(v, 4), "live_pods": spend.running_by_gpu.get(g, 0)}
            for g, v in spend.billed_by_gpu.items()
        },
    }
    return result
