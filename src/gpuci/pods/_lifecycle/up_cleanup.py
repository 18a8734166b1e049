"""What a failed or cancelled ``pods up`` undoes: its pod, its runner, its budget reservation.

Including what it asked for but never heard back about: a create whose answer was lost (a
timeout, a cancel mid-call) may have made the pod, so it is looked up by the unique name this
run gave it; a reservation written just before the cancel is found by the same name; a
runner registration whose answer was lost is looked up by the runner's name.

:func:`undo` is bounded (each call
:data:`~gpuci.pods._lifecycle.cancel.CLEANUP_REQUEST_S` with one quick retry; the pod first,
always, as it is what bills, before anything slow; the runner only while
:data:`~gpuci.pods._lifecycle.cancel.CLEANUP_DEADLINE_S` lasts, else down/reap delete it; the
ledger last, waited for only until that deadline: a store that does not answer, S3's own
limits being minutes, must not hold a cancelled job until its SIGKILL), quiet (one failed
step never skips the next; it says ``reap will``) and idempotent (what it ended is
forgotten, so a second call does nothing twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from gpuci.background import Background
from gpuci.errors import GpuciError
from gpuci.pods._budgets import ledger
from gpuci.pods._lifecycle.cancel import CLEANUP_DEADLINE_S, CLEANUP_REQUEST_S
from gpuci.pods._lifecycle.common import record_end
from gpuci.pods._runners.registry import Request
from gpuci.pods._runpod.client import RunPodClient
from gpuci.pods._runpod.clock import Clock
from gpuci.pods._runpod.naming import PodTag
from gpuci.runtime import Runtime

# The ledger's writes run on threads of this name: the cleanup waits for them only as long as
# it has, and one still writing at the process's exit ends with it.
LEDGER_THREAD = "gpuci-pods-ledger"


class Job(Protocol):
    """What ``up`` has made so far (``gpuci.pods._lifecycle.up._Up``), as the cleanup reads it."""

    rt: Runtime
    client: RunPodClient
    clock: Clock
    book: ledger.Ledger
    tag: PodTag
    runner: Request | None
    pod: dict[str, Any] | None
    create_sent: bool  # a create was sent for tag.name(): its pod may exist unseen
    reservation: ledger.Reservation | None
    reserve_name: str  # a reservation was being written for this pod name

    def remember(self, pod: dict[str, Any] | None = None) -> None:
        """Record ``pod`` (this run's, by default) under its owner in the ledger, once."""


def undo(job: Job, log: Callable[[str], None]) -> list[str]:
    """End the pod, the runner and the reservation this ``up`` made; what happened, in short.

    ``log`` hears each step's line (the caller prints them, or folds them into one line).
    """
    deadline = time.monotonic() + CLEANUP_DEADLINE_S
    done: list[str] = []
    pod = _pod_made(job, log, done)
    # Its owner goes into the ledger while it is being ended, never first: the store may hang.
    owner = Background(lambda: job.remember(pod), LEDGER_THREAD) if pod is not None else None
    ended = pod is not None and _end_pod(job, pod, log, done)
    left = deadline - time.monotonic()
    if job.runner is not None and job.runner.attempted:
        if left > 0:
            said = job.runner.unregister_quietly(log, timeout=min(CLEANUP_REQUEST_S, left))
            done.append(said)
        else:
            done.append(f"runner {job.runner.name} left for down/reap (out of time)")
    _bookkeep(job, pod if ended else None, owner, log, done, deadline)
    return [d for d in done if d]


def _pod_made(job: Job, log: Callable[[str], None], done: list[str]) -> dict[str, Any] | None:
    """This run's pod, looked up by name if its create's answer never came; None: none."""
    if job.pod is not None or not job.create_sent:
        return job.pod
    name = job.tag.name()
    with job.client.bounded(CLEANUP_REQUEST_S) as client:
        try:
            pod = client.find_by_name(name)
        except GpuciError as exc:  # unseen is not absent: create_sent stays, a retry looks again
            log(f"warning: could not look for pod {name} to clean it up: {exc.one_line()}")
            done.append(f"pod {name} may still exist, unseen (its TTL and reap will end it)")
            return None
    if pod is None:
        job.create_sent = False
        done.append("no pod was made")
    job.pod = pod
    return pod


def _end_pod(job: Job, pod: dict[str, Any], log: Callable[[str], None], done: list[str]) -> bool:
    """Terminate ``pod``, waiting on nothing else: True when it is gone."""
    with job.client.bounded(CLEANUP_REQUEST_S) as client:
        ended = terminate_quietly(client, pod["id"], log)  # always tried: it is what bills
    if not ended:
        done.append(f"pod {pod['id']} not terminated (its TTL and reap will)")
        return False
    job.pod, job.create_sent = None, False
    done.append(f"terminated pod {pod['id']}")
    return True


def _bookkeep(
    job: Job,
    ended: dict[str, Any] | None,
    owner: Background[None] | None,
    log: Callable[[str], None],
    done: list[str],
    deadline: float,
) -> None:
    """The ledger, once the pod is dealt with: its owner (``owner``, under way), the end of
    the pod ``ended``, the reservation released; waited for only until ``deadline``."""
    reservation, reserve_name = job.reservation, job.reserve_name
    if owner is None and reservation is None and not reserve_name:
        return
    said: list[str] = []
    # a pod that would not end, or may exist unseen, still bills: its reservation holds it
    # (the owner's next reservation releases it once the pod is gone)
    held = job.pod is not None or job.create_sent

    def write() -> None:
        if owner is not None:
            owner.wait()
        if ended is not None:
            _record_end(job, ended)
        if not held and _release(job, reservation, reserve_name, log):
            said.append("released the budget reservation")

    try:
        finished = Background(write, LEDGER_THREAD).wait(deadline)
    finally:  # forgotten, done or not: a second call never releases it twice
        job.reservation, job.reserve_name = None, ""
    if finished:
        done.extend(said)
        return
    line = "the pods ledger did not answer in time: this pod's records may be missing from it"
    log(f"warning: {line}")
    done.append(line)


def _record_end(job: Job, pod: dict[str, Any]) -> None:
    """Record the ended pod under its owner: the event names the owner even when the pod
    was cancelled before ``created`` was written."""
    tag = job.tag
    record_end(
        job.rt,
        job.book,
        "terminated",
        pod["id"],
        job.clock.now(),
        pod=pod,
        reason="up failed",
        owner=tag.owner,
        runUrl=tag.run_url,
        gpu=(pod.get("gpu") or {}).get("id", ""),
        costPerHr=pod.get("cost"),
    )


def _release(
    job: Job,
    reservation: ledger.Reservation | None,
    reserve_name: str,
    log: Callable[[str], None],
) -> bool:
    """Release the budget reservation (the pod, if any, is ended, so it goes too); True when
    one was released."""
    try:
        if reservation is not None:
            job.book.release(reservation.key)
            return True
        if reserve_name:  # written, but the cancel came before reserve() returned it
            return bool(job.book.release_named(job.tag.owner, reserve_name))
    except (OSError, GpuciError) as exc:
        log(f"warning: could not release the budget reservation: {exc}")
    return False


def terminate_quietly(client: RunPodClient, pod_id: str, log: Callable[[str], None]) -> bool:
    """Terminate ``pod_id``; True when it is gone (now or already)."""
    try:
        if client.delete_pod(pod_id).ours:
            log(f"terminated {pod_id} after the failure")
    except GpuciError as exc:
        log(f"warning: could not terminate {pod_id}: {exc.one_line()} (reap will)")
        return False
    return True
