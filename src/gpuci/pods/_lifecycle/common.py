"""The pods sub-commands' shared core: the client, the ledger, pod URLs and tags, acting on pods
one id at a time, and cleaning up their runners.

Each sub-command has its own module over this one: :mod:`gpuci.pods._lifecycle.up`, ``ls``,
``stop``, ``start``, ``down`` and ``reap``. ``down`` and ``reap`` treat a missing pod as success,
so they are safe to run twice and in ``if: always()``. Every command takes a clock so the tests
can simulate a day of CI.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuci import settings
from gpuci.errors import GpuciError, InputError
from gpuci.pods._budgets import ledger
from gpuci.pods._runners import cleanup as runner_cleanup
from gpuci.pods._runpod.client import API_KEY_ENV, RunPodClient
from gpuci.pods._runpod.clock import Clock
from gpuci.pods._runpod.naming import PodTag, fold_owner, tag_of
from gpuci.runtime import Result, Runtime, markdown_table


def open_client(rt: Runtime, clock: Clock) -> RunPodClient:
    """The API client; in a dry run it can only read (GET), whatever the code asks of it."""
    rt.mask(settings.RUNPOD_SSH_PRIVATE_KEY.raw(rt.environ))  # present in the job: never printed
    return RunPodClient.from_env(rt.environ, rt.mask, clock, read_only=rt.dry_run)


# A pod id as it may stand in a URL: RunPod's answer names it, and "evil.example/#" in
# ``https://{pod_id}-8000.proxy.runpod.net`` would send the health check and the job's calls
# to the pod's URL to another host.
URL_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def pod_url(pod: dict[str, Any], environ: Any) -> str:
    """The RunPod proxy URL of the first HTTP port, or empty (also for an id no URL holds)."""
    template = settings.RUNPOD_PROXY_URL.value(environ)
    if not URL_SAFE_ID.fullmatch(str(pod.get("id"))):
        return ""
    for port in pod.get("ports") or []:
        number, _, proto = str(port).partition("/")
        if proto == "http":
            return template.format(pod_id=pod["id"], port=number)
    return ""


def open_ledger(url: str, rt: Runtime) -> ledger.Ledger:
    return ledger.Ledger.open(url or None, rt.environ, rt.mask)


def ledger_quietly(url: str, rt: Runtime) -> ledger.Ledger | None:
    """The ledger for bookkeeping around a teardown: a bad ledger URL warns, never keeps a
    pod alive (``up``, which needs it for the budget, opens it strictly)."""
    try:
        return open_ledger(url, rt)
    except GpuciError as exc:
        rt.log(f"warning: pods ledger unusable, events not recorded: {exc.one_line()}")
        return None


def record_event(
    rt: Runtime, book: ledger.Ledger | None, event: str, pod_id: str, at: float, **f: Any
):
    """Record a pod event; bookkeeping never fails a teardown, it warns."""
    if book is None:
        return
    try:
        book.record(event, pod_id, at, **f)
    except (OSError, GpuciError) as exc:
        rt.log(f"warning: could not write the pods ledger {book.where}: {exc}")


def record_end(
    rt: Runtime,
    book: ledger.Ledger | None,
    event: str,
    pod_id: str,
    at: float,
    *,
    pod_name: str = "",
    pod: Mapping[str, Any] | None = None,
    **fields: Any,
) -> None:
    """The pod is gone: record it and release its budget reservation: of those its record
    names (an event anyone can plant may name anyone's), only ones made for ``pod_name``,
    the name RunPod listed it under (unknown: none; its reservation lapses at its end).

    The owner recorded is the pod's own, as its budget counted it while it lived: the tag of
    ``pod`` (as RunPod listed it), else the ``owner`` the caller read from that tag, and only
    for a pod RunPod no longer shows the ledger's (its first ``created`` event, which anyone
    can plant); ``ownerFrom`` says which (``pod`` or ``ledger``), and ``ledgerOwner`` names the
    ledger's when it differs."""
    if book is None:
        return
    try:
        known = book.pod(pod_id)
        if known is not None:
            fields = {
                "gpu": known.gpu,
                "costPerHr": known.cost_per_hr,
                "runUrl": known.run_url,
                **{k: v for k, v in fields.items() if v not in (None, "")},
            }
        fields.update(_owner_of(pod, str(fields.get("owner") or ""), known))
        book.record(event, pod_id, at, **fields)
        for key in _made_for(book, known, pod_name):
            book.release(key)
    except (OSError, GpuciError) as exc:
        rt.log(f"warning: could not write the pods ledger {book.where}: {exc}")


def _owner_of(
    pod: Mapping[str, Any] | None, told: str, known: ledger.PodRecord | None
) -> dict[str, str]:
    """The ended pod's owner and where it came from (see :func:`record_end`)."""
    tag = tag_of(pod) if pod is not None else None
    ledger_owner = known.owner if known is not None else ""
    if tag is None and not told:
        return {"owner": ledger_owner, "ownerFrom": "ledger"} if ledger_owner else {}
    owner = tag.owner if tag is not None else told
    out = {"owner": owner, "ownerFrom": "pod"}
    if ledger_owner and fold_owner(ledger_owner) != fold_owner(owner):
        out["ledgerOwner"] = ledger_owner  # for whoever reads the event: spend goes by created
    return out


