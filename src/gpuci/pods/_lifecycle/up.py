"""``pods up``: place a pod (the candidates, with backoff), wait for RUNNING and a health URL,
boot its runner; it terminates its own pod if anything after the create fails or the job is
cancelled.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci import journal, redact, settings
from gpuci.errors import CheckFailed, GpuciError, InfraError, InputError
from gpuci.markdown import Link
from gpuci.pods import _notify as notify
from gpuci.pods._budgets import ledger
from gpuci.pods._budgets import policy as budgets
from gpuci.pods._lifecycle import cancel, placement, readiness, ssh, up_cleanup, up_plan
from gpuci.pods._lifecycle.common import open_client, open_ledger, pod_url, record_event
from gpuci.pods._runners import boot as runner_boot
from gpuci.pods._runners import registry as runners
from gpuci.pods._runners import release as runner_release
from gpuci.pods._runners.registry import runner_name
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.client import RunPodClient, api_url
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.naming import PodTag, new_tag, run_url
from gpuci.pods.health import _avoid as avoid
from gpuci.pods.health import _handover as handover
from gpuci.pods.health import _pod_gpuci as pod_gpuci
from gpuci.pods.health import _replace as replace
from gpuci.pods.options import UpInputs
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import utc_iso


def up(inp: UpInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Create one pod on the first candidate that places and is affordable; wait until ready.

    Phases: prepare (owner, tag, runner, spec) -> place (budget, runner registration, create)
    -> wait (RUNNING, runner online, health) -> report.
    """
    if inp.ttl <= 0:
        raise InputError("ttl must be positive", hint="set ttl to e.g. 45m")
    now = clock.now()
    decision = budgets.decide(inp, rt.environ)
    tag = _tag(decision.owner, inp, rt, now)
    runner = runners.Request.from_inputs(inp, rt.environ, rt.mask, tag, now, rt.dry_run)
    spec = _spec(inp, rt, runner)
    said: list[str] = []  # warnings before the Result exists
    if spec.smoke:
        find = pod_gpuci.planned if rt.dry_run else pod_gpuci.resolve
        spec.gpuci_package = find(inp.gpuci_source, rt.environ, said.append)
        for secret in redact.url_secrets(spec.gpuci_package or ""):
            rt.mask(secret)  # a private archive's user:token: in no log line, the runner's too
    first = plan.Candidate((inp.gpu_types or [""])[0])
    plan.check_env_count(plan.create_body(spec, tag, first, api_url(rt.environ)), spec.env)
    book = open_ledger(inp.ledger, rt)
    targets = notify.parse_targets(inp.notify or None, rt.mask)
    if not spec.command:
        warn = (
            "no command given: the self-stop timer is off for this pod (reap and down still "
            "end it); pass command to enable it"
        )
    else:
        warn = ""
    if rt.dry_run:
        return up_plan.plan_up(inp, rt, spec, tag, warn, decision, book, runner)
    result = Result(command="pods up")
    for line in [warn, *said] if warn else said:
        result.warning(line)
    for note in decision.notes:
        result.notice(note)
    for shared in runner.warnings if runner else []:
        result.warning(shared)
    # From here to the report, SIGINT/SIGTERM (a cancelled job) raise Cancelled wherever up
    # is, and whatever this run made is ended before the process exits 130/143.
    with cancel.guarded(cancel.Guard()) as guard, open_client(rt, clock) as client:
        job = _Up(inp, rt, clock, client, now, decision, tag, runner, spec, book, targets, result)
        try:
            pod, url = _create_and_wait(job)
            return _report_up(job, pod, url)
        except BaseException as exc:
            try:
                _undo(job, guard, exc)
            except cancel.Cancelled as late:  # the first signal came before the hold began
                _undo(job, guard, late)  # idempotent: ends only what is left
                raise
            if isinstance(exc, GpuciError) and any(a.verdict for a in job.attempts.items):
                return _report_failed(job, exc)  # a smoke failed: report every attempt
            raise


