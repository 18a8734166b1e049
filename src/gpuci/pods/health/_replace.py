"""``up``'s side of smoke before handover: read a pod's verdict, and after a hardware failure end
that pod, record it, and say where the next attempt may go.

The pod writes its verdict into its name and stops itself on a hardware failure
(:mod:`gpuci.pods.health._handover` says why that channel). Here: waiting for the verdict of a pod
without a runner (a runner pod's verdict comes while ``up`` waits for the runner), telling a
failed handover from any other failure (only the pod's own mark counts: an environment error
or a skipped check is never re-placed), terminating the pod, writing the verdict into the GPU
health record when the pod could not, and the attempt with its cost for the report. Each new
attempt leaves out the failed data centres (RunPod names no machine; the data centre is the
finest unit placement can avoid) and stays inside the budget reservation ``up`` already holds:
the pods of all attempts share one expiry, so their costs add up to at most what was reserved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci import settings
from gpuci.errors import CheckFailed, ExitCode, GpuciError, InfraError
from gpuci.gpu import _health_record as gpu_health
from gpuci.pods._lifecycle.readiness import poll_s
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.client import RunPodClient
from gpuci.pods._runpod.clock import Clock
from gpuci.pods.health._handover import Verdict, verdict_of
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import utc_iso

_LABEL = re.compile(r"^gpu(\d+):(.+)$")
#: A gated pod that stopped itself before handover with no verdict in its name: the gate's
#: fallback when the pod's key may not rename it (gpuci.pods.health._handover), GPUs unknown.
UNNAMED = Verdict("failed", detail="the pod stopped itself before handover, no verdict in its name")


class SmokeFailed(CheckFailed):
    """A pod reported a hardware verdict before handover."""

    def __init__(self, pod_id: str, verdict: Verdict) -> None:
        super().__init__(
            f"pod {pod_id}: gpu-smoke before handover: {verdict.text()}",
            hint="the pod stopped itself; up terminates it and places another",
        )
        self.verdict = verdict


@dataclass
class Attempt:
    """One pod of this ``up``: where it ran, what it cost so far, and its smoke verdict."""

    pod: str
    gpu: str
    data_center: str
    usd_per_hr: float
    created: float
    ended: float | None = None
    verdict: str = ""

    def seconds(self, now: float) -> float:
        return max(0.0, (self.ended if self.ended is not None else now) - self.created)

    def cost(self, now: float) -> float:
        """USD billed so far (estimated from the rate: billing reports it hours later)."""
        return self.usd_per_hr * self.seconds(now) / 3600


@dataclass
class Attempts:
    """Every pod ``up`` placed, and the data centres a hardware verdict ruled out."""

    items: list[Attempt] = field(default_factory=list)
    failed_dcs: dict[str, str] = field(default_factory=dict)

    def add(self, pod: Mapping[str, Any], now: float) -> None:
        self.items.append(
            Attempt(
                str(pod["id"]),
                str((pod.get("gpu") or {}).get("id") or ""),
                str(pod.get("dataCenterId") or ""),
                float(pod.get("cost") or 0.0),
                now,
            )
        )

    def report(self, now: float, expires: float, reserved_usd: float | None) -> dict[str, Any]:
        """The JSON report: each attempt with its cost, and the total against the reservation."""
        rows = []
        total = 0.0
        for a in self.items:
            if a.ended is None:  # the pod handed over: the most it may bill, to its expiry
                usd = a.usd_per_hr * max(0.0, expires - a.created) / 3600
            else:
                usd = a.cost(now)
            total += usd
            rows.append(
                {
                    "pod": a.pod,
                    "gpu": a.gpu,
                    "data_center": a.data_center,
                    "usd_per_hr": a.usd_per_hr,
                    "seconds": round(a.seconds(now), 1),
                    "cost_usd": round(usd, 4),
                    "estimated": True,
                    "verdict": a.verdict or ("handed over" if a.ended is None else ""),
                }
            )
        out: dict[str, Any] = {"attempts": rows, "total_usd": round(total, 4)}
        if reserved_usd is not None:
            out["reserved_usd"] = round(reserved_usd, 4)
        return out

    def summary(self, report: Mapping[str, Any]) -> str:
        rows = [
            [
                i + 1,
                r["pod"],
                r["gpu"],
                r["data_center"],
                r["verdict"],
                f"{r['usd_per_hr']:.2f}",
                f"{r['seconds'] / 60:.1f}",
                f"{r['cost_usd']:.4f}",
            ]
            for i, r in enumerate(report["attempts"])
        ]
        total = f"total ${report['total_usd']:.4f} (estimated; the handed-over pod to its expiry)"
        if "reserved_usd" in report:
            total += f" of ${report['reserved_usd']:.4f} reserved"
        return (
            "#### gpu-smoke before handover\n\n"
            + markdown_table(
                ["#", "pod", "GPU", "data centre", "verdict", "USD/h", "minutes", "USD"], rows
            )
            + f"\n\n{total}\n"
        )


def wait_verdict(
    client: RunPodClient, clock: Clock, pod_id: str, deadline: float, rt: Runtime
) -> Verdict:
    """A pod without a runner: until its start script has written its smoke verdict."""
    while True:
        pod = client.get_pod(pod_id, deadline)
        verdict = verdict_of(pod)
        if verdict is not None and verdict.kind == "failed":
            raise SmokeFailed(pod_id, verdict)
        if verdict is not None:
            return verdict
        status = (pod or {}).get("status", "TERMINATED")
        if status == "EXITED":  # stopped itself before its verdict: the gate's fallback
            raise SmokeFailed(pod_id, UNNAMED)
        if status in ("ERROR", "TERMINATED"):
            raise InfraError(
                f"pod {pod_id} became {status} before its gpu-smoke verdict",
                hint="check the pod's logs (RunPod console); the pod was terminated",
            )
        if clock.now() >= deadline:
            raise InfraError(
                f"pod {pod_id} wrote no gpu-smoke verdict by the timeout",
                hint="the image needs curl or python3 to report it (docs/pods.md: smoke before "
                "handover); if the pod's log says RunPod refused its key renaming it, its pass "
                "cannot reach up without a runner: pass smoke false, or use a runner pod",
            )
        clock.sleep(poll_s(rt))


def failed_verdict(
    client: RunPodClient, pod_id: str, exc: BaseException, rt: Runtime
) -> Verdict | None:
    """The hardware verdict behind a failed wait, or None: anything else is not re-placed."""
    if isinstance(exc, SmokeFailed):
        return exc.verdict
    if not isinstance(exc, GpuciError):
        return None
    try:
        pod = client.get_pod(pod_id)
    except GpuciError as err:
        rt.log(f"warning: could not read pod {pod_id} after the failure: {err.one_line()}")
        return None
    verdict = verdict_of(pod)
    if verdict is None and (pod or {}).get("status") == "EXITED":
        return UNNAMED  # stopped itself before handover, its rename refused or lost
    return verdict if verdict is not None and verdict.kind == "failed" else None


def end_failed(
    client: RunPodClient,
    attempts: Attempts,
    verdict: Verdict,
    now: float,
    rt: Runtime,
    result: Result,
) -> Attempt:
    """Terminate the pod that failed its smoke and note why; its data centre is ruled out."""
    attempt = attempts.items[-1]
    attempt.ended, attempt.verdict = now, f"hardware: {verdict.text()}"
    try:
        if client.delete_pod(attempt.pod).ours:
            rt.log(f"terminated {attempt.pod} after its gpu-smoke hardware failure")
    except GpuciError as exc:
        result.warning(f"could not terminate {attempt.pod}: {exc.one_line()} (reap will)")
    if attempt.data_center:
        attempts.failed_dcs[attempt.data_center] = f"GPU {verdict.text()} at {utc_iso(now)}"
    return attempt


def record_verdict(
    store: str,
    rt: Runtime,
    attempt: Attempt,
    verdict: Verdict,
    runner_name: str,
    result: Result,
) -> None:
    """Write the pod's verdict into the GPU health record, unless the pod already did."""
    if verdict.recorded:
        return
    gpus: dict[int, dict[str, Any]] = {}
    checks = []
    for label in verdict.checks:
        m = _LABEL.match(label)
        index = int(m.group(1)) if m else None
        name = m.group(2) if m else label
        checks.append(
            {"name": name, "gpu": index, "status": "fail", "reason": "gpu-smoke on the pod"}
        )
    for i, uuid in enumerate(verdict.uuids):
        gpus[i] = {"index": i, "uuid": uuid, "name": attempt.gpu}
    if not gpus:
        gpus[0] = {"index": 0, "uuid": "", "name": attempt.gpu}
    shown = Result(command="gpu-smoke", exit_code=ExitCode.CHECK_FAILED)
    shown.report = {"checks": checks, "gpus": list(gpus.values())}
    environ = {
        **rt.environ,
        settings.RUNPOD_DC_ID.name: attempt.data_center,
        settings.RUNPOD_POD_ID.name: attempt.pod,
        settings.NODE_NAME.name: f"runpod:{attempt.data_center or '?'}/{attempt.pod}",
        settings.RUNNER_NAME.name: runner_name,
    }
    # the store was opened (and its credentials masked) by placement's health check already
    here = Runtime(environ, json_mode=True, stdout=rt.stdout, stderr=rt.stderr)
    gpu_health.record(shown, store, here)
    for annotation in shown.annotations:
        result.warning(annotation.message)


