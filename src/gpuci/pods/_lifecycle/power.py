"""``pods stop`` and ``pods start``: a pod's GPU released (the disk kept) and taken again.

Already stopped and already running are success; ``start``'s ttl gives a pod a new expiry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuci import redact
from gpuci.errors import CheckFailed, GpuciError, InfraError, InputError
from gpuci.pods._budgets import cost, ledger
from gpuci.pods._budgets import policy as budgets
from gpuci.pods._budgets.cost import LIVE
from gpuci.pods._lifecycle.common import (
    each_pod,
    ledger_quietly,
    need_ids,
    open_client,
    open_ledger,
    record_event,
)
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.client import NotFound, RunPodClient
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.naming import PodTag, tag_of
from gpuci.pods.options import StartInputs, StopInputs
from gpuci.runtime import Result, Runtime
from gpuci.units import utc_iso


def stop(inp: StopInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Stop pods (keep the disk, stop GPU billing); already stopped counts as done."""
    ids = need_ids(inp.pod_id, "pods stop")
    if rt.dry_run:
        return Result(command="pods stop", headline="would stop " + ", ".join(ids))
    book = ledger_quietly(inp.ledger, rt)
    with open_client(rt, clock) as client:

        def one(pod_id: str) -> str:
            acted = client.action(pod_id, "stop", settled_ok=True)
            if acted.ours:
                record_event(rt, book, "stopped", pod_id, clock.now(), reason="stop")
            return acted.said("stopped")

        return each_pod(ids, one, "pods stop", rt)


