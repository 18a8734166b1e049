"""A job as the plan sees it: its status functions, its ``if:`` at plan time, the order of
jobs by ``needs``, the ``inputs`` of a called workflow or composite action, matrix legs, and
what a container or service asks of the runner. Used by :mod:`.planner`'s walk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuci.dryrun.contexts import PLAN_FUNCTIONS, evaluate_text, text_of
from gpuci.dryrun.expressions import EMBEDDED, ExpressionError, Unknown, condition
from gpuci.dryrun.workflow import triggers

__all__ = [
    "JobState",
    "cond_text",
    "docker_notes",
    "inputs_context",
    "needs_order",
    "nothing_failed",
    "plan_condition",
    "put_leg",
    "skipped_context",
    "workflow_call_inputs",
    "worst_outcome",
]


@dataclass
class JobState:
    """One job (or composite action) as it runs: its steps so far and whether one failed."""

    failed: bool | Unknown = False
    failure: str = ""  # which step, in words
    steps: dict[str, Any] = field(default_factory=dict)

    def status(self, name: str) -> bool | Unknown:
        if name == "always":
            return True
        if name == "cancelled":
            return False
        if isinstance(self.failed, Unknown):
            return self.failed
        return self.failed if name == "failure" else not self.failed


def nothing_failed(name: str) -> bool:
    return name in ("success", "always")


def cond_text(cond: Any) -> str:
    text = " ".join(text_of(cond).split())
    whole = EMBEDDED.fullmatch(text)
    return " ".join(whole.group(1).split()) if whole else text


def plan_condition(cond: Any, ctx: Mapping[str, Any], status: Any) -> bool | Unknown:
    """An ``if:`` at plan time; one this plan cannot parse is left to the run, not refused."""
    try:
        return condition(cond, ctx, status, PLAN_FUNCTIONS)
    except ExpressionError as exc:
        return Unknown(f"an expression this plan cannot evaluate ({exc})", path=False)


def skipped_context() -> dict[str, Any]:
    return {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}


def worst_outcome(outcomes: list[Any]) -> Any:
    """A job's outcome from its legs' (or steps'): failure over unknown over all-skipped."""
    if any(o == "failure" for o in outcomes):
        return "failure"
    unknown = next((o for o in outcomes if isinstance(o, Unknown)), None)
    if unknown is not None:
        return unknown
    if outcomes and all(o == "skipped" for o in outcomes):
        return "skipped"
    return "success"


def needs_order(jobs: Mapping[str, Any]) -> list[str]:
    """Job ids in an order where each comes after what it needs (file order otherwise)."""
    done: list[str] = []
    pending = list(jobs)
    while pending:
        for job_id in pending:
            job = jobs[job_id]
            needs = job.get("needs") if isinstance(job, dict) else None
            needs = [needs] if isinstance(needs, str) else list(needs or [])
            if all(str(n) in done or str(n) not in jobs for n in needs):
                done.append(job_id)
                pending.remove(job_id)
                break
        else:  # a cycle: GitHub refuses the workflow; plan the rest in file order
            done += pending
            break
    return done


def workflow_call_inputs(workflow: Mapping[str, Any]) -> dict[str, Any]:
    on = triggers(workflow)
    call = on.get("workflow_call") if isinstance(on, dict) else None
    inputs = call.get("inputs") if isinstance(call, dict) else None
    return inputs if isinstance(inputs, dict) else {}


def inputs_context(
    declared: Mapping[str, Any],
    with_: Mapping[str, Any],
    ctx: Mapping[str, Any],
    status: Any,
    what: str,
) -> dict[str, Any]:
    """``inputs`` of a composite action or called workflow: ``with:`` over the defaults."""
    inputs: dict[str, Any] = {}
    for name, spec in declared.items():
        default = spec.get("default") if isinstance(spec, dict) else None
        if default is not None:
            inputs[str(name)] = evaluate_text(text_of(default), ctx, status)
        else:
            inputs[str(name)] = ""
    for name, value in with_.items():
        inputs[str(name)] = evaluate_text(text_of(value), ctx, status)
    return inputs


def docker_notes(job: Mapping[str, Any], ctx: Mapping[str, Any]) -> list[str]:
    """``container:`` and ``services:``: named, for a runner without Docker cannot run them."""
    notes = []
    container = job.get("container")
    if container:
        image = container.get("image") if isinstance(container, dict) else container
        shown = evaluate_text(text_of(image), ctx, lambda s: True)
        name = shown.why if isinstance(shown, Unknown) else shown
        notes.append(f"runs in container {name}: needs Docker on the runner")
    services = job.get("services")
    if isinstance(services, dict):
        for service, spec in services.items():
            image = spec.get("image") if isinstance(spec, dict) else spec
            shown = evaluate_text(text_of(image), ctx, lambda s: True)
            name = shown.why if isinstance(shown, Unknown) else shown
            notes.append(f"service {service} runs container {name}: needs Docker on the runner")
    return notes


def put_leg(value: Any, leg: dict[str, Any]) -> Any:
    from gpuci.dryrun import _matrix as matrix

    if isinstance(value, str):
        return matrix.substitute(value, leg)
    if isinstance(value, list):
        return [put_leg(v, leg) for v in value]
    if isinstance(value, dict):
        return {k: put_leg(v, leg) for k, v in value.items()}
    return value