def _undo(job: _Up, guard: cancel.Guard, exc: BaseException) -> None:
    """End what this run made; cancelled: say so in one line, and exit as cancelled.

    The cleanup runs under ``guard.hold()``: a later signal (GitHub's SIGTERM 7.5 s after its
    SIGINT) is noted, never raised, so it cannot cut the cleanup short.
    """
    with guard.hold():
        if guard.signum is None and not isinstance(exc, cancel.Cancelled):
            done = up_cleanup.undo(job, job.rt.log)  # a failure: each step says its line
        else:
            done = up_cleanup.undo(job, lambda line: None)  # folded into the one line below
        how = guard.cancelled()
        if how is not None:
            job.rt.log(
                f"gpu-ci: pods up cancelled by {how.signame}: "
                + ("; ".join(done) if done else "nothing of it was left to end")
            )
    if how is not None and not isinstance(exc, cancel.Cancelled):
        raise how from None  # a signal came during a failure's cleanup: exit as cancelled


@dataclass
class _Up:
    """One ``pods up`` under way: what the phases share, and what a failure must undo."""

    inp: UpInputs
    rt: Runtime
    clock: Clock
    client: RunPodClient
    now: float
    decision: budgets.Decision
    tag: PodTag
    runner: runners.Request | None
    spec: plan.PodSpec
    book: ledger.Ledger
    targets: list[notify.Target]
    result: Result
    pod: dict[str, Any] | None = None
    reservation: ledger.Reservation | None = None
    cands: list[plan.Candidate] | None = None  # what the budget allowed: re-placement's pool
    release: runner_release.Release | None = None
    attempts: replace.Attempts = field(default_factory=replace.Attempts)
    create_sent: bool = False  # a create was sent for tag.name(): its pod may exist unseen
    reserve_name: str = ""  # a reservation is being written for this pod name
    recorded: str = ""  # the pod whose "created" event this run wrote

    def remember(self, pod: dict[str, Any] | None = None) -> None:
        """Record ``pod`` (this run's, by default) under its owner, once. The cleanup calls
        it too, after it ended the pod (what bills goes first), within the time it has left:
        the bill then has an owner even when the cancel came before ``created`` was written;
        a pod left alive is found by reap, which records it."""
        pod = self.pod if pod is None else pod
        if pod is None or self.recorded == pod["id"]:
            return
        at = self.clock.now()
        _remember(self.rt, self.book, pod, self.tag, self.reservation, at, self.runner)
        self.recorded = pod["id"]


def _create_and_wait(job: _Up) -> tuple[dict[str, Any], str]:
    """Place the pod and wait until it is ready; a pod that fails its smoke is replaced."""
    _place(job)
    while True:
        try:
            return _wait_ready(job)
        except GpuciError as exc:
            if not job.spec.smoke or job.pod is None:
                raise
            verdict = replace.failed_verdict(job.client, job.pod["id"], exc, job.rt)
            if verdict is None:
                raise
            _place_again(job, verdict)


def _place(job: _Up) -> None:
    """Pick the affordable candidates, register the runner, create the pod and record it."""
    inp, rt, client, clock = job.inp, job.rt, job.client, job.clock
    spec, tag = job.spec, job.tag
    deadline = job.now + inp.timeout  # the reads before placement are the job's time too
    catalog = client.list_gpu_types(spec.cloud, spec.gpu_count, deadline)
    cands = plan.candidates(inp.gpu_types, inp.data_centers, catalog)
    cands = _avoid_failed(job, cands)
    if job.decision.budget is not None:
        job.reserve_name = tag.name()
    # no pod is created under the reservation after this: the first placement starts
    # before the timeout (_in_time), so only a smoke replacement that starts later is cut
    place_by = job.now + inp.timeout + inp.placement_timeout
    try:
        affordable, refused, job.reservation = placement.affordable(
            job.decision,
            inp,
            rt,
            client,
            clock,
            spec,
            tag,
            catalog,
            cands,
            job.book,
            deadline,
            place_by,
        )
    except CheckFailed as exc:
        _tell_refusal(job.targets, rt, tag, exc)
        raise
    job.result.report["budget_refused"] = refused
    if job.book.skipped_line():  # a planted or broken object: said once, never a blocker
        job.result.warning(job.book.skipped_line())
    job.cands = affordable
    _in_time(job)
    _create(job, affordable)  # after the budget: a refused pod registers nothing


