"""``pods stop`` and ``pods start``: a pod's GPU released (the disk kept) and taken again.

Already stopped and already running are success; ``start``'s ttl gives a pod a new expiry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuci.errors import GpuciError, InfraError, InputError
from gpuci.pods._budgets.cost import LIVE
from gpuci.pods._lifecycle.common import (
    each_pod,
    ledger_quietly,
    need_ids,
    open_client,
    record_event,
)
from gpuci.pods._runpod.client import InvalidTransition, NotFound, RunPodClient
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.naming import tag_of
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
            try:
                client.action(pod_id, "stop")
            except InvalidTransition:
                pod = client.get_pod(pod_id)
                if pod is not None and pod.get("status") == "EXITED":
                    return "already stopped"
                raise
            record_event(rt, book, "stopped", pod_id, clock.now(), reason="stop")
            return "stopped"

        return each_pod(ids, one, "pods stop", rt)


def start(inp: StartInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Start stopped pods; ``ttl`` moves the expiry (name and env) before starting.

    A running pod's env is never PATCHed (RunPod restarts a pod whose env changes): ``ttl`` on
    one is refused (exit 2), saying so."""
    ids = need_ids(inp.pod_id, "pods start")
    ttl = inp.ttl
    if rt.dry_run:
        extra = f" with expiry now+{ttl:.0f}s" if ttl else ""
        return Result(command="pods start", headline="would start " + ", ".join(ids) + extra)
    book = ledger_quietly(inp.ledger, rt)
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
            if ttl and tag is not None:
                new = tag.with_expiry(clock.now() + float(ttl))
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
            started = client.action(pod_id, "start") or client.get_pod(pod_id) or {}
            record_event(rt, book, "started", pod_id, clock.now(), reason="start")
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
            return "started" + note

        return each_pod(ids, one, "pods start", rt)


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
