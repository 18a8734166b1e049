"""``down`` and ``reap``'s runner half: no registration without its pod, no pod without its runner.

A runner pod normally ends itself (one job, or the idle timeout) and its runner with it; this
is the backstop for everything else: a pod terminated from outside (``down``, the reaper, the
console) leaves a registered runner that would wait for a pod forever, and a runner deleted or
finished while its pod's self-terminate failed leaves a pod that bills for nothing.

Only gpu-ci runners (``gpuci-<nonce>-<epoch>``) and gpu-ci runner pods (``GPUCI_RUNNER_*`` in
their env) are judged, and only in the scope the admin token in this job can list; without
``GPUCI_RUNNER_TOKEN`` / ``GPUCI_GITLAB_TOKEN`` runners are not checked (said, once).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.errors import GpuciError
from gpuci.pods._runners import registry as runners
from gpuci.pods._runners.api import RunnerBusy
from gpuci.runtime import Runtime, markdown_table


@dataclass
class Cleanup:
    deleted: list[dict[str, Any]] = field(default_factory=list)  # runners deleted, and why
    terminated: list[dict[str, Any]] = field(default_factory=list)  # pods whose runner is gone
    warnings: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {"runners_deleted": self.deleted, "runner_pods_terminated": self.terminated}

    def summary(self) -> str:
        rows = [[d["runner"], d["platform"], d["why"]] for d in self.deleted] + [
            [t["runner"], t["platform"], f"pod {t['pod']} terminated: {t['why']}"]
            for t in self.terminated
        ]
        if not rows:
            return ""
        return "### CI runners cleaned up\n\n" + markdown_table(["runner", "on", "what"], rows)


def clean(
    rt: Runtime,
    scope: str,
    alive: Sequence[Mapping[str, Any]],
    ended: Sequence[Mapping[str, Any]],
    now: float,
    terminate: Callable[[str], str] | None = None,
    ours: Collection[str] = (),
) -> Cleanup:
    """Delete the runners of the ``ended`` pods, then sweep: runners whose pod is not among
    ``alive`` (every pod that still exists, listed before the runners), and, with
    ``terminate``, the ``alive`` runner pods whose runner is gone. ``ours``: runner names
    this CI run created pods for (``down``), swept without the grace."""
    out = Cleanup()
    targets, why_not = runners.targets_for_cleanup(rt.environ, rt.mask, scope)
    has_runner_pods = any(runners.scope_of(p) for p in (*alive, *ended))
    if not targets:
        if has_runner_pods:
            out.warnings.append(
                "runner pods found, but their runner registrations were not checked ("
                + "; ".join(why_not)
                + ")"
            )
        return out
    for tgt in targets:
        try:
            _clean_one(tgt, alive, ended, now, terminate, out, rt, ours)
        except GpuciError as exc:
            out.warnings.append(f"{tgt.platform} runners not cleaned: {exc.one_line()}")
    return out


def _clean_one(
    tgt: runners.Target,
    alive: Sequence[Mapping[str, Any]],
    ended: Sequence[Mapping[str, Any]],
    now: float,
    terminate: Callable[[str], str] | None,
    out: Cleanup,
    rt: Runtime,
    ours: Collection[str],
) -> None:
    with tgt.client() as client:
        listed = client.listed()
        # A pod's env names its runner; delete only a listed runner with that id AND that name,
        # so an env edited to name someone else's runner deletes nothing.
        by_id = {r.runner_id: r for r in listed}
        for pod in ended:
            found = runners.scope_of(pod)
            if not found or found[:2] != (tgt.platform, tgt.scope) or found[3] is None:
                continue
            named = by_id.get(found[3])
            if named is None or named.name != found[2]:
                continue
            if _delete(client, found[3], found[2], out):
                _said(out.deleted, rt, tgt, found[2], found[3], f"pod {pod['id']} ended")
            listed = [r for r in listed if r.runner_id != found[3]]
        swept = runners.sweep(tgt, alive, listed, now, ours)
        for runner in swept.orphan_runners:
            if _delete(client, runner.runner_id, runner.name, out):
                _said(out.deleted, rt, tgt, runner.name, runner.runner_id, "its pod is gone")
    if terminate is None:
        return
    pods_by_id = {str(p["id"]): p for p in alive}
    for pod_id in swept.runnerless_pods:
        name = (runners.scope_of(pods_by_id[pod_id]) or ("", "", "?", None))[2]
        outcome = terminate(pod_id)
        out.terminated.append(
            {"pod": pod_id, "runner": name, "platform": tgt.platform, "why": "runner gone"}
        )
        rt.log(f"{pod_id}: {outcome} (its {tgt.platform} runner {name} is gone)")


def _delete(client: Any, runner_id: int, name: str, out: Cleanup) -> bool:
    """Delete one runner; a runner in the middle of a job is left, with a warning, and the
    sweep goes on (GitHub answers 422 until the job is over)."""
    try:
        return bool(client.delete(runner_id))
    except RunnerBusy:
        out.warnings.append(f"runner {name} is running a job: left registered (reap retries)")
        return False


def _said(
    rows: list[dict[str, Any]],
    rt: Runtime,
    tgt: runners.Target,
    name: str,
    runner_id: int,
    why: str,
) -> None:
    rows.append({"runner": name, "id": runner_id, "platform": tgt.platform, "why": why})
    rt.log(f"deleted {tgt.platform} runner {name} ({why})")
