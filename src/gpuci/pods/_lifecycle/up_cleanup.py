"""What a failed or cancelled ``pods up`` undoes: its pod, its runner, its budget reservation.

Including what it asked for but never heard back about: a create whose answer was lost (a
timeout, a cancel mid-call) may have made the pod, so it is looked up by the unique name this
run gave it; a reservation written just before the cancel is found by the same name; a
runner registration whose answer was lost is looked up by the runner's name.

:func:`undo` is bounded (each call
:data:`~gpuci.pods._lifecycle.cancel.CLEANUP_REQUEST_S` with one quick retry; the pod first,
always, as it is what bills; the runner only while
:data:`~gpuci.pods._lifecycle.cancel.CLEANUP_DEADLINE_S` lasts, else down/reap delete it),
quiet (one failed step never skips the next; it says ``reap will``) and idempotent (what it
ended is forgotten, so a second call does nothing twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from gpuci.errors import GpuciError
from gpuci.pods._budgets import ledger
from gpuci.pods._lifecycle.cancel import CLEANUP_DEADLINE_S, CLEANUP_REQUEST_S
from gpuci.pods._lifecycle.common import record_end
from gpuci.pods._runners.registry import Request
from gpuci.pods._runpod.client import NotFound, RunPodClient
from gpuci.pods._runpod.clock import Clock
from gpuci.pods._runpod.naming import PodTag
from gpuci.runtime import Runtime


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

    def remember(self) -> None:
        """Record ``pod`` under its owner in the ledger, if this run has not yet."""


def undo(job: Job, log: Callable[[str], None]) -> list[str]:
    """End the pod, the runner and the reservation this ``up`` made; what happened, in short.

    ``log`` hears each step's line (the caller prints them, or folds them into one line).
    """
    deadline = time.monotonic() + CLEANUP_DEADLINE_S
    done: list[str] = []
    pod = _end_pod(job, log, done)
    left = deadline - time.monotonic()
    if job.runner is not None and job.runner.attempted:
        if left > 0:
            said = job.runner.unregister_quietly(log, timeout=min(CLEANUP_REQUEST_S, left))
            done.append(said)
        else:
            done.append(f"runner {job.runner.name} left for down/reap (out of time)")
    _release(job, pod, log, done)
    return [d for d in done if d]


def _end_pod(job: Job, log: Callable[[str], None], done: list[str]) -> dict[str, Any] | None:
    """Terminate this run's pod (looked up by name if its create's answer never came)."""
    if job.pod is None and not job.create_sent:
        return None
    client = job.client.bounded(CLEANUP_REQUEST_S)
    try:
        pod = job.pod
        if pod is None:
            pod = find_quietly(client, job.tag.name(), log)
            if pod is None:
                job.create_sent = False
                done.append("no pod was made")
                return None
            job.pod = pod
        job.remember()  # in the ledger before it ends: the bill has an owner whatever comes next
        ended = terminate_quietly(client, pod["id"], log)  # always tried: it is what bills
    finally:
        client.close()
    if not ended:
        done.append(f"pod {pod['id']} not terminated (its TTL and reap will)")
        return None
    job.pod, job.create_sent = None, False
    done.append(f"terminated pod {pod['id']}")
    return pod


def _release(
    job: Job, pod: dict[str, Any] | None, log: Callable[[str], None], done: list[str]
) -> None:
    """Record the ended pod under its owner and release the budget reservation: the pod (if
    any) is ended, so its reservation goes too; the event names the owner even when the pod
    was cancelled before ``created`` was written."""
    tag = job.tag
    if pod is not None:
        record_end(
            job.rt,
            job.book,
            "terminated",
            pod["id"],
            job.clock.now(),
            reason="up failed",
            owner=tag.owner,
            runUrl=tag.run_url,
            gpu=(pod.get("gpu") or {}).get("id", ""),
            costPerHr=pod.get("cost"),
        )
    released = job.reservation is not None
    try:
        if job.reservation is not None:
            job.book.release(job.reservation.key)
        elif job.reserve_name:  # written, but the cancel came before reserve() returned it
            released = bool(job.book.release_named(tag.owner, job.reserve_name))
    except (OSError, GpuciError) as exc:
        log(f"warning: could not release the budget reservation: {exc}")
    job.reservation, job.reserve_name = None, ""
    if released:
        done.append("released the budget reservation")


def find_quietly(
    client: RunPodClient, name: str, log: Callable[[str], None]
) -> dict[str, Any] | None:
    try:
        return client.find_by_name(name)
    except GpuciError as exc:
        log(f"warning: could not look for pod {name} to clean it up: {exc.one_line()}")
        return None


def terminate_quietly(client: RunPodClient, pod_id: str, log: Callable[[str], None]) -> bool:
    """Terminate ``pod_id``; True when it is gone (now or already)."""
    try:
        client.delete_pod(pod_id)
        log(f"terminated {pod_id} after the failure")
    except NotFound:
        pass
    except GpuciError as exc:
        log(f"warning: could not terminate {pod_id}: {exc.one_line()} (reap will)")
        return False
    return True