def _made_for(book: ledger.Ledger, known: ledger.PodRecord | None, pod_name: str) -> list[str]:
    """The reservations ``known`` names that were made for the pod named ``pod_name``."""
    if known is None or not pod_name or not known.reservations:
        return []
    found = book.reservation_names(known.reservations)
    return [k for k in known.reservations if ledger.made_for(found.get(k, ""), pod_name)]


def tagged_pods(
    pods: Sequence[dict[str, Any]], owner: str = "", include_all: bool = False
) -> list[tuple[dict[str, Any], PodTag | None]]:
    out = []
    for pod in pods:
        tag = tag_of(pod)
        if tag is None and not include_all:
            continue
        if owner and (
            tag is None or fold_owner(tag.owner) != fold_owner(owner)
        ):  # old tags: any case
            continue
        out.append((pod, tag))
    return out


def each_pod(ids: Sequence[str], fn: Callable[[str], str], command: str, rt: Runtime) -> Result:
    """Apply ``fn`` to every pod id and report all; a failure does not stop the others.

    The exit code is the first failure's (bad input 2, infrastructure 3), so one stuck pod
    fails the step without hiding what happened to the rest.
    """
    done: dict[str, str] = {}
    failed: dict[str, GpuciError] = {}
    for pod_id in ids:
        try:
            done[pod_id] = fn(pod_id)
            rt.log(f"{pod_id}: {done[pod_id]}")
        except GpuciError as exc:
            failed[pod_id] = exc
    result = Result(command=command)
    if failed:
        first = next(iter(failed.values()))
        prefix = f"{len(failed)} of {len(ids)} pod(s) failed: " if len(ids) > 1 else ""
        shown = copy.copy(first)
        shown.message = prefix + first.message
        result = Result.from_error(command, shown)
    else:
        result.headline = f"{len(done)} pod(s): " + ", ".join(f"{k} {v}" for k, v in done.items())
    result.outputs = {"pod-ids": ",".join(done), "count": len(done)}
    result.report["done"] = done
    result.report["failed"] = {k: v.one_line() for k, v in failed.items()}
    if done:
        result.summary = [markdown_table(["pod", "result"], [[k, v] for k, v in done.items()])]
    return result


def offline_plan(command: str, plan: str) -> Result:
    """A dry run where the pod list can't be read (no key here, or no CI run): say so."""
    result = Result(command=command, headline=f"{plan} (the pod list is read at run time)")
    result.notice(f"{API_KEY_ENV} is not set or this is not a CI run: the plan names no pods")
    return result


def need_ids(ids: Sequence[str], command: str) -> list[str]:
    if not ids:
        raise InputError(f"{command} needs pod-id", hint="pass --pod-id ID (comma-separated ok)")
    return list(ids)


def end_pod(
    client: RunPodClient,
    rt: Runtime,
    book: ledger.Ledger | None,
    clock: Clock,
    pod_id: str,
    event: str = "terminated",
    **fields: Any,
) -> str:
    """Terminate a pod (one already gone is success) and :func:`record_end` it as ``event``:
    ``terminated`` or ``already gone``, for :func:`each_pod`. Its name is read first: the
    reservation released is the one made for it."""
    try:
        pod = client.get_pod(pod_id) if book is not None else None
    except GpuciError as exc:  # the name only decides a release: the pod still goes
        rt.log(f"warning: could not read {pod_id}'s name, its reservation stays: {exc}")
        pod = None
    outcome = "already gone" if client.delete_pod(pod_id).already else "terminated"
    name = str((pod or {}).get("name") or "")
    record_end(rt, book, event, pod_id, clock.now(), pod_name=name, pod=pod, **fields)
    return outcome


def clean_runners(
    result: Result,
    rt: Runtime,
    runner_scope: str,
    pods: Sequence[dict[str, Any]],
    gone: set[str],
    clock: Clock,
    *args: Any,
    **kwargs: Any,
) -> None:
    """Sweep the CI runners of ``pods`` (those in ``gone`` were just ended) into ``result``."""
    _with_runners(
        result,
        runner_cleanup.clean(
            rt,
            runner_scope or "repo",
            [p for p in pods if p["id"] not in gone],
            [p for p in pods if p["id"] in gone],
            clock.now(),
            *args,
            **kwargs,
        ),
    )


def _with_runners(result: Result, cleanup: runner_cleanup.Cleanup) -> None:
    """Add the runner sweep to a down/reap result: report, summary, warnings."""
    result.report.update(cleanup.report())
    table = cleanup.summary()
    if table:
        result.summary.append(table)
    for warning in cleanup.warnings:
        result.warning(warning)