def next_candidates(
    cands: Sequence[plan.Candidate], failed_dcs: Mapping[str, str], result: Result
) -> list[plan.Candidate]:
    """The candidates without the data centres whose GPU failed; the scheduler's are kept."""
    out = []
    for cand in cands:
        if not cand.data_centers:
            out.append(cand)
            if failed_dcs:
                result.warning(
                    f"{cand.label()}: the scheduler chooses the data centre, so the next "
                    f"attempt may land in {', '.join(sorted(failed_dcs))} again; pass "
                    "data-centers"
                )
            continue
        kept = tuple(dc for dc in cand.data_centers if dc not in failed_dcs)
        if kept:
            out.append(plan.Candidate(cand.gpu_id, kept))
    return out


def out_of_attempts(attempts: Attempts, limit: int) -> CheckFailed:
    """The end: every attempt failed its smoke, or no data centre is left to try."""
    failed = [a for a in attempts.items if a.verdict]
    why = "; ".join(f"{a.pod} in {a.data_center or '?'}: {a.verdict}" for a in failed)
    if len(attempts.items) >= limit:
        return CheckFailed(
            f"gpu-smoke found a hardware failure on all {len(failed)} pod(s) up placed "
            f"(smoke-attempts {limit}): {why}",
            hint="raise smoke-attempts, add data-centers or GPU types; the failed data centres "
            "are in the GPU health record",
        )
    return CheckFailed(
        f"gpu-smoke found a hardware failure and no other data centre is left to try: {why}",
        hint="add data-centers or GPU types; the failed data centres are in the GPU health record",
    )
