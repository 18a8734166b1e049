"""``pods up|ls|stop|start|down|reap``: the pod lifecycle, one function per sub-command.

``up`` walks the candidates with backoff until one is placed, waits for RUNNING (and a health
URL), and terminates its own pod if anything after the create fails or the job is cancelled.
``down`` and ``reap`` treat a missing pod as success, so they are safe to run twice and in
``if: always()``. Every function takes a clock so the tests can simulate a day of CI.
"""

from __future__ import annotations

import copy
import math
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from gpuci import journal, notify, redact
from gpuci.errors import CheckFailed, GpuciError, InputError
from gpuci.markdown import Link
from gpuci.pods import (
    budgets,
    ledger,
    placement,
    plan,
    readiness,
    runner_boot,
    runner_cleanup,
    runner_online,
    runner_release,
    runners,
    ssh,
)
from gpuci.pods.client import API_KEY_ENV, InvalidTransition, NotFound, RunPodClient, api_url
from gpuci.pods.clock import SYSTEM, Clock, iso, parse_iso
from gpuci.pods.cost import usd
from gpuci.pods.naming import PodTag, new_tag, run_url, tag_of
from gpuci.probe import probes_allowed
from gpuci.runtime import Result, Runtime, markdown_table

PROXY_URL = "https://{pod_id}-{port}.proxy.runpod.net"
LIVE = ("PROVISIONING", "STARTING", "RUNNING")


def _client(rt: Runtime, clock: Clock) -> RunPodClient:
    """The API client; in a dry run it can only read (GET), whatever the code asks of it."""
    rt.mask(rt.environ.get(ssh.ENV_PRIVATE_KEY))  # present in the job: never printed
    return RunPodClient.from_env(rt.environ, rt.mask, clock, read_only=rt.dry_run)


def pod_url(pod: dict[str, Any], environ: Any) -> str:
    """The RunPod proxy URL of the first HTTP port, or empty."""
    template = environ.get("GPUCI_RUNPOD_PROXY_URL") or PROXY_URL
    for port in pod.get("ports") or []:
        number, _, proto = str(port).partition("/")
        if proto == "http":
            return template.format(pod_id=pod["id"], port=number)
    return ""


def _spec(
    values: dict[str, Any], rt: Runtime, runner: runners.Request | None = None
) -> plan.PodSpec:
    image = values.get("image") or (runners.DEFAULT_IMAGE if runner else "")
    if not image:
        raise InputError("input 'image' is required", hint="pass --image IMAGE or set INPUT_IMAGE")
    return plan.PodSpec(
        image=image,
        command=runner_boot.SCRIPT if runner else values.get("command") or "",
        env=plan.parse_env(values.get("env"), rt.mask),
        ports=plan.check_ports(values.get("ports")),
        disk_gb=int(values.get("disk-gb") or 50),
        gpu_count=int(values.get("gpu-count") or 1),
        cloud=values.get("cloud") or "SECURE",
        ssh_keys=ssh.public_keys(values.get("ssh-public-keys"), rt.environ),
        runner_env=_runner_env(runner.planned_env(), rt) if runner else {},
    )


def _runner_env(
    env: dict[str, str], rt: Runtime, release: runner_release.Release | None = None
) -> dict[str, str]:
    """A runner pod's env: the registration's, the runner release, a mirror if set."""
    out = {**env, **(release.env() if release else runner_boot.env())}
    mirror = rt.environ.get(runner_boot.ENV_RELEASE_URL, "").strip()
    if mirror:
        out[runner_boot.ENV_RELEASE_URL] = mirror
    return out


def _runner_release(
    values: dict[str, Any], runner: runners.Request, now: float, result: Result
) -> runner_release.Release | None:
    """The actions/runner release a GitHub runner pod installs (GitLab brings its own)."""
    if runner.target.platform != "github":
        return None
    release = runner_release.resolve(
        values, runner.target.api_url, runner.target.token, now, result.warning
    )
    result.report["runner_release"] = {"version": release.version, "source": release.source}
    return release