def start(inp: StartInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Start stopped pods; ``ttl`` moves the expiry (name and env) before starting, once the
    pod's owner may be acted for and can afford it (:func:`_hold_budget`).

    A running pod's env is never PATCHed (RunPod restarts a pod whose env changes): ``ttl`` on
    one is refused (exit 2), saying so."""
    ids = need_ids(inp.pod_id, "pods start")
    ttl = inp.ttl
    if rt.dry_run:
        extra = f" with expiry now+{ttl:.0f}s" if ttl else ""
        return Result(command="pods start", headline="would start " + ", ".join(ids) + extra)
    # a new expiry may need the budget, which cannot be checked without the ledger
    book = open_ledger(inp.ledger, rt) if ttl else ledger_quietly(inp.ledger, rt)
    with open_client(rt, clock) as client:

        def one(pod_id: str) -> str:
            pod = client.get_pod(pod_id)
            if pod is None:
                raise NotFound(f"pod {pod_id} not found", hint="check the id with `pods ls`")
            tag = tag_of(pod)
            note = ""
            live = pod.get("status") in LIVE
            if ttl and tag is not None and live:
                raise InputError(
                    f"pod {pod_id} is {pod.get('status')}: its expiry lives in its env, and "
                    "RunPod restarts a pod whose env is updated, so ttl is not applied to a "
                    "running pod",
                    hint=f"stop it first (pods stop {pod_id}), then pods start --ttl; or let "
                    "it end at its expiry and start a new one",
                )
            held: dict[str, str] = {}
            if ttl and tag is not None and book is not None:
                new = tag.with_expiry(clock.now() + float(ttl))
                reservation = _hold_budget(rt, client, book, pod, new, clock.now(), inp.budgets)
                held = {"reservation": reservation.key} if reservation else {}
                env = {**(pod.get("env") or {}), **new.env()}
                client.update_pod(pod_id, {"name": new.name(), "env": env})
                note = f", expires {utc_iso(new.expires_at)}"
            elif tag is not None and tag.expires_at <= clock.now():
                raise InputError(
                    f"pod {pod_id} expired at {utc_iso(tag.expires_at)}; its timer would stop it "
                    "at once",
                    hint="pass ttl to give it a new expiry",
                )
            if live:
                return "already running" + note
            acted = client.action(pod_id, "start")  # answer lost, retry refused: "already"
            started = acted.pod or client.get_pod(pod_id) or {}
            record_event(rt, book, "started", pod_id, clock.now(), reason="start", **held)
            if _gpus(pod) and _gpus(started) == 0:
                _stop_again(client, pod_id)
                record_event(rt, book, "stopped", pod_id, clock.now(), reason="0 GPUs")
                raise InfraError(
                    f"pod {pod_id} came back with 0 GPUs (RunPod gave its GPUs to another pod "
                    "while it was stopped; its docs say a restarted pod may be reallocated 0 "
                    "GPUs): stopped it again",
                    hint=f"copy what you need off its volume, then pods down {pod_id} and pods "
                    "up for a new pod",
                )
            return acted.said("started") + note

        return each_pod(ids, one, "pods start", rt)


def _hold_budget(
    rt: Runtime,
    client: RunPodClient,
    book: ledger.Ledger,
    pod: Mapping[str, Any],
    new: PodTag,
    now: float,
    budgets_file: str = "",
) -> ledger.Reservation | None:
    """The check ``up`` runs, for a stopped pod about to get expiry ``new``: the owner rule,
    then its rate (:func:`_rate`) until the new expiry plus the reap interval, beside the
    owner's spend and other reservations, under the lower of the budgets file's budget and the
    one the pod was admitted under. The reservation written takes over the pod's own (found by
    its name as up made it, as the client finds a pod: gpu-smoke appends its verdict), which
    are released; none when the owner has no budget. Raises CheckFailed (exit 1) when it does
    not fit or cannot be priced, InputError (exit 2) when the CI identity may not act for the
    owner."""
    name = str(pod.get("name") or "")
    book.seen_pods([pod])  # it is on RunPod: a release of its reservation is not believed
    own = [r for r in book.reservations(new.owner)[0] if ledger.made_for(r.name, name)]
    decision = budgets.decide_extension(
        new.owner,
        rt.environ,
        min((r.budget for r in own if r.budget is not None), default=None),
        max((r.period_s for r in own if r.period_s), default=None),
        budgets_file,
    )
    if decision.budget is None:
        return None
    budget = decision.budget
    rate = max([_rate(client, pod, new.owner), *(r.cost_per_hr for r in own)])
    until = new.expires_at + decision.grace_s
    base = cost.exposure(client, book, new.owner, decision.period_s, now, decision.grace_s)

    def decide(reserved: float) -> float:
        fits, projected = cost.verdict(budget, base + reserved, rate, until - now)
        if not fits:
            raise CheckFailed(
                f"owner {new.owner} would pass budget ${budget:.2f}: the new expiry "
                f"{utc_iso(new.expires_at)} at ${cost.usd(rate)}/h makes ${cost.usd(projected)}",
                hint="pass a shorter ttl, stop or down other pods, or ask for a larger budget "
                "in the budgets file",
            )
        return rate

    replaces = own[-1].name if own else name
    hold = ledger.Hold(
        new.run_url, new.name(), budget, decision.period_s, replaces=replaces, place_by=now
    )  # the pod exists: it takes the new name at once, or never
    return book.reserve(new.owner, now, until, decide, hold)


def _rate(client: RunPodClient, pod: Mapping[str, Any], owner: str) -> float:
    """What the pod will bill per hour once started: RunPod's catalog price of its GPU type in
    its cloud times its GPU count (a stopped pod lists cost 0, and the ledger, which anyone
    with write access to its store writes, may only raise it). Raises CheckFailed when the
    catalog has no price for it: a new expiry that cannot be priced is never given."""
    gpu = pod.get("gpu") if isinstance(pod.get("gpu"), dict) else {}
    gpu_id, cloud = str((gpu or {}).get("id") or ""), str(pod.get("cloud") or "")
    count = _gpus(pod) or 1  # a pod stopped after it came back with 0 GPUs asks for its own
    price = None
    if gpu_id and cloud in ("SECURE", "COMMUNITY"):
        price = plan.price_per_hr(client.list_gpu_types(cloud, count), gpu_id, cloud, count)
    if price is None or price <= 0:
        shown = redact.excerpt(gpu_id or "none", 80)  # RunPod's text: one printable line
        raise CheckFailed(
            f"pod {redact.excerpt(str(pod.get('id')), 40)} cannot be priced: RunPod's catalog "
            f"has no price for its GPU type {shown} in its cloud, so a new expiry cannot be "
            f"held to {owner}'s budget",
            hint="start it without ttl while its expiry is ahead, or pods down it and pods up "
            "a new one",
        )
    return max(price, float(pod.get("cost") or 0.0))


def _gpus(pod: Mapping[str, Any]) -> int | None:
    """The pod's GPU count; None for a CPU pod or an answer without one."""
    count = (pod.get("gpu") or {}).get("count") if isinstance(pod.get("gpu"), dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _stop_again(client: RunPodClient, pod_id: str) -> None:
    """A pod without its GPUs bills for nothing it was made for: stop it (best effort)."""
    try:
        client.action(pod_id, "stop")
    except GpuciError:
        pass  # the error says what to do; its expiry still stops it