def _in_time(job: _Up) -> None:
    """The reads before placement (catalog, budget) may have spent the job's whole timeout in
    RunPod's ``Retry-After`` waits: past it, create nothing (the pod would fail at once)."""
    spent = job.clock.now() - job.now
    if spent >= job.inp.timeout:
        raise InfraError(
            f"the catalog and budget reads took {spent / 60:.0f} min, past the "
            f"{job.inp.timeout / 60:.0f} min timeout: no pod was created",
            hint="retry later, or raise timeout: RunPod is throttling",
        )


def _place_again(job: _Up, verdict: handover.Verdict) -> None:
    """The pod failed gpu-smoke (hardware): end it, record it, and place another away from
    its data centre, with a new runner registration (each is one-use), inside the budget
    reservation already held (same expiry), up to ``smoke-attempts`` pods in all."""
    rt, client, clock, runner = job.rt, job.client, job.clock, job.runner
    now = clock.now()
    failed = replace.end_failed(client, job.attempts, verdict, now, rt, job.result)
    job.result.warning(f"pod {failed.pod} in {failed.data_center or '?'}: {failed.verdict}")
    record_event(
        rt,
        job.book,
        "terminated",
        failed.pod,
        now,
        reason="gpu-smoke hardware failure",
        owner=job.tag.owner,
        runUrl=job.tag.run_url,
    )  # the reservation stays: the next pod is placed under it
    replace.record_verdict(
        job.inp.health_store, rt, failed, verdict, runner.name if runner else "", job.result
    )
    job.pod, job.create_sent = None, False
    if runner is not None:  # its pod never started it: delete it, a new pod needs a new one
        runner.unregister_quietly(rt.log)
    limit = job.inp.smoke_attempts
    cands = replace.next_candidates(job.cands or [], job.attempts.failed_dcs, job.result)
    if len(job.attempts.items) >= limit or not cands:
        raise replace.out_of_attempts(job.attempts, limit)
    job.tag = dataclasses.replace(
        job.tag, nonce=secrets.token_hex(3)
    )  # a new pod name, the same expiry
    if runner is not None:
        runner.renew(runner_name(job.tag, now))
    _create(job, cands)


def _create(job: _Up, cands: Sequence[plan.Candidate]) -> None:
    """Register the runner, if any (each registration is one-use: one per pod), create the pod
    on the first of ``cands`` that places, and record it."""
    rt, clock, runner = job.rt, job.clock, job.runner
    if runner is not None:
        registered = runner.register(rt.mask)
        job.release = job.release or _runner_release(job.inp, runner, clock.now(), job.result)
        job.spec.runner_env = _runner_env(registered, rt, job.release)
        rt.log(f"registered {runner.target.platform} runner {runner.name}")
    place_by = job.reservation.place_by if job.reservation else None
    if place_by is not None and clock.now() >= place_by:
        raise InfraError(
            f"no pod was created: past {utc_iso(place_by)}, the end of placement its budget "
            "reservation allows (timeout plus placement-timeout)",
            hint="raise timeout or placement-timeout",
        )
    job.create_sent = True  # from here, a lost answer may still have made the pod
    job.pod, attempts = placement.place(
        job.inp, rt, job.client, clock, job.spec, job.tag, cands, place_by
    )
    job.result.report.setdefault("attempts", []).extend(attempts)
    job.attempts.add(job.pod, clock.now())
    job.remember()


def _avoid_failed(job: _Up, cands: list[plan.Candidate]) -> list[plan.Candidate]:
    """Drop data centres with a recent hardware failure; none left: exit 1, saying why."""
    got = avoid.avoid_failed(job.inp, job.rt, cands, job.clock.now())
    for warning in got.warnings:
        job.result.warning(warning)
    if got.failed:
        job.result.report["health_avoided"] = {
            "data_centers": got.failed,
            "refused": got.refused,
        }
    if not got.candidates:
        raise CheckFailed(
            "every candidate is in a data centre with a hardware failure in the GPU health "
            "record: " + "; ".join(f"{dc}: {why}" for dc, why in sorted(got.failed.items())),
            hint="add GPU types or data centres, or set avoid-failed-days to 0 to place anyway",
        )
    return got.candidates