def _tag(owner: str, values: dict[str, Any], rt: Runtime, now: float) -> PodTag:
    return new_tag(owner, run_url(rt.environ), now + float(values["ttl"]))


def _ledger(values: dict[str, Any], rt: Runtime) -> ledger.Ledger:
    return ledger.Ledger.open(values.get("ledger"), rt.environ, rt.mask)


def _ledger_quietly(values: dict[str, Any], rt: Runtime) -> ledger.Ledger | None:
    """The ledger for bookkeeping around a teardown: a bad ledger URL warns, never keeps a
    pod alive (``up``, which needs it for the budget, opens it strictly)."""
    try:
        return _ledger(values, rt)
    except GpuciError as exc:
        rt.log(f"warning: pods ledger unusable, events not recorded: {exc.one_line()}")
        return None


def _note(rt: Runtime, book: ledger.Ledger | None, event: str, pod_id: str, at: float, **f: Any):
    """Record a pod event; bookkeeping never fails a teardown, it warns."""
    if book is None:
        return
    try:
        book.record(event, pod_id, at, **f)
    except (OSError, GpuciError) as exc:
        rt.log(f"warning: could not write the pods ledger {book.where}: {exc}")


def _ended(
    rt: Runtime, book: ledger.Ledger | None, event: str, pod_id: str, at: float, **fields: Any
) -> None:
    """The pod is gone: record it and release its budget reservation."""
    if book is None:
        return
    try:
        known = book.pod(pod_id)
        if known is not None:
            fields = {
                "owner": known.owner,
                "gpu": known.gpu,
                "costPerHr": known.cost_per_hr,
                "runUrl": known.run_url,
                **{k: v for k, v in fields.items() if v not in (None, "")},
            }
            if known.owner:  # who created it, as recorded then: a renamed pod blames no one
                fields["owner"] = known.owner
        book.record(event, pod_id, at, **fields)
        if known is not None and known.reservation:
            book.release(known.reservation)
    except (OSError, GpuciError) as exc:
        rt.log(f"warning: could not write the pods ledger {book.where}: {exc}")


