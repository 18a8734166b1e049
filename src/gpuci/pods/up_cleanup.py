"""What a failed or cancelled ``pods up`` undoes: its pod, its budget reservation, and the
SIGTERM hook that turns a cancelled job into an exception so the undoing runs at all.

Each step is quiet (logs a warning, never raises): one failed undo must not skip the next.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from gpuci.errors import GpuciError
from gpuci.pods import ledger
from gpuci.pods.client import NotFound, RunPodClient
from gpuci.pods.clock import Clock
from gpuci.pods.lifecycle import record_end
from gpuci.pods.naming import PodTag
from gpuci.runtime import Runtime


def release_quietly(
    rt: Runtime,
    book: ledger.Ledger,
    reservation: ledger.Reservation | None,
    pod: dict[str, Any] | None,
    tag: PodTag,
    clock: Clock,
) -> None:
    """After a failed ``up``: the pod (if any) is ended, so its reservation goes too; the
    event names the owner even when the pod was cancelled before ``created`` was written."""
    if pod is not None:
        record_end(
            rt,
            book,
            "terminated",
            pod["id"],
            clock.now(),
            reason="up failed",
            owner=tag.owner,
            runUrl=tag.run_url,
            gpu=(pod.get("gpu") or {}).get("id", ""),
            costPerHr=pod.get("cost"),
        )
    if reservation is not None:
        try:
            book.release(reservation.key)
        except (OSError, GpuciError) as exc:
            rt.log(f"warning: could not release the budget reservation: {exc}")


def sigterm_raises() -> Callable[[], None]:
    """Turn SIGTERM (a cancelled CI job) into an exception, so ``up`` cleans up its pod."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def find_quietly(client: RunPodClient, name: str, rt: Runtime) -> dict[str, Any] | None:
    try:
        return client.find_by_name(name)
    except GpuciError as exc:
        rt.log(f"warning: could not look for pod {name} to clean it up: {exc.one_line()}")
        return None


def terminate_quietly(client: RunPodClient, pod_id: str, rt: Runtime) -> None:
    try:
        client.delete_pod(pod_id)
        rt.log(f"terminated {pod_id} after the failure")
    except NotFound:
        pass
    except GpuciError as exc:
        rt.log(f"warning: could not terminate {pod_id}: {exc.one_line()} (reap will)")
