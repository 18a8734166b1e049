"""The ``retry-fetch`` command: inputs in, parallel downloads or a dry-run plan, one Result."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gpuci import httpclients, journal
from gpuci.errors import ExitCode, GpuciError
from gpuci.fetch._download import FetchResult, fetch_file, new_client
from gpuci.fetch._memory import keep_buffers_in_heap
from gpuci.fetch._plan import Probe, offline, probe
from gpuci.fetch._policy import FetchPolicy
from gpuci.fetch._sources import (
    Job,
    build_jobs,
    fetch_checksum,
    file_name,
    home_credentials,
    parse_headers,
    public_url,
    url_secrets,
)
from gpuci.fetch.options import FetchInputs
from gpuci.markdown import Code, Link
from gpuci.runtime import Result, Runtime, markdown_table, probes_allowed
from gpuci.units import human_bytes

COMMAND = "retry-fetch"
_WAKE_SECONDS = 0.25  # how often the main thread looks for a signal a worker took
T = TypeVar("T")


def run(inp: FetchInputs, rt: Runtime) -> Result:
    """Fetch every URL (``parallel`` at a time); a failure of one fails the step after all ran."""
    started = time.monotonic()
    keep_buffers_in_heap()  # our own process: its 1 MiB reads reused, not faulted in anew
    headers = parse_headers(inp.headers, rt.mask)
    for line in inp.url:  # mask credentials before a bad URL can print them
        for secret in url_secrets((line.split() or [""])[0]):
            rt.mask(secret)
    policy = inp.policy(rt.environ)
    jobs = build_jobs(inp.url, inp.dest, inp.sha256, inp.mirrors, Path.cwd())
    for job in jobs:  # presigned URLs carry their signature in the query: never print it
        for url in (job.url, *job.mirrors, job.sha256_url or ""):
            for secret in url_secrets(url):
                rt.mask(secret)
    workers = max(1, min(inp.parallel, len(jobs)))
    with new_client(policy, connections=workers * policy.connections) as client:
        if rt.dry_run:
            return _plan(jobs, client, headers, policy, workers, rt)
        outcomes = _fetch_all(jobs, workers, client, lambda j: _one(j, client, headers, policy, rt))
    done = [o for o in outcomes if isinstance(o, FetchResult)]
    failed = [(j, o) for j, o in zip(jobs, outcomes, strict=True) if isinstance(o, GpuciError)]
    result = (
        Result.from_error(COMMAND, failed[0][1])
        if failed
        else Result(command=COMMAND, headline=headline(done))
    )
    for _job, exc in failed[1:]:
        result.error(exc.one_line(), exc.title)
    result.outputs.update(_outputs(done, time.monotonic() - started))
    attempts = int(result.outputs["attempts"] or 0)
    result.outputs["attempts"] = attempts + sum(getattr(e, "attempts", 0) for _j, e in failed)
    result.summary.append(_table(jobs, outcomes))
    result.report["files"] = [_record(r) for r in done]
    result.report["failed"] = [{"url": j.url, "error": e.one_line()} for j, e in failed]
    if done:
        try:
            journal.record(COMMAND, {"files": [_record(r) for r in done]}, rt.environ)
        except OSError as exc:
            result.warning(f"could not write the job journal: {exc}", "gpu-ci: journal")
    return result


def _fetch_all(
    jobs: list[Job], workers: int, client: httpx.Client, one: Callable[[Job], T]
) -> list[T]:
    """Each job's outcome, in order; ``workers`` at a time: the downloads, and a dry run's
    probes (their requests go through the same client, so the same abort closes them).

    Ctrl-C must stop the step, not wait for it: one at a time, the jobs run on this (the main)
    thread, where the interrupt lands inside the download itself. Several at a time, an
    interrupt (which only the main thread sees) aborts the client, so every worker's read and
    next connect fail at once and nothing more is renamed into place, and drops the jobs not
    started. The abort's event (:func:`gpuci.httpclients.stopped`) is the one every retry's
    wait of those downloads waits on (segments', checksum files' too): a worker in one ends
    at once with :class:`gpuci.retry.Interrupted`, places nothing, and the step exits.
    """
    if workers == 1:
        return [one(job) for job in jobs]
    pool = ThreadPoolExecutor(workers, thread_name_prefix="fetch")
    try:
        outcomes = _outcomes([pool.submit(one, job) for job in jobs])
    except BaseException:
        httpclients.abort(client)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return outcomes


def _outcomes(futures: list[Future[T]]) -> list[T]:
    """Each future's result, in order, the first exception raised as it comes.

    The main thread waits in short slices: the kernel hands a process's Ctrl-C to any of its
    threads, and when a worker takes it, Python only sets a flag that the main thread reads
    when it runs; blocked in one wait with no timeout it would sleep through the interrupt
    until every download ended.
    """
    pending: set[Future[T]] = set(futures)
    while pending:
        done, pending = wait(pending, timeout=_WAKE_SECONDS, return_when=FIRST_EXCEPTION)
        for future in done:
            if future.exception() is not None:
                future.result()  # raises it: the caller aborts the others
    return [f.result() for f in futures]


def headline(done: list[FetchResult]) -> str:
    """ "verified" only for bytes checked against a sha256 someone gave us: a download without
    one is only "downloaded" (its digest is reported, but nothing was compared to it)."""
    size = human_bytes(sum(r.bytes for r in done))
    checked = [r for r in done if r.verified]
    if len(checked) == len(done):
        return f"{len(done)} file(s), {size} verified"
    if not checked:
        return f"{len(done)} file(s), {size} downloaded (no sha256 given: not verified)"
    return f"{len(done)} file(s), {size} downloaded, {len(checked)} verified by sha256"


def _one(
    job: Job, client: httpx.Client, headers: dict[str, str], policy: FetchPolicy, rt: Runtime
) -> FetchResult | GpuciError:
    started = time.monotonic()  # the checksum file's deadline counts from the job's start
    try:
        if job.sha256_url:
            creds = home_credentials(job.sha256_url, job.url, headers)
            name = file_name(job.url)
            digest = fetch_checksum(client, job.sha256_url, name, policy, creds, started)
            job = replace(job, sha256=digest)
        meter = rt.progress(job.dest.name, None)
        res = None
        try:
            res = fetch_file(
                job.url,
                job.dest,
                job.sha256,
                policy=policy,
                headers=headers,
                mirrors=job.mirrors,
                client=client,
                progress=meter,
                started=started,  # one deadline for the checksum file and the download
            )
        finally:
            present = res is not None and res.skipped
            note = "already present, sha256 matches" if present else None
            meter.close(failed=res is None, note=note)
        return res
    except GpuciError as exc:
        return exc


def _outputs(done: list[FetchResult], seconds: float) -> dict[str, Any]:
    return {
        "path": "\n".join(str(r.path) for r in done),
        "sha256": "\n".join(r.sha256 for r in done),
        "bytes": sum(r.bytes for r in done),
        "attempts": sum(r.attempts for r in done),
        "resumed-bytes": sum(r.resumed_bytes for r in done),
        "connections": max((r.connections for r in done), default=0),
        "seconds": round(seconds, 3),
    }


def _record(r: FetchResult) -> dict[str, Any]:
    return {
        "url": public_url(r.url),
        "path": str(r.path),
        "sha256": r.sha256,
        "bytes": r.bytes,
        "attempts": r.attempts,
        "resumed_bytes": r.resumed_bytes,
        "skipped": r.skipped,
        "verified": r.verified,
    }


def _table(jobs: list[Job], outcomes: list[FetchResult | GpuciError]) -> str:
    rows = []
    for job, out in zip(jobs, outcomes, strict=True):
        if isinstance(out, FetchResult):
            rate = human_bytes(out.bytes / out.seconds) + "/s" if out.seconds > 0 else "-"
            rows.append(
                [
                    str(out.path),
                    human_bytes(out.bytes),
                    Code(out.sha256[:16] + "…"),
                    out.attempts,
                    human_bytes(out.resumed_bytes),
                    f"{out.seconds:.2f}",
                    "already present" if out.skipped else rate,
                    out.url,
                ]
            )
        else:
            rows.append([str(job.dest), "-", "-", "-", "-", "-", "FAILED", job.url])
    headers = ["file", "size", "sha256", "attempts", "resumed", "seconds", "rate", "source"]
    return "### retry-fetch\n\n" + markdown_table(headers, rows)


def _plan(
    jobs: list[Job],
    client: httpx.Client,
    headers: dict[str, str],
    policy: FetchPolicy,
    workers: int,
    rt: Runtime,
) -> Result:
    """Dry run: write nothing; without ``--probe`` contact nobody, with it probe every URL."""
    allowed = probes_allowed(rt)
    probes = _probe_all(jobs, client, headers, policy, workers, allowed)
    bad = [p for p in probes if not p.ok]
    total = sum(p.size or 0 for p in probes)
    size = human_bytes(total) if allowed else "size not asked (--probe asks the servers)"
    result = Result(command=COMMAND, headline=f"dry run: would fetch {len(jobs)} file(s), {size}")
    result.report["probe"] = allowed
    if bad:
        result.exit_code = ExitCode.INFRA
        result.headline = f"dry run: {len(bad)} of {len(jobs)} URL(s) would fail"
        for p in bad:
            result.error(f"{p.job.url}: {p.error}", "gpu-ci: download would fail")
    result.summary.append(_plan_table(probes))
    result.outputs.update(
        {
            "path": "\n".join(str(p.job.dest) for p in probes),
            "sha256": "\n".join(p.job.sha256 or "" for p in probes),
            "bytes": total,
            "attempts": 0,
            "resumed-bytes": 0,
            "connections": 0,
            "seconds": 0,
        }
    )
    result.report["plan"] = [
        {
            "url": p.job.url,
            "dest": str(p.job.dest),
            "status": p.status,
            "size": p.size,
            "resumable": p.resumable,
            "would": p.action,
            "error": p.error,
        }
        for p in probes
    ]
    return result


def _probe_all(
    jobs: list[Job],
    client: httpx.Client,
    headers: dict[str, str],
    policy: FetchPolicy,
    workers: int,
    allowed: bool,
) -> list[Probe]:
    """Each job's probe, in order: offline unless probing is allowed (its checksum file first)."""

    def one(job: Job) -> Probe:
        if not allowed:
            return offline(job, policy)
        if job.sha256_url:
            try:
                creds = home_credentials(job.sha256_url, job.url, headers)
                digest = fetch_checksum(client, job.sha256_url, file_name(job.url), policy, creds)
                job = replace(job, sha256=digest)
            except GpuciError as exc:
                return Probe(job, None, None, False, "fail", exc.one_line())
        return probe(client, job, headers, policy)

    return _fetch_all(jobs, workers, client, one)  # Ctrl-C aborts the probes' requests too


def _plan_table(probes: list[Probe]) -> str:
    rows = [
        [
            Link(p.job.url),
            p.status if p.status is not None else "-",
            human_bytes(p.size) if p.size is not None else "unknown",
            p.resumable,
            p.job.sha256[:16] + "…" if p.job.sha256 else "-",
            p.error or p.action,
        ]
        for p in probes
    ]
    return "### retry-fetch (dry run)\n\n" + markdown_table(
        ["url", "status", "size", "resumable", "sha256", "would"], rows
    )