# ----- up -----------------------------------------------------------------------------------
def up(values: dict[str, Any], rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Create one pod on the first candidate that places and is affordable; wait until ready."""
    if float(values["ttl"]) <= 0:
        raise InputError("ttl must be positive", hint="set ttl to e.g. 45m")
    now = clock.now()
    decision = budgets.decide(values, rt.environ)
    tag = _tag(decision.owner, values, rt, now)
    runner = runners.Request.from_values(values, rt.environ, rt.mask, tag, now, rt.dry_run)
    spec = _spec(values, rt, runner)
    first = plan.Candidate((values.get("gpu-types") or [""])[0])
    plan.check_env_count(plan.create_body(spec, tag, first, api_url(rt.environ)), spec.env)
    book = _ledger(values, rt)
    targets = notify.parse_targets(values.get("notify"), rt.mask)
    if not spec.command:
        warn = (
            "no command given: the self-stop timer is off for this pod (reap and down still "
            "end it); pass command to enable it"
        )
    else:
        warn = ""
    if rt.dry_run:
        return _plan_up(values, rt, spec, tag, warn, decision, book, runner)
    result = Result(command="pods up")
    if warn:
        result.warning(warn)
    for note in decision.notes:
        result.notice(note)
    reservation: ledger.Reservation | None = None
    with _client(rt, clock) as client:
        # SIGTERM (a cancelled job) becomes an exception from here on, before the create call:
        # a cancel landing between "pod created" and "pod known" must still end that pod.
        restore = _sigterm_raises()
        pod: dict[str, Any] | None = None
        try:
            catalog = client.list_gpu_types(spec.cloud)
            cands = plan.candidates(values["gpu-types"], values.get("data-centers") or (), catalog)
            try:
                affordable, refused, reservation = placement.affordable(
                    decision, values, rt, client, clock, spec, tag, catalog, cands, book
                )
            except CheckFailed as exc:
                _tell_refusal(targets, rt, tag, exc)
                raise
            result.report["budget_refused"] = refused
            if runner is not None:  # after the budget: a refused pod registers nothing
                registered = runner.register(rt.mask)
                release = _runner_release(values, runner, clock.now(), result)
                spec.runner_env = _runner_env(registered, rt, release)
                rt.log(f"registered {runner.target.platform} runner {runner.name}")
            pod, attempts = placement.place(values, rt, client, clock, spec, tag, affordable)
            result.report["attempts"] = attempts
            _remember(rt, book, pod, tag, reservation, clock.now(), runner)
            deadline = now + float(values["timeout"])
            pod = readiness.wait_running(client, clock, pod["id"], deadline, rt)
            if runner is not None and values.get("runner-wait-online", True):
                runner_online.wait_online(client, clock, pod["id"], runner, deadline, rt)
            url = pod_url(pod, rt.environ)
            if values.get("health-url"):
                readiness.wait_healthy(
                    readiness.health_url(values["health-url"], pod, url),
                    clock,
                    now + float(values["timeout"]),
                    rt,
                )
        except (SystemExit, KeyboardInterrupt):  # cancelled: maybe mid-create, find it by name
            made = pod or _find_quietly(client, tag.name(), rt)
            if made is not None:
                _terminate_quietly(client, made["id"], rt)
            if runner is not None:
                runner.unregister_quietly(rt.log)
            _release_quietly(rt, book, reservation, made, tag, clock)
            raise
        except BaseException:  # failure or timeout after placement
            if pod is not None:
                _terminate_quietly(client, pod["id"], rt)
            if runner is not None:
                runner.unregister_quietly(rt.log)
            _release_quietly(rt, book, reservation, pod, tag, clock)
            raise
        finally:
            restore()
    result.headline = (
        f"{pod['id']} RUNNING on {pod.get('gpu', {}).get('id', '?')} "
        f"at ${float(pod.get('cost') or 0):.2f}/h until {iso(tag.expires_at)}"
        + (f", {runner.target.platform} runner {runner.name}" if runner else "")
    )
    result.outputs = {
        "pod-id": pod["id"],
        "status": pod["status"],
        "cost-per-hr": float(pod.get("cost") or 0.0),
        "url": url,
        "gpu-type": pod.get("gpu", {}).get("id", ""),
        "data-center": pod.get("dataCenterId") or "",
        "expires-at": iso(tag.expires_at),
        "ssh-command": "",
        "runner-name": runner.name if runner else "",
    }
    if spec.ssh_keys:
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
                    iso(tag.expires_at),
                    Link(url) if url else "",
                ]
            ],
        )
    ]
    result.report["pod"] = {k: pod.get(k) for k in ("id", "name", "status", "cost", "gpu")}
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


def _plan_up(
    values: dict[str, Any],
    rt: Runtime,
    spec: plan.PodSpec,
    tag: PodTag,
    warn: str,
    decision: budgets.Decision,
    book: ledger.Ledger,
    runner: runners.Request | None = None,
) -> Result:
    """The dry run: candidates, exact bodies, TTL and the budget rule, without the API."""
    cands = plan.candidates(values["gpu-types"], values.get("data-centers") or ())
    api = api_url(rt.environ)
    bodies = [plan.shown_body(plan.create_body(spec, tag, c, api), spec.env) for c in cands]
    budget = decision.budget
    result = Result(command="pods up", headline=f"plan: {len(cands)} candidate(s), not sent")
    if warn:
        result.warning(warn)
    if not rt.environ.get(API_KEY_ENV):
        result.warning(f"{API_KEY_ENV} is not set; a real run would stop here")
    result.outputs = {
        "pod-id": "",
        "status": "PLANNED",
        "cost-per-hr": "",
        "url": "",
        "runner-name": runner.name if runner else "",
    }
    result.report = {
        "plan": {
            "owner": tag.owner,
            "run_url": tag.run_url,
            "ttl_s": float(values["ttl"]),
            "expires_at": iso(tag.expires_at),
            "gpu_order": [c.gpu_id for c in cands],
            "candidates": [{"gpu": c.gpu_id, "data_centers": list(c.data_centers)} for c in cands],
            "requests": [{"method": "POST", "path": "/v2/pods", "body": b} for b in bodies],
            "ledger": book.where,
            "identity": {"login": decision.identity.login, "source": decision.identity.source},
            "budget": {
                "budget_usd": budget,
                "period_s": decision.period_s,
                "rule": "refuse a candidate when billed spend + live pods' committed cost "
                "+ live reservations + catalog USD/h x (ttl + reap-interval) exceeds the "
                "budget (checked against the API and the ledger at run time)"
                if budget is not None
                else "no budget-usd: no check",
            },
            "self_stop": bool(spec.command),
        }
    }
    if runner is not None:
        for note in runner.notes:
            result.warning(note)
        result.report["plan"]["runner"] = {
            "platform": runner.target.platform,
            "name": runner.name,
            "labels": runner.labels,
            "scope": runner.target.scope,
            "idle_timeout_s": runner.idle_s,
            "image": spec.image,
            "request": runner.call(),
        }
    result.summary = [
        "### pods up plan (dry run)\n\n"
        + markdown_table(
            ["#", "GPU type", "data centres", "TTL ends"],
            [
                [i + 1, c.gpu_id, ", ".join(c.data_centers) or "any", iso(tag.expires_at)]
                for i, c in enumerate(cands)
            ],
        )
    ]
    return result


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
        "expiresAt": iso(tag.expires_at),
        "expiresEpoch": tag.expires_at,
        "runUrl": tag.run_url,
        "reservation": reservation.key if reservation else "",
        "runner": runner.name if runner else "",
    }
    _note(rt, book, "created", pod["id"], at, **{k: v for k, v in entry.items() if k != "podId"})
    try:
        journal.record("pod-up", entry, rt.environ)
    except OSError as exc:  # bookkeeping must never leave a pod without its teardown
        rt.log(f"warning: could not write the journal: {exc}")


def _release_quietly(
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
        _ended(
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


def _sigterm_raises() -> Callable[[], None]:
    """Turn SIGTERM (a cancelled CI job) into an exception, so ``up`` cleans up its pod."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _find_quietly(client: RunPodClient, name: str, rt: Runtime) -> dict[str, Any] | None:
    try:
        return client.find_by_name(name)
    except GpuciError as exc:
        rt.log(f"warning: could not look for pod {name} to clean it up: {exc.one_line()}")
        return None


def _terminate_quietly(client: RunPodClient, pod_id: str, rt: Runtime) -> None:
    try:
        client.delete_pod(pod_id)
        rt.log(f"terminated {pod_id} after the failure")
    except NotFound:
        pass
    except GpuciError as exc:
        rt.log(f"warning: could not terminate {pod_id}: {exc.one_line()} (reap will)")


# ----- ls -----------------------------------------------------------------------------------
def _ours(
    pods: Sequence[dict[str, Any]], owner: str = "", include_all: bool = False
) -> list[tuple[dict[str, Any], PodTag | None]]:
    out = []
    for pod in pods:
        tag = tag_of(pod)
        if tag is None and not include_all:
            continue
        if owner and (tag is None or tag.owner != owner):
            continue
        out.append((pod, tag))
    return out


def _fmt_expiry(tag: PodTag | None, now: float) -> str:
    if tag is None or math.isnan(tag.expires_at):
        return "-"
    left = tag.expires_at - now
    return f"{iso(tag.expires_at)} ({'in ' if left >= 0 else ''}{abs(left) / 60:.0f}m" + (
        ")" if left >= 0 else " ago)"
    )


def ls(values: dict[str, Any], rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """List gpu-ci pods (``all`` for every pod) with owner, GPU, cost and expiry.

    A dry run calls nothing: it says what would be listed. With ``--probe`` (and a key) it
    lists for real (one GET /v2/pods), as listing only reads.
    """
    if rt.dry_run and not (rt.environ.get(API_KEY_ENV) and probes_allowed(rt)):
        result = Result(
            command="pods ls",
            headline="would list the gpu-ci pods (one GET /v2/pods at run time; no network "
            f"used: --probe with {API_KEY_ENV} set lists them now)",
        )
        result.report["probe"] = False
        result.outputs = {"count": 0, "pod-ids": ""}
        return result
    with _client(rt, clock) as client:
        pods = client.list_pods()
    now = clock.now()
    rows = _ours(pods, values.get("owner") or "", bool(values.get("all")))
    result = Result(command="pods ls", headline=f"{len(rows)} pod(s)")
    result.summary = [
        "### RunPod pods\n\n"
        + markdown_table(
            ["pod", "status", "GPU", "USD/h", "owner", "expires", "run"],
            [
                [
                    p["id"],
                    p.get("status", "?"),
                    (p.get("gpu") or {}).get("id", "cpu"),
                    f"{float(p.get('cost') or 0):.2f}",
                    t.owner if t else "-",
                    _fmt_expiry(t, now),
                    t.run_url if t else "-",
                ]
                for p, t in rows
            ],
        )
    ]
    result.outputs = {"count": len(rows), "pod-ids": ",".join(p["id"] for p, _ in rows)}
    result.report = {
        "pods": [
            {
                "id": p["id"],
                "status": p.get("status"),
                "gpu": (p.get("gpu") or {}).get("id"),
                "cost_per_hr": p.get("cost"),
                "owner": t.owner if t else None,
                "run_url": t.run_url if t else None,
                "expires_at": iso(t.expires_at) if t and not math.isnan(t.expires_at) else None,
                "url": pod_url(p, rt.environ),
            }
            for p, t in rows
        ]
    }
    return result


# ----- stop / start -------------------------------------------------------------------------
def _each(ids: Sequence[str], fn: Callable[[str], str], command: str, rt: Runtime) -> Result:
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


def _offline_plan(command: str, plan: str) -> Result:
    """A dry run where the pod list can't be read (no key here, or no CI run): say so."""
    result = Result(command=command, headline=f"{plan} (the pod list is read at run time)")
    result.notice(f"{API_KEY_ENV} is not set or this is not a CI run: the plan names no pods")
    return result


def _need_ids(values: dict[str, Any], command: str) -> list[str]:
    ids = values.get("pod-id") or []
    if not ids:
        raise InputError(f"{command} needs pod-id", hint="pass --pod-id ID (comma-separated ok)")
    return list(ids)


def stop(values: dict[str, Any], rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Stop pods (keep the disk, stop GPU billing); already stopped counts as done."""
    ids = _need_ids(values, "pods stop")
    if rt.dry_run:
        return Result(command="pods stop", headline="would stop " + ", ".join(ids))
    book = _ledger_quietly(values, rt)
    with _client(rt, clock) as client:

        def one(pod_id: str) -> str:
            try:
                client.action(pod_id, "stop")
            except InvalidTransition:
                pod = client.get_pod(pod_id)
                if pod is not None and pod.get("status") == "EXITED":
                    return "already stopped"
                raise
            _note(rt, book, "stopped", pod_id, clock.now(), reason="stop")
            return "stopped"

        return _each(ids, one, "pods stop", rt)


def start(values: dict[str, Any], rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Start stopped pods; ``ttl`` moves the expiry (name and env) before starting."""
    ids = _need_ids(values, "pods start")
    ttl = values.get("ttl")
    if rt.dry_run:
        extra = f" with expiry now+{ttl:.0f}s" if ttl else ""
        return Result(command="pods start", headline="would start " + ", ".join(ids) + extra)
    book = _ledger_quietly(values, rt)
    with _client(rt, clock) as client:

        def one(pod_id: str) -> str:
            pod = client.get_pod(pod_id)
            if pod is None:
                raise NotFound(f"pod {pod_id} not found", hint="check the id with `pods ls`")
            tag = tag_of(pod)
            note = ""
            if ttl and tag is not None:
                new = tag.with_expiry(clock.now() + float(ttl))
                env = {**(pod.get("env") or {}), **new.env()}
                client.update_pod(pod_id, {"name": new.name(), "env": env})
                note = f", expires {iso(new.expires_at)}"
            elif tag is not None and tag.expires_at <= clock.now():
                raise InputError(
                    f"pod {pod_id} expired at {iso(tag.expires_at)}; its timer would stop it "
                    "at once",
                    hint="pass ttl to give it a new expiry",
                )
            if pod.get("status") in ("RUNNING", "STARTING", "PROVISIONING"):
                return "already running" + note
            client.action(pod_id, "start")
            _note(rt, book, "started", pod_id, clock.now(), reason="start")
            return "started" + note

        return _each(ids, one, "pods start", rt)


# ----- down / reap --------------------------------------------------------------------------
def _terminate(client: RunPodClient, pod_id: str) -> str:
    try:
        client.delete_pod(pod_id)
    except NotFound:
        return "already gone"
    return "terminated"


def down(values: dict[str, Any], rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Terminate pods by id, or every pod of this CI run; a missing pod is success."""
    ids = list(values.get("pod-id") or [])
    this_run = run_url(rt.environ)
    if rt.dry_run and not ids and (this_run == "local" or not rt.environ.get(API_KEY_ENV)):
        return _offline_plan("pods down", "would terminate every gpu-ci pod of this CI run")
    if not ids and this_run == "local":
        raise InputError(
            "down needs pod-id outside CI (no CI run URL to match)",
            hint="pass --pod-id ID, or run inside GitHub Actions / GitLab CI",
        )
    if rt.dry_run and ids:
        return Result(command="pods down", headline="would terminate " + ", ".join(ids))
    book = _ledger_quietly(values, rt)
    with _client(rt, clock) as client:
        # every pod, before anything ends: the runner sweep needs the pods that still exist
        listing = client.list_pods() if not ids or _runner_tokens(rt) else None
        if not ids:
            ids = [p["id"] for p, t in _ours(listing or []) if t and t.run_url == this_run]
            rt.log(f"pods of {this_run}: {', '.join(ids) or 'none'}")
        if rt.dry_run:
            return Result(command="pods down", headline="would terminate " + ", ".join(ids))
        if not ids:
            result = Result(
                command="pods down",
                headline="nothing to terminate",
                outputs={"pod-ids": "", "count": 0},
            )
        else:

            def one(pod_id: str) -> str:
                outcome = _terminate(client, pod_id)
                _ended(rt, book, "terminated", pod_id, clock.now(), reason="down")
                return outcome

            result = _each(ids, one, "pods down", rt)
        if listing is not None:
            gone = set(result.report.get("done") or {})
            ours = (
                _run_runners(rt, book, this_run, clock.now()) if not values.get("pod-id") else set()
            )
            _clean_runners(result, rt, values, listing, gone, clock, ours=ours)
        return result


RUN_LOOKBACK_S = 3 * 86400  # how far back down looks in the ledger for this run's runners


def _run_runners(rt: Runtime, book: ledger.Ledger | None, run: str, now: float) -> set[str]:
    """Runner names this CI run created pods for, from the ledger: a runner whose pod already
    ended itself (idle timeout) is deleted by the run's own ``down``, without the grace."""
    if book is None or run == "local":
        return set()
    try:
        records = book.events(since=now - RUN_LOOKBACK_S)
    except (OSError, GpuciError) as exc:
        rt.log(f"warning: could not read the pods ledger for this run's runners: {exc}")
        return set()
    return {
        str(e["runner"])
        for e in records
        if e.get("event") == "created" and e.get("runUrl") == run and e.get("runner")
    }


def _runner_tokens(rt: Runtime) -> bool:
    """Whether this job can list runners (so down/reap sweep them)."""
    return any(
        rt.environ.get(name, "").strip()
        for name in (runners.GITHUB_TOKEN_ENV, runners.GITLAB_TOKEN_ENV)
    )


def _clean_runners(
    result: Result,
    rt: Runtime,
    values: dict[str, Any],
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
            values.get("runner-scope") or "repo",
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


def _age_s(pod: dict[str, Any], now: float) -> float | None:
    try:
        return now - parse_iso(str(pod.get("createdAt") or ""))
    except ValueError:
        return None


def _forgotten(
    pod: dict[str, Any], tag: PodTag, now: float, billed: dict[str, float] | None
) -> dict[str, Any]:
    """Who forgot this pod and what forgetting it cost: for the summary, JSON and ledger."""
    rate = float(pod.get("cost") or 0.0)
    past_h = max(0.0, now - tag.expires_at) / 3600
    return {
        "pod": pod["id"],
        "owner": tag.owner,
        "gpu": (pod.get("gpu") or {}).get("id", "cpu"),
        "status": pod.get("status", "?"),
        "usd_per_hr": rate,
        "hours_past_ttl": round(past_h, 3),
        "past_ttl_usd": round(rate * past_h, 4) if pod.get("status") in LIVE else 0.0,
        "spent_usd": None if billed is None else round(billed.get(pod["id"], 0.0), 4),
        "run_url": tag.run_url,
    }


def _billed_quietly(client: RunPodClient, now: float, rt: Runtime) -> dict[str, float] | None:
    try:
        records = client.pod_billing(iso(now - 30 * 86400), iso(now))
    except GpuciError as exc:
        rt.log(f"warning: no billing for the reap report: {exc.one_line()}")
        return None
    out: dict[str, float] = {}
    for rec in records:
        out[rec["podId"]] = out.get(rec["podId"], 0.0) + float(rec.get("totalAmount") or 0.0)
    return out


def reap(values: dict[str, Any], rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """Terminate every gpu-ci pod past its expiry (plus ``grace``), naming who forgot it;
    with ``untagged-older-than``, stop (never terminate) hand-made pods older than that."""
    grace = float(values.get("grace") or 0)
    owner = values.get("owner") or ""
    untagged_s = values.get("untagged-older-than")
    targets = notify.parse_targets(values.get("notify"), rt.mask)
    if rt.dry_run and not rt.environ.get(API_KEY_ENV):
        return _offline_plan("pods reap", "would terminate every gpu-ci pod past its expiry")
    book = _ledger_quietly(values, rt)
    with _client(rt, clock) as client:
        now = clock.now()
        every = client.list_pods()
        pods = _ours(every, owner)
        expired = [
            (p, t)
            for p, t in pods
            if t and not math.isnan(t.expires_at) and t.expires_at + grace <= now
        ]
        unknown = [p["id"] for p, t in pods if t and math.isnan(t.expires_at)]
        hand_made = []
        if untagged_s is not None and not owner:
            for p in every:
                age = _age_s(p, now)
                if tag_of(p) is None and p.get("status") in LIVE and age and age >= untagged_s:
                    hand_made.append((p, age))
        if rt.dry_run:
            return Result(
                command="pods reap",
                headline=f"would terminate {len(expired)} expired pod(s)"
                + (f" and stop {len(hand_made)} hand-made pod(s)" if hand_made else ""),
                outputs={
                    "pod-ids": ",".join(p["id"] for p, _ in expired),
                    "count": len(expired),
                },
            )
        billed = _billed_quietly(client, now, rt) if expired else {}
        rows = {p["id"]: _forgotten(p, t, now, billed) for p, t in expired}
        if not expired:
            result = Result(command="pods reap", headline=f"no expired pods of {len(pods)}")
            result.outputs = {"pod-ids": "", "count": 0}
        else:

            def one(pod_id: str) -> str:
                outcome = _terminate(client, pod_id)
                row = rows[pod_id]
                _ended(
                    rt,
                    book,
                    "reaped",
                    pod_id,
                    clock.now(),
                    owner=row["owner"],
                    gpu=row["gpu"],
                    costPerHr=row["usd_per_hr"],
                    runUrl=row["run_url"],
                    hoursPastTtl=row["hours_past_ttl"],
                    pastTtlUsd=row["past_ttl_usd"],
                    spentUsd=row["spent_usd"],
                )
                return outcome

            result = _each(list(rows), one, "pods reap", rt)
            done = [rows[k] for k in result.report.get("done", {})]
            result.report["reaped"] = done
            result.summary = ["### Reaped pods (past their TTL)\n\n" + _reaped_table(done)]
        stopped = _stop_hand_made(client, book, hand_made, rt, clock)
        gone = {r["pod"] for r in result.report.get("reaped") or []}

        def end_runnerless(pod_id: str) -> str:
            outcome = _terminate(client, pod_id)
            _ended(rt, book, "terminated", pod_id, clock.now(), reason="runner gone")
            return outcome

        _clean_runners(result, rt, values, every, gone, clock, end_runnerless)
    if stopped:
        result.report["hand_made_stopped"] = stopped
        result.summary.append(
            "### Hand-made pods stopped (untagged, older than "
            f"{float(untagged_s or 0) / 3600:g}h)\n\n"
            + markdown_table(
                ["pod", "name", "GPU", "age h"],
                [[s["pod"], s["name"], s["gpu"], s["age_h"]] for s in stopped],
            )
        )
        result.warning(
            "stopped hand-made pod(s) older than the limit: "
            + ", ".join(f"{s['pod']} ({s['name']})" for s in stopped)
        )
    for pod_id in unknown:
        result.warning(f"pod {pod_id} has a gpu-ci tag without a readable expiry; left alone")
    reaped = result.report.get("reaped") or []
    if reaped or stopped:
        notify.deliver(targets, rt, result, *_reap_message(reaped, stopped))
    return result


def _reap_message(
    reaped: Sequence[dict[str, Any]], stopped: Sequence[dict[str, Any]]
) -> tuple[str, str]:
    lines = [
        f"- {r['pod']}: {r['owner']}, {r['gpu']}, {r['hours_past_ttl']:.2f} h past TTL, "
        f"${usd(r['past_ttl_usd'])} past TTL, run {r['run_url']}"
        for r in reaped
    ] + [f"- {s['pod']} ({s['name']}): hand-made, {s['age_h']} h old, stopped" for s in stopped]
    subject = f"gpu-ci: reaped {len(reaped)} forgotten pod(s)" + (
        f", stopped {len(stopped)} hand-made" if stopped else ""
    )
    return subject, "\n".join(lines)


def _reaped_table(rows: Sequence[dict[str, Any]]) -> str:
    return markdown_table(
        ["pod", "owner", "GPU", "hours past TTL", "USD/h", "cost past TTL", "spent USD", "run"],
        [
            [
                r["pod"],
                r["owner"],
                r["gpu"],
                f"{r['hours_past_ttl']:.2f}",
                usd(r["usd_per_hr"]),
                usd(r["past_ttl_usd"]),
                "?" if r["spent_usd"] is None else usd(r["spent_usd"]),
                r["run_url"],
            ]
            for r in rows
        ],
    )


def _stop_hand_made(
    client: RunPodClient,
    book: ledger.Ledger | None,
    pods: Sequence[tuple[dict[str, Any], float]],
    rt: Runtime,
    clock: Clock,
) -> list[dict[str, Any]]:
    """Stop (never terminate: their disks may hold someone's work) old untagged pods."""
    stopped = []
    for pod, age in pods:
        try:
            client.action(pod["id"], "stop")
        except (InvalidTransition, NotFound):
            continue
        except GpuciError as exc:
            rt.log(f"warning: could not stop hand-made pod {pod['id']}: {exc.one_line()}")
            continue
        row = {
            "pod": pod["id"],
            "name": redact.clip(redact.single_line(str(pod.get("name") or "")), 80),
            "gpu": (pod.get("gpu") or {}).get("id", "cpu"),
            "age_h": round(age / 3600, 1),
        }
        stopped.append(row)
        _note(rt, book, "stopped", pod["id"], clock.now(), reason="untagged-older-than", **row)
    return stopped
