"""Spend per owner and per GPU type, and the budget check ``up`` runs before it creates.

Spend is RunPod's pod billing for the period, attributed to owners through the live pods'
tags and the shared ledger (billing names only pod ids; see gpuci.pods._budgets.ledger). An owner's
exposure is that spend, plus what their live pods without a budget reservation may still bill
(cost per hour times the time left until expiry plus one reaper interval), plus their live
reservations. ``up`` refuses a candidate when exposure plus the new pod's cost per hour times
(TTL + reaper interval) would pass the owner's budget (see gpuci.pods._lifecycle.placement).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.pods import _notify as notify
from gpuci.pods._budgets import ledger
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.naming import clean_owner, fold_owner, tag_of
from gpuci.pods.options import CostInputs
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import utc_iso

UNATTRIBUTED = "(unattributed)"
LIVE = ("PROVISIONING", "STARTING", "RUNNING")


def usd(amount: float) -> str:
    """Money for people: cents when there are any, four places below a cent, never "0.00"
    for a real amount (``0.0012`` -> ``0.0012``, below that ``<0.0001``)."""
    if amount <= 0 or amount >= 0.01:
        return f"{amount:.2f}"
    return f"{amount:.4f}" if amount >= 0.0001 else "<0.0001"


@dataclass
class Spend:
    """Attributed billing plus live commitments, for one period."""

    billed_by_owner: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    billed_by_gpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    committed_by_owner: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    rate_by_owner: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    pods_by_owner: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    live_by_owner: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    running_by_gpu: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    reaped_by_owner: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def exposure(self, owner: str) -> float:
        owner = fold_owner(owner)
        return self.billed_by_owner.get(owner, 0.0) + self.committed_by_owner.get(owner, 0.0)

    def owners(self) -> list[str]:
        return sorted(
            set(self.billed_by_owner) | set(self.committed_by_owner) | set(self.reaped_by_owner)
        )


def attribute(
    records: Iterable[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    book: Mapping[str, ledger.PodRecord],
    now: float,
    grace_s: float = 0.0,
    covered: Mapping[str, float] | None = None,
    only: str = "",
) -> Spend:
    """Billing and live pods per owner (``only`` one owner, if given). A live pod's tag names
    its owner; a gone pod's spend counts for every owner its ledger record names (a planted
    event can add an owner, never take the spend from one). ``covered`` maps pods to the
    ``until`` of the live reservation that holds their commitment up to then (counted by the
    caller); only what lies beyond it (a ``start --ttl`` extension) is counted here. A live
    pod counts until it can be reaped: its expiry, or now when it is past that, plus
    ``grace_s``."""
    fold = fold_owner  # a name recorded as "Alice" (pod tag, ledger) is alice's
    owners_of = {pid: _folded(r.owners) for pid, r in book.items()}
    gpu_of: dict[str, str] = {pid: r.gpu or "?" for pid, r in book.items()}
    held = dict(covered or {})
    spend = Spend()
    only = fold(only)
    for pod in pods:
        tag = tag_of(pod)
        if tag is not None:
            owners_of[pod["id"]] = [fold(tag.owner)]
        gpu_of[pod["id"]] = (pod.get("gpu") or {}).get("id", "cpu")
        if tag is None or pod.get("status") not in LIVE or (only and fold(tag.owner) != only):
            continue
        owner = fold(tag.owner)
        rate = float(pod.get("cost") or 0.0)
        spend.rate_by_owner[owner] += rate
        spend.pods_by_owner[owner].add(pod["id"])
        spend.live_by_owner[owner].add(pod["id"])
        spend.running_by_gpu[gpu_of[pod["id"]]] += 1
        start = max(now, held.get(pod["id"], now))  # the reservation holds up to its until
        end = now if math.isnan(tag.expires_at) else max(now, tag.expires_at) + grace_s
        spend.committed_by_owner[owner] += rate * max(0.0, end - start) / 3600
    for rec in records:
        pid = rec["podId"]
        amount = float(rec.get("totalAmount") or 0.0)
        counted = [o for o in owners_of.get(pid) or [UNATTRIBUTED] if not only or o == only]
        for owner in counted:
            spend.billed_by_owner[owner] += amount
            spend.pods_by_owner[owner].add(pid)
        if counted:
            spend.billed_by_gpu[gpu_of.get(pid, "?")] += amount
    return spend


def _folded(owners: Iterable[str]) -> list[str]:
    """Owners folded, each once, in order."""
    return list(dict.fromkeys(fold_owner(o) for o in owners if o))


def covered_by(
    book: ledger.Ledger, owner: str, now: float
) -> Callable[[Mapping[str, ledger.PodRecord], Sequence[Mapping[str, Any]]], dict[str, float]]:
    """Live pods held by one of ``owner``'s live reservations, and until when (so they count
    once): the earliest ``until`` (as read at ``now``: ``Reservation.end``) of those the
    pod's record names that were made for that pod (its name, :func:`ledger.made_for`), for
    its owner, at no less than its rate. A planted
    reservation then covers no pod it does not pay for. The reservations are read when the
    returned function is called: after the pods were listed, which a release is checked
    against (:meth:`ledger.Ledger.reservations`)."""

    def covered(
        records: Mapping[str, ledger.PodRecord], pods: Sequence[Mapping[str, Any]]
    ) -> dict[str, float]:
        live = {r.key: r for r in book.reservations(owner)[0]}
        out = {}
        for pod in pods:
            tag, rec = tag_of(pod), records.get(str(pod.get("id")))
            if tag is None or rec is None or fold_owner(tag.owner) != fold_owner(owner):
                continue
            rate = float(pod.get("cost") or 0.0)
            untils = [
                r.end(now)
                for k in rec.reservations
                if (r := live.get(k)) is not None
                and ledger.made_for(r.name, str(pod.get("name") or ""))
                and r.cost_per_hr >= rate
            ]
            if untils:
                out[str(pod["id"])] = min(untils)
        return out

    return covered


def gather(
    client: Any,
    book: ledger.Ledger,
    period_s: float,
    now: float,
    grace_s: float = 0.0,
    covered: Callable[
        [Mapping[str, ledger.PodRecord], Sequence[Mapping[str, Any]]], Mapping[str, float]
    ]
    | None = None,
    only: str = "",
    deadline: float | None = None,
) -> tuple[Spend, dict[str, ledger.PodRecord]]:
    """Billing for [now - period, now) (from that day's midnight: ``billing_start``) plus the
    live pods, attributed through the ledger (which reads only the events of those pods: no
    object planted elsewhere is fetched); also returns the records.
    ``covered`` maps, from the records, pods to the ``until`` of the reservation holding them;
    ``deadline`` (the job's timeout) bounds RunPod's retry waits (``Retry-After``)."""
    since = billing_start(now, period_s)
    records = client.pod_billing(utc_iso(since), utc_iso(now), deadline)
    pods = client.list_pods(deadline)
    book.seen_pods(pods, at=now)  # all of them, listed after now
    known = book.book({r["podId"] for r in records} | {p["id"] for p in pods})
    held = covered(known, pods) if covered else None
    spend = attribute(records, pods, known, now, grace_s, held, only)
    for owner, n in ledger.reaped_by_owner(known, since).items():
        if not only or owner == fold_owner(only):
            spend.reaped_by_owner[owner] += n
    return spend, known


def exposure(
    client: Any,
    book: ledger.Ledger,
    owner: str,
    period_s: float,
    now: float,
    grace_s: float,
    deadline: float | None = None,
) -> float:
    """``owner``'s billed spend in the period plus what their live pods may still bill beyond
    their reservations (which the caller counts, as :meth:`ledger.Ledger.reserve` does)."""
    held = covered_by(book, owner, now)
    spend, _ = gather(client, book, period_s, now, grace_s, held, deadline=deadline)
    return spend.exposure(owner)


def billing_start(now: float, period_s: float) -> float:
    """Where RunPod's day-bucketed billing for [now - period, now) really starts: it snaps
    ``startTime`` down to midnight UTC (listPodBilling), so that midnight is what is asked for
    and reported; a budget period thus counts up to one day more, never less."""
    return (now - period_s) // 86400 * 86400


def verdict(budget: float, exposure: float, rate: float, ttl_s: float) -> tuple[bool, float]:
    """(fits, projected total) for a new pod at ``rate`` $/h living ``ttl_s`` seconds."""
    projected = exposure + rate * ttl_s / 3600
    return projected <= budget + 1e-9, projected


def tables(spend: Spend, owners: Sequence[str] | None = None) -> tuple[str, str]:
    """Per owner (only ``owners`` when given) and per GPU type."""
    shown = sorted(
        spend.owners() if owners is None else owners,
        key=lambda o: -spend.billed_by_owner.get(o, 0.0),
    )
    by_owner = markdown_table(
        ["owner", "spent USD", "live pods", "live USD/h", "committed USD", "reaped pods"],
        [
            [
                o,
                usd(spend.billed_by_owner.get(o, 0.0)),
                len(spend.live_by_owner.get(o, ())),
                usd(spend.rate_by_owner.get(o, 0.0)),
                usd(spend.committed_by_owner.get(o, 0.0)),
                spend.reaped_by_owner.get(o, 0),
            ]
            for o in shown
        ],
    )
    gpus = sorted(set(spend.billed_by_gpu) | set(spend.running_by_gpu))
    by_gpu = markdown_table(
        ["GPU type", "spent USD", "live pods"],
        [
            [g, usd(spend.billed_by_gpu.get(g, 0.0)), spend.running_by_gpu.get(g, 0)]
            for g in sorted(gpus, key=lambda g: -spend.billed_by_gpu.get(g, 0.0))
        ],
    )
    return by_owner, by_gpu


def spend_chart(spend: Spend, owners: Sequence[str], since: str) -> str:
    """Spend per person as a Mermaid chart, each one's budget (the budgets file's) as a line;
    the chart is a courtesy: an unreadable budgets file leaves the line out, not the report."""
    from gpuci import charts
    from gpuci.errors import GpuciError
    from gpuci.pods._budgets import policy as budgets

    try:
        book = budgets.load(None)
    except (GpuciError, OSError, ValueError):
        book = budgets.Budgets()
    shown = sorted(owners, key=lambda o: -spend.billed_by_owner.get(o, 0.0))[
        : charts.MAX_CATEGORIES
    ]
    if not shown:
        return ""
    chart = charts.spend_chart(
        [(o, spend.billed_by_owner.get(o, 0.0)) for o in shown],
        [book.limit(o) for o in shown],
        since,
    )
    return charts.fenced(chart) + "\n\n"


def run_cost(inp: CostInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """``pods cost``: spend per owner and per GPU type, as tables and JSON (``notify``: sent)."""
    from gpuci.pods._runpod.client import RunPodClient

    period_s = float(inp.period or 30 * 86400)
    only = clean_owner(inp.owner) if inp.owner else ""
    now = clock.now()
    since = utc_iso(billing_start(now, period_s))
    result = Result(command="pods cost")
    book = ledger.Ledger.open(inp.ledger or None, rt.environ, rt.mask)
    targets = notify.parse_targets(inp.notify or None, rt.mask)
    if rt.dry_run:
        result.headline = f"would read pod billing since {since} and list pods"
        result.report = {
            "plan": {"billing_from": since, "billing_to": utc_iso(now)},
            "ledger": book.where,
        }
        return result
    with RunPodClient.from_env(rt.environ, rt.mask, clock, read_only=rt.dry_run) as client:
        spend, _ = gather(client, book, period_s, now, only=only)
    owners = [only] if only else spend.owners()
    total = sum(spend.billed_by_owner.get(o, 0.0) for o in owners)
    by_owner, by_gpu = tables(spend, owners)
    result.summary = [
        f"### RunPod spend since {since}\n\n" + spend_chart(spend, owners, since) + by_owner,
        f"### By GPU type\n\n{by_gpu}",
    ]
    result.headline = f"${usd(total)} spent" + (f" by {only}" if only else "")
    result.outputs = {
        "total-usd": round(total, 4),
        "live-usd-per-hr": round(sum(spend.rate_by_owner.get(o, 0.0) for o in owners), 4),
    }
    result.report = _report(spend, owners, since, utc_iso(now), book.where)
    if book.skipped_line():
        result.warning(book.skipped_line())
    notify.deliver(
        targets,
        rt,
        result,
        f"gpu-ci: GPU spend since {since}: ${usd(total)}",
        _digest(spend, owners),
    )
    return result


def _report(spend: Spend, owners: list[str], since: str, to: str, where: str) -> dict[str, Any]:
    """``pods cost``'s JSON report: the period, each owner's spend and pods, each GPU type's."""
    return {
        "period": {"from": since, "to": to},
        "ledger": where,
        "owners": {
            o: {
                "spent_usd": round(spend.billed_by_owner.get(o, 0.0), 4),
                "live_pods": len(spend.live_by_owner.get(o, ())),
                "live_usd_per_hr": round(spend.rate_by_owner.get(o, 0.0), 4),
                "committed_usd": round(spend.committed_by_owner.get(o, 0.0), 4),
                "reaped_pods": spend.reaped_by_owner.get(o, 0),
                "pods": sorted(spend.pods_by_owner.get(o, ())),
            }
            for o in owners
        },
        "gpu_types": {
            g: {"spent_usd": round(v, 4), "live_pods": spend.running_by_gpu.get(g, 0)}
            for g, v in spend.billed_by_gpu.items()
        },
    }


def _digest(spend: Spend, owners: list[str]) -> str:
    """The notification's body: one line per owner."""
    return "\n".join(
        f"- {o}: ${usd(spend.billed_by_owner.get(o, 0.0))} spent, "
        f"{len(spend.live_by_owner.get(o, ()))} live pod(s), "
        f"{spend.reaped_by_owner.get(o, 0)} reaped"
        for o in owners
    )
