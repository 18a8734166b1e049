"""A step's plan (:class:`StepPlan`: what the planner decides, what the report prints): its
``with:`` as far as the plan can evaluate it, its verdict from its calls, and the
listed-not-judged forms (skipped, conditional). Used by :mod:`._planner`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuci import settings
from gpuci.dryrun._calls import RUNPOD_KEY, network_needed, plan_command, verdict
from gpuci.dryrun._contexts import evaluate_text
from gpuci.dryrun._expressions import EMBEDDED, Partial, Unknown
from gpuci.dryrun._jobs import JobState
from gpuci.dryrun._values import text_of
from gpuci.dryrun._workflow import Call
from gpuci.runtime import Result, Runtime, format_output

# The environment gpu-ci's commands read (their settings, AWS/HF/RunPod credentials, the GPU
# and proxy conventions): an unknown value of one of these may change a plan; of others, not.
READ_ENV = re.compile(
    r"^(?:GPUCI_|AWS_|HF_|HUGGING_FACE|RUNPOD_|CUDA_|NVIDIA_|GITHUB_TOKEN$|HTTPS?_PROXY$|NO_PROXY$"
    r"|SSL_CERT|REQUESTS_CA_BUNDLE$)",
    re.IGNORECASE,
)

__all__ = [
    "JUDGED",
    "StepPlan",
    "checked_out",
    "given_inputs",
    "judge",
    "mark_conditional",
    "plan_calls",
    "record_step",
    "skipped_plan",
    "step_name",
    "titled",
    "worst_verdict",
]

JUDGED = ("ok", "may-fail", "would-fail", "bad-input", "not-implemented", "not-evaluated")


@dataclass
class StepPlan:
    job: str
    index: int | str
    name: str
    uses: str = ""
    command: str = ""
    # ok | may-fail | would-fail | bad-input | not-implemented | not-evaluated (judged)
    # skipped | conditional (judged when ``planned`` is) | run | other-action | not-inspected
    verdict: str = ""
    detail: str = ""
    condition: str = ""  # the step's if:, as written
    planned: str = ""  # for a skipped or conditional step that was judged: its verdict if run
    reason: str = ""  # for a skipped or conditional step: why, in a few words
    unresolved: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)  # unresolved name -> what it waits for
    present: set[str] = field(default_factory=set)  # unresolved, but a secret known to exist
    results: list[Result] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a path that may be missing
    notes: list[str] = field(default_factory=list)  # e.g. runs in a container
    children: list[StepPlan] = field(default_factory=list)  # a local composite's steps

    @property
    def judged(self) -> str:
        """The verdict of the step's own plan ('' when it has none)."""
        if self.verdict in JUDGED:
            return self.verdict
        return self.planned if self.planned in JUDGED else ""


def checked_out(earlier: list[Any]) -> bool:
    """Whether a step before this one may put the repository in the workspace: a checkout, or
    any ``run:`` step (a clone or a copy), as the text cannot tell."""
    for step in earlier:
        if isinstance(step, dict):
            uses = text_of(step.get("uses")).strip().lower()
            if uses.startswith("actions/checkout@") or step.get("run"):
                return True
    return False


def step_name(step: dict[str, Any]) -> str:
    uses = text_of(step.get("uses"))
    run = text_of(step.get("run")).strip().splitlines()
    return text_of(step.get("name")) or uses or (run[0] if run else "")


def titled(step: dict[str, Any], ctx: Mapping[str, Any]) -> dict[str, Any]:
    """The step with its ``name:`` as the runner shows it (``${{ inputs.v }}`` put in); as
    written when it needs a value only the run knows."""
    name = step.get("name")
    if not isinstance(name, str) or not EMBEDDED.search(name):
        return step
    shown = evaluate_text(name, ctx, lambda s: True)
    return step if isinstance(shown, Unknown) else {**step, "name": shown}


def given_inputs(
    plan: StepPlan, with_: dict[Any, Any], ctx: dict[str, Any], env: Mapping[str, str | Unknown]
) -> dict[str, str]:
    """The step's ``with:`` evaluated here; what only the run knows is noted as unresolved
    (with why) and kept as its expression, never guessed."""
    given: dict[str, str] = {}
    for key, value in with_.items():
        text = text_of(value)
        got = evaluate_text(text, ctx, lambda s: True)
        if isinstance(got, Unknown):
            plan.unresolved.append(str(key))
            plan.why[str(key)] = got.why
            if got.truth is True and got.why.startswith("secrets."):
                plan.present.add(str(key))  # named by --secret: it exists, its value unread
                plan.why[str(key)] = f"{got.why}, which exists; its value is never read"
            given[str(key)] = text if EMBEDDED.search(text) else "${{ }}"
        else:
            given[str(key)] = got
    plan.unresolved.sort()
    plan.unresolved += sorted(
        f"env {k}"
        for k, v in env.items()
        if isinstance(v, Unknown) and not os.environ.get(k) and (k == "*" or READ_ENV.match(k))
    )
    return given