def _wait_ready(job: _Up) -> tuple[dict[str, Any], str]:
    """Wait for RUNNING, the runner online and the health URL: the pod and its proxy URL."""
    inp, rt, client, clock, runner = job.inp, job.rt, job.client, job.clock, job.runner
    assert job.pod is not None
    deadline = job.now + inp.timeout
    pod = job.pod = readiness.wait_running(client, clock, job.pod["id"], deadline, rt)
    if runner is None and job.spec.smoke:
        _smoke_said(job, replace.wait_verdict(client, clock, pod["id"], deadline, rt))
    if runner is not None and inp.runner_wait_online:
        readiness.wait_online(client, clock, pod["id"], runner, deadline, rt)
        if job.spec.smoke:  # the gate ran before the runner started: what did it say?
            try:
                _smoke_said(job, handover.verdict_of(client.get_pod(pod["id"], deadline)))
            except GpuciError as exc:  # the runner is online: this read is only for the log
                rt.log(f"warning: could not read the smoke verdict: {exc.one_line()}")
    url = pod_url(pod, rt.environ)
    if inp.health_url:
        readiness.wait_healthy(
            readiness.health_url(inp.health_url, pod, url),
            clock,
            job.now + inp.timeout,
            rt,
        )
    return pod, url


def _report_failed(job: _Up, exc: GpuciError) -> Result:
    """``up`` failed after a pod failed its smoke: the error, with every attempt's cost."""
    result = Result.from_error("pods up", exc)
    result.annotations[1:1] = job.result.annotations
    result.report.update({k: v for k, v in job.result.report.items() if k not in result.report})
    reserved = job.reservation.remaining(job.now) if job.reservation else None
    smoke = job.attempts.report(job.clock.now(), job.tag.expires_at, reserved)
    result.report["smoke"] = smoke
    result.summary.append(job.attempts.summary(smoke))
    return result


def _smoke_said(job: _Up, verdict: handover.Verdict | None) -> None:
    if verdict is not None and verdict.kind == "skipped":
        job.result.warning(
            f"gpu-smoke before handover gave no verdict on {(job.pod or {}).get('id')} "
            f"({handover.reason(verdict, job.spec.gpuci_package)}): the pod was handed over "
            "unchecked; a stock image installs "
            "gpu-ci from gpuci-source (docs/pods.md)"
        )
    elif verdict is not None:
        job.rt.log(f"gpu-smoke before handover: {verdict.kind}")


def _report_up(job: _Up, pod: dict[str, Any], url: str) -> Result:
    """The headline, outputs (with the ssh command), summary table and report of a ready pod."""
    result, tag, runner, rt = job.result, job.tag, job.runner, job.rt
    result.headline = (
        f"{pod['id']} RUNNING on {pod.get('gpu', {}).get('id', '?')} "
        f"at ${float(pod.get('cost') or 0):.2f}/h until {utc_iso(tag.expires_at)}"
        + (f", {runner.target.platform} runner {runner.name}" if runner else "")
    )
    result.outputs = {
        "pod-id": pod["id"],
        "status": pod["status"],
        "cost-per-hr": float(pod.get("cost") or 0.0),
        "url": url,
        "gpu-type": pod.get("gpu", {}).get("id", ""),
        "data-center": pod.get("dataCenterId") or "",
        "expires-at": utc_iso(tag.expires_at),
        "ssh-command": "",
        "runner-name": runner.name if runner else "",
    }
    if job.spec.ssh_keys:
        ep = ssh.endpoint(pod)
        if ep is None:
            result.warning(f"{pod['id']} reports no usable SSH endpoint yet; see `pods ls`")
        else:
            result.outputs["ssh-command"] = ssh.command_line(ep)
            rt.log(f"ssh: {result.outputs['ssh-command']}")
    result.summary = [
        "### RunPod pod\n\n"
        + markdown_table(
            ["pod", "GPU", "data centre", "USD/h", "owner", "expires", "url"],
            [
                [
                    pod["id"],
                    result.outputs["gpu-type"],
                    result.outputs["data-center"],
                    f"{float(pod.get('cost') or 0):.2f}",
                    tag.owner,
                    utc_iso(tag.expires_at),
                    Link(url) if url else "",
                ]
            ],
        )
    ]
    avoided = result.report.get("health_avoided")
    if avoided:
        result.summary.append(
            "#### Kept off (GPU health record)\n\n"
            + markdown_table(["data centre", "why"], sorted(avoided["data_centers"].items()))
        )
    result.report["pod"] = {k: pod.get(k) for k in ("id", "name", "status", "cost", "gpu")}
    if job.spec.smoke:
        reserved = job.reservation.remaining(job.now) if job.reservation else None
        smoke = job.attempts.report(job.clock.now(), tag.expires_at, reserved)
        result.report["smoke"] = smoke
        if len(job.attempts.items) > 1:
            result.summary.append(job.attempts.summary(smoke))
    return result


