"""``pods stop``: release the GPU, keep the disk; already stopped is success."""

from __future__ import annotations

from gpuci.pods.lifecycle.common import (
    each_pod,
    ledger_quietly,
    need_ids,
    open_client,
    record_event,
)
from gpuci.pods.options import StopInputs
from gpuci.pods.runpod.client import InvalidTransition
from gpuci.pods.runpod.clock import SYSTEM, Clock
from gpuci.runtime import Result, Runtime


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