def judge(plan: StepPlan, missing: list[Any]) -> None:
    """The step's verdict from its calls' plans; a path no earlier step makes may fail it."""
    plan.verdict = verdict(plan.results)
    plan.detail = "; ".join(f"{r.command}: {r.headline or 'ok'}" for r in plan.results)
    plan.warnings = [f"path '{m.path}' may be missing: {m.reason}" for m in missing]
    if plan.warnings:
        if plan.verdict == "ok":
            plan.verdict = "may-fail"
        plan.detail = "; ".join([plan.detail, *plan.warnings])


def skipped_plan(
    job: str, index: int | str, step: dict[str, Any], why: str, shown: str
) -> StepPlan:
    """A step that does not run (its job is skipped, or its if: is false): listed, not judged
    (the planner adds the warnings on the file, which hold whether it runs or not)."""
    plan = StepPlan(job=job, index=index, name=step_name(step), condition=shown)
    plan.uses, plan.verdict, plan.detail = str(step.get("uses") or ""), "skipped", why
    return plan


def mark_conditional(plan: StepPlan, held: Any, shown: str) -> None:
    """A step whose if: (or its job's) is known only at run time: judged, but conditional;
    ``reason`` says once what it waits for (a job's if: is said once, on the job's line)."""
    plan.planned, plan.verdict = plan.verdict, "conditional"
    if isinstance(held, Unknown):
        plan.reason = f"if: {shown}; {held.why} is known at run time"
    else:
        plan.reason = "the job's if:"
    plan.detail = f"conditional: {plan.reason}; if it runs: {plan.planned}: {plan.detail}"


def plan_calls(
    plan: StepPlan,
    calls: list[Call],
    env: Mapping[str, str | Unknown],
    probe: bool,
    rt: Runtime,
    runner: Mapping[str, Any] | None = None,
) -> None:
    """Each call's dry run, in an environment like the step's (no INPUT_*, this probe
    setting, the runner's ``RUNNER_ENVIRONMENT`` where its labels tell); a call that would
    need the network without --probe is not evaluated."""
    inner_env = {k: v for k, v in os.environ.items() if not k.startswith("INPUT_")}
    inner_env.update({k: v for k, v in env.items() if isinstance(v, str) and k != "*"})
    where = (runner or {}).get("environment")
    if isinstance(where, str):
        inner_env[settings.RUNNER_ENVIRONMENT.name] = where
    inner_env[settings.PROBE.name] = "true" if probe else "false"
    for full_name, cmd, values in calls:
        offline = None if probe else network_needed(full_name, values, inner_env)
        if offline:
            result = Result(command=full_name, headline=f"plan not evaluated: {offline}")
            result.report["not_evaluated"] = offline
            plan.results.append(result)
            continue
        if not probe and full_name.startswith("pods ") and inner_env.get(RUNPOD_KEY):
            # without the key the pods commands plan without asking RunPod anything
            inner_env = {k: v for k, v in inner_env.items() if k != RUNPOD_KEY}
            plan.notes.append("RunPod not asked (no network): --probe lets it list pods")
        plan.results.append(
            plan_command(full_name, cmd, values, plan.why, inner_env, rt, plan.present)
        )


def worst_verdict(verdicts: Iterable[str]) -> str:
    """A composite action's verdict from its steps': the worst judged one, else not judged."""
    seen = set(verdicts)
    order = ("bad-input", "would-fail", "not-evaluated", "may-fail", "not-implemented", "ok")
    return next((worst for worst in order if worst in seen), "other-action")


def record_step(plan: StepPlan, step_id: str, state: JobState, sure: bool, tolerated: bool) -> None:
    """Record the step's outputs and outcome for the steps and status functions after it
    (``sure``: the step runs whenever its job does, and whether a failure of it is
    tolerated, ``continue-on-error``, is known)."""
    verdict = plan.planned if plan.verdict == "conditional" else plan.verdict
    fails = verdict in ("would-fail", "bad-input")
    if fails and not tolerated:
        if not sure:  # it may not run, or its failure may be tolerated
            if state.failed is False:
                state.failed = Unknown(f"the outcome of step {plan.index}", path=False)
        else:
            why = "has bad input" if verdict == "bad-input" else "would fail on this machine"
            state.failed, state.failure = True, f"step {plan.index} ({plan.name}) {why}"
    judged = plan.verdict in JUDGED or (sure and plan.verdict == "conditional")
    known = judged and verdict != "not-evaluated" and plan.results
    if known and not any(r.report.get("not_evaluated") for r in plan.results):
        outputs: dict[str, str] = {}
        for result in plan.results:
            outputs.update({k: format_output(v) for k, v in result.outputs.items()})
        outcome = "failure" if fails else "success"
        state.steps[step_id] = {
            # an output the plan did not produce (the all-in-one's prefixed names, say)
            # is unknown, not empty
            "outputs": Partial(f"steps.{step_id}.outputs", outputs),
            "outcome": outcome,
            "conclusion": "success" if tolerated else outcome,
        }
    else:
        state.steps[step_id] = Unknown(f"steps.{step_id}")