def _tell_refusal(
    targets: Sequence[notify.Target], rt: Runtime, tag: PodTag, exc: CheckFailed
) -> None:
    """Budget refusals are news for the owner and whoever watches spend."""
    shown = Result.from_error("pods up", exc)
    notify.deliver(
        targets,
        rt,
        shown,
        f"gpu-ci: GPU pod refused for {tag.owner} (budget)",
        f"{exc.one_line()}\nCI run: {tag.run_url}",
    )
    for annotation in shown.annotations[1:]:  # delivery warnings reach the log
        rt.log(f"warning: {annotation.message}")


def _spec(inp: UpInputs, rt: Runtime, runner: runners.Request | None = None) -> plan.PodSpec:
    image = inp.image or (runners.DEFAULT_IMAGE if runner else "")
    if not image:
        raise InputError("input 'image' is required", hint="pass --image IMAGE or set INPUT_IMAGE")
    smoke = inp.smoke
    return plan.PodSpec(
        image=image,
        smoke=bool(runner) if smoke is None else bool(smoke),
        command=runner_boot.SCRIPT if runner else inp.command,
        env=plan.parse_env(inp.env, rt.mask),
        ports=plan.check_ports(inp.ports),
        disk_gb=inp.disk_gb or 50,
        gpu_count=inp.gpu_count or 1,
        cloud=inp.cloud or "SECURE",
        ssh_keys=ssh.public_keys(inp.ssh_public_keys, rt.environ),
        runner_env=_runner_env(runner.planned_env(), rt) if runner else {},
    )


def _runner_env(
    env: dict[str, str], rt: Runtime, release: runner_release.Release | None = None
) -> dict[str, str]:
    """A runner pod's env: the registration's, the runner release, a mirror if set."""
    out = {**env, **(release.env() if release else runner_boot.env())}
    if settings.RUNNER_RELEASE_URL.is_set(rt.environ):  # a mirror
        out[runner_boot.ENV_RELEASE_URL] = settings.RUNNER_RELEASE_URL.value(rt.environ)
    return out


def _runner_release(
    inp: UpInputs, runner: runners.Request, now: float, result: Result
) -> runner_release.Release | None:
    """The actions/runner release a GitHub runner pod installs (GitLab brings its own)."""
    if runner.target.platform != "github":
        return None
    release = runner_release.resolve(
        inp.runner_version,
        inp.runner_sha256,
        runner.target.api_url,
        runner.target.token,
        now,
        result.warning,
    )
    result.report["runner_release"] = {"version": release.version, "source": release.source}
    return release


def _tag(owner: str, inp: UpInputs, rt: Runtime, now: float) -> PodTag:
    return new_tag(owner, run_url(rt.environ), now + inp.ttl)


def _remember(
    rt: Runtime,
    book: ledger.Ledger,
    pod: dict[str, Any],
    tag: PodTag,
    reservation: ledger.Reservation | None,
    at: float,
    runner: runners.Request | None = None,
) -> None:
    entry = {
        "podId": pod["id"],
        "owner": tag.owner,
        "gpu": pod.get("gpu", {}).get("id", ""),
        "costPerHr": pod.get("cost"),
        "expiresAt": utc_iso(tag.expires_at),
        "expiresEpoch": tag.expires_at,
        "runUrl": tag.run_url,
        "reservation": reservation.key if reservation else "",
        "runner": runner.name if runner else "",
    }
    record_event(
        rt, book, "created", pod["id"], at, **{k: v for k, v in entry.items() if k != "podId"}
    )
    try:
        journal.record("pod-up", entry, rt.environ)
    except OSError as exc:  # bookkeeping must never leave a pod without its teardown
        rt.log(f"warning: could not write the journal: {exc}")
