"""Walk a workflow as the runner would: jobs in ``needs`` order, each step's ``if:``, its env.

Each gpu-ci step's ``with:`` is evaluated with what the plan knows (:mod:`._contexts`) and handed
to the same command the action runs, in dry-run mode. What only the run knows is never guessed:
a step whose inputs wait for it is "not evaluated", an ``if:`` that does is "conditional". A
step whose ``if:`` is false at plan time (``if: false``, a planned cache hit) is "skipped" and
never judged, as the runner never runs it. Local composite actions are expanded, local
reusable workflows planned as their jobs; remote ones are named, not inspected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.dryrun._bounds import MAX_ACTION_DEPTH, Budget, PlanBounds, cycle_detail, too_deep
from gpuci.dryrun._calls import missing_paths_of
from gpuci.dryrun._contexts import (
    evaluate_text,
    evaluate_value,
    layer_env,
    runner_context,
    runs_on_label,
    written_env,
)
from gpuci.dryrun._expressions import Partial, Unknown, truth_of
from gpuci.dryrun._jobs import (
    JobState,
    Refusal,
    call_outputs,
    callee_secrets,
    cond_text,
    cond_values,
    docker_notes,
    find_callee,
    inputs_context,
    job_legs,
    job_result,
    job_title,
    merge_leg_outputs,
    needs_order,
    nothing_failed,
    own_needs,
    plan_condition,
    refusals,
    skipped_context,
    string_if,
    upstream_state,
    worst_outcome,
)
from gpuci.dryrun._matrix import BadMatrix
from gpuci.dryrun._matrix import label as matrix_label
from gpuci.dryrun._report import Transcript, plan_lines
from gpuci.dryrun._steps import (
    JUDGED,
    StepPlan,
    checked_out,
    given_inputs,
    judge,
    mark_conditional,
    plan_calls,
    record_step,
    skipped_plan,
    step_name,
    titled,
    worst_verdict,
)
from gpuci.dryrun._values import text_of
from gpuci.dryrun._workflow import (
    calls_for,
    classify_uses,
    job_needs,
    load_local_action,
    mapping,
    trigger_mapping,
)
from gpuci.errors import InputError
from gpuci.runtime import Runtime

__all__ = ["JobState", "Planner"]

UNRESOLVED_MATRIX = "its matrix is built at run time: judged once, with matrix.* unresolved"


@dataclass
class Planner:
    rt: Runtime
    workspace: Path
    contexts: dict[str, Any]  # github, runner and the unknowns (see contexts.base_contexts)
    probe: bool = False  # read-only probes allowed (--probe)
    plans: list[StepPlan] = field(default_factory=list)
    outcomes: dict[str, Any] = field(default_factory=dict)  # job -> success|failure|skipped|?
    job_outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # job -> its outputs
    upstream: dict[str, dict[str, Any]] = field(default_factory=dict)  # job -> all above it
    transcript: Transcript = field(default_factory=Transcript)  # the plan as a person reads it
    source: Path | None = None  # the workflow file: a call back to it is a cycle
    bounds: PlanBounds = field(default_factory=PlanBounds)  # how far the plan may walk
    budget: Budget = field(default_factory=Budget)  # what its expressions may scan
    notes: list[str] = field(default_factory=list)  # warnings on the plan as a whole

    def __post_init__(self) -> None:
        if self.source is not None:  # named as a ``uses:`` calling it back names it
            real = self.source.resolve()
            inside = real.is_relative_to(self.workspace.resolve())
            label = f"./{real.relative_to(self.workspace.resolve())}" if inside else str(real)
            self.bounds.stack.append((real, label))

    # ----- workflows and jobs ------------------------------------------------------------
    def workflow(
        self,
        workflow: Mapping[str, Any],
        wanted: str | None = None,
        prefix: str = "",
        inputs: Any = None,
        depth: int = 0,
        secrets: Any = None,
    ) -> None:
        jobs: dict[str, Any] = own_needs(workflow.get("jobs") or {})
        base = {**self.contexts, "inputs": self.contexts["inputs"] if inputs is None else inputs}
        if secrets is not None:
            base["secrets"] = secrets
        with self.budget.active():
            env = layer_env({}, workflow.get("env"), base, nothing_failed)
            self.bounds.check_jobs(len(jobs))
            for job_id in needs_order(jobs):
                job = jobs[job_id]
                if (wanted and job_id != wanted) or not isinstance(job, dict):
                    # outside the plan (--job): a job that needs it plans as if it succeeded
                    self.outcomes.setdefault(f"{prefix}{job_id}", "success")
                    continue
                self.job(f"{prefix}{job_id}", job, {**base, "env": env}, prefix, depth)
        if depth == 0 and self.budget.spent:  # once, at the end of the plan
            self.transcript.say(self.budget.line())

    def job(
        self, name: str, job: dict[str, Any], contexts: dict[str, Any], prefix: str, depth: int
    ) -> None:
        self.bounds.count(1, f"job {name}")
        results = {
            n: self.outcomes.get(f"{prefix}{n}", Unknown(f"needs.{n}.result"))
            for n in job_needs(job)
        }
        contexts = {
            **contexts,
            "needs": {
                n: Partial(f"needs.{n}", {"result": r, "outputs": self._outputs_of(f"{prefix}{n}")})
                if isinstance(r, str)
                else Unknown(f"needs.{n}")
                for n, r in results.items()
            },
        }
        above = {n: self.upstream.get(f"{prefix}{n}", {}) for n in results}
        state, self.upstream[name] = upstream_state(results, above)
        cond, uses = job.get("if"), str(job.get("uses") or "")
        if warned := string_if(cond, self.bounds.file()):  # the job runs as GitHub reads it
            self.notes.append(f"job {name}: {warned}")
            self.transcript.hold(f"job {name}: warning: {warned}")  # under its heading
        held = plan_condition(cond, contexts, state.status)
        if held is False:
            if state.failed is True and plan_condition(cond, contexts, nothing_failed) is not False:
                why = f"skipped: {state.failure} would fail or be skipped here"
            else:
                values = cond_values(cond, contexts)
                why = f"skipped (if: {cond_text(cond)}" + (f"; {values})" if values else ")")
            self._job_line(name, why)
            self.outcomes[name] = "skipped"
            self.job_outputs[name] = {}  # a skipped job's outputs are empty
            self._list_skipped(name, job, f"job {why}")
            self._refuse(refusals(self.bounds, self.workspace, uses, contexts, name, depth))
            return
        note = ""
        if isinstance(held, Unknown):
            note = f"conditional: job if: {cond_text(cond)} ({held.why} is known at run time)"
        try:
            if uses:
                self.outcomes[name] = self.calls(name, job, uses, contexts, note, depth)
                return
            self.outcomes[name] = self.legs(name, job, contexts, note)
        except BadMatrix as exc:
            self._bad_matrix(name, uses, exc)

    def _bad_matrix(self, name: str, uses: str, exc: BadMatrix) -> None:
        """A matrix GitHub refuses (over 256 legs, an empty axis): the job fails and its one
        bad-input line says why."""
        self._job_line(name, f"BAD INPUT: {exc.message}")
        self._job_verdict(name, "strategy.matrix", uses, "bad-input", exc.one_line())
        self.outcomes[name], self.job_outputs[name] = "failure", {}

    def _keep_outputs(self, job: str, outputs: dict[str, Any]) -> None:
        """Record a job's outputs for the jobs that need it; an unknown one is named as they
        read it (``needs.gate.outputs.skip``), not by the step it came from."""
        short = job.rpartition("/")[2]
        self.job_outputs[job] = {
            k: Unknown(f"needs.{short}.outputs.{k}") if isinstance(v, Unknown) else v
            for k, v in outputs.items()
        }

    def _outputs_of(self, job: str) -> Any:
        """``needs.<job>.outputs``: what the plan of that job knows of its ``outputs:``."""
        known = self.job_outputs.get(job)
        if known is None:
            return Unknown(f"needs.{job.rpartition('/')[2]}.outputs")
        name = job.rpartition("/")[2]
        return Partial(f"needs.{name}.outputs", known, open=frozenset())  # undeclared: null

    def _job_line(self, name: str, text: str) -> None:
        self.transcript.say(f"job {name}: {text}")

    def _legs(
        self, name: str, job: dict[str, Any], contexts: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], Any]]:
        """The job's legs (:func:`job_legs`), each counted: job() counted the first."""
        legs = job_legs(name, job, contexts)
        self.bounds.count(len(legs) - 1, f"job {name}")
        return legs

    def _job_verdict(self, job: str, name: str, uses: str, verdict: str, detail: str) -> None:
        """A plan for the job as a whole: a call not inspected, a cycle, a matrix too large."""
        plan = StepPlan(job=job, index="-", name=name, uses=uses)
        plan.verdict, plan.detail = verdict, detail
        self.plans.append(plan)

    def _refuse(self, refused: list[Refusal]) -> None:
        """Each call GitHub refuses the run for: a line, a verdict."""
        for name, uses, (words, line) in refused:
            self._job_line(name, f"uses {uses}: BAD INPUT: {words}")
            self._job_verdict(name, uses, uses, "bad-input", line)

    def _list_skipped(self, name: str, job: dict[str, Any], why: str) -> None:
        """A skipped job's steps, listed not judged, under its own heading (a CI log group),
        in the text as in the JSON (one plan each, :meth:`_add`), with the warnings on the
        file, which hold whether it runs or not. GitHub skips it before it expands its
        matrix: one job, its ``runs-on`` as written."""
        # a list of mappings, or none: load_workflow refuses ``steps: 1`` and ``steps: [1]``
        steps = job.get("steps") or []
        if steps:
            runs_on = runs_on_label(job.get("runs-on")) or "?"
            self.transcript.heading(f"job {name} (runs-on: {runs_on})")
            self.transcript.say(f"  {why}")
        for index, step in enumerate(steps, start=1):
            self.bounds.count(1, f"job {name} step {index}")
            cond = step.get("if")
            shown = cond_text(cond) if cond is not None else ""
            self._add(skipped_plan(name, index, step, why, shown), cond)

    def calls(
        self,
        name: str,
        job: dict[str, Any],
        uses: str,
        contexts: dict[str, Any],
        note: str,
        depth: int,
    ) -> Any:
        """A job calling a workflow: a local one is planned as its jobs, once per leg of the
        caller's matrix with that leg's ``inputs`` and ``secrets``; a remote one is named."""
        found, own, refused = find_callee(self.bounds, self.workspace, uses, contexts, name, depth)
        if refused is not None:  # GitHub does not start the run
            self._refuse([(name, uses, refused)])
            return "failure"
        if found is None:
            why = (
                "not inspected: remote reusable workflow"
                if not uses.startswith("./")
                else "not inspected: local reusable workflow not found in the workspace"
            )
            self._job_line(name, f"uses {uses}: {why}")
            self._job_verdict(name, uses, uses, "not-inspected", why)
            return Unknown(f"needs.{name}.result")
        path, called = found
        outcomes, outputs = [], []
        for leg_name, leg_job, leg in self._legs(name, job, contexts):
            outcome, leg_outputs = self._call_leg(
                leg_name,
                leg_job,
                {**contexts, "matrix": leg},
                (uses, path, called, own),
                note,
                depth,
            )
            outcomes.append(outcome)
            outputs.append(leg_outputs)
        self._keep_outputs(name, merge_leg_outputs(outputs))
        return worst_outcome(outcomes)

    def _call_leg(
        self,
        leg_name: str,
        leg_job: dict[str, Any],
        ctx: dict[str, Any],
        call: tuple[str, Path, dict[str, Any], Any],
        note: str,
        depth: int,
    ) -> tuple[Any, dict[str, Any]]:
        """One leg of a job calling a local workflow (``call``: its ``uses``, file, body, and
        whether it is this repository's own), planned as its jobs: the leg's outcome and the
        outputs the callee declares."""
        uses, path, called, own = call
        leg = ctx["matrix"]
        status = JobState().status
        declared = trigger_mapping(called, "workflow_call", "inputs") or {}
        inputs = inputs_context(declared, mapping(leg_job.get("with")), ctx, status, typed=True)
        secrets = callee_secrets(leg_job, ctx, status)
        where = " (this repository's own: read from the checkout)" if own else ""
        self._job_line(
            leg_name, f"calls {uses} ({path.name}){where}" + (f"; {note}" if note else "")
        )
        if isinstance(leg, Unknown):
            self.transcript.say(f"  {UNRESOLVED_MATRIX}")
        elif leg and len(leg) > 1:
            self.transcript.say(f"  matrix: {matrix_label(leg)}")
        before = set(self.outcomes)
        prefix = f"{leg_name}/"
        with self.bounds.inside(path, uses):
            self.workflow(called, None, prefix, inputs, depth + 1, secrets)
        inner = {k: v for k, v in self.outcomes.items() if k not in before}
        outcome = (
            Unknown(f"{leg_name} is conditional") if note else worst_outcome(list(inner.values()))
        )
        jobs_ctx = {
            k[len(prefix) :]: {"result": v, "outputs": self._outputs_of(k)}
            for k, v in inner.items()
            if k.startswith(prefix) and "/" not in k[len(prefix) :]
        }
        return outcome, call_outputs(
            called, {**ctx, "inputs": inputs, "jobs": jobs_ctx}, nothing_failed
        )

    def legs(self, name: str, job: dict[str, Any], contexts: dict[str, Any], note: str) -> Any:
        """Plan every leg of the job's matrix; the job's outcome (failure if a leg fails)."""
        outcomes = []
        outputs: list[dict[str, Any]] = []
        for leg_name, leg_job, leg in self._legs(name, job, contexts):
            ctx = {**contexts, "matrix": leg}
            runs_on = evaluate_value(leg_job.get("runs-on", ""), ctx, nothing_failed)
            ctx["runner"] = runner_context(runs_on)
            ctx["env"] = layer_env(ctx["env"], leg_job.get("env"), ctx, nothing_failed)
            notes = docker_notes(leg_job, ctx)
            title = job_title(leg_job, ctx)
            header = f"job {leg_name}{f': {title}' if title else ''}"
            self.transcript.heading(f"{header} (runs-on: {runs_on_label(runs_on) or '?'})")
            shown = [note] if note else []
            if isinstance(leg, Unknown):
                shown.append(UNRESOLVED_MATRIX)
            elif leg and len(leg) > 1:
                shown.append(f"matrix: {matrix_label(leg)}")
            for line in shown + notes:
                self.transcript.say(f"  {line}")
            state = JobState()
            first = len(self.plans)
            self.steps(leg_name, leg_job.get("steps") or [], ctx, state, "", 0, note)
            for plan in self.plans[first:]:
                plan.notes = notes + plan.notes
            outcome = "failure" if state.failed is True else state.failed or "success"
            outcomes.append(job_result(leg_job, ctx, outcome))
            if outcome != "success" and outcomes[-1] == "success":
                short = name.rpartition("/")[2]
                self.transcript.say(f"  continue-on-error: needs.{short}.result is success")
            if note:
                outcomes[-1] = Unknown(f"{leg_name} is conditional")
            declared = mapping(leg_job.get("outputs"))
            step_ctx = {**ctx, "steps": state.steps}
            outputs.append(
                {
                    str(k): evaluate_text(text_of(v), step_ctx, state.status)
                    for k, v in declared.items()
                }
            )
        self._keep_outputs(name, merge_leg_outputs(outputs))
        return worst_outcome(outcomes)

    # ----- steps -------------------------------------------------------------------------
    def steps(
        self,
        job: str,
        steps: list[Any],
        contexts: dict[str, Any],
        state: JobState,
        prefix: str,
        depth: int,
        unsure: str = "",
    ) -> None:
        """Plan each step; ``unsure`` makes each one that would run conditional (its job's
        ``if:`` is known only at run time)."""
        steps = list(steps)  # mappings: the loaders refuse ``steps: 1`` and ``steps: [1]``
        for number, step in enumerate(steps, start=1):
            self.bounds.count(1, f"job {job} step {prefix}{number}")
            index: int | str = f"{prefix}{number}" if prefix else number
            step_id = str(step.get("id") or f"__{number}")
            env = layer_env(
                contexts["env"], step.get("env"), {**contexts, "steps": state.steps}, state.status
            )
            ctx = {**contexts, "env": env, "steps": state.steps}
            step = steps[number - 1] = titled(step, ctx)
            cond = step.get("if")
            shown = cond_text(cond) if cond is not None else ""
            held = plan_condition(cond, ctx, state.status)
            if held is False:
                alive = plan_condition(cond, ctx, nothing_failed)
                if state.failed is True and alive is not False:
                    # Skipped only because an earlier step fails *here*: judge it anyway (its
                    # literals are still checked), but it does not run after that failure.
                    plan = self.step(job, steps, number, index, ctx, env, depth)
                    plan.planned, plan.verdict = plan.verdict, "skipped"
                    plan.reason = f"skipped here: {state.failure}"
                    plan.detail = f"{plan.reason} (if it ran: {plan.planned}: {plan.detail})"
                else:
                    values = cond_values(cond, ctx) if cond is not None else ""
                    why = f"if: {shown or 'success()'}" + (f"; {values}" if values else "")
                    plan = skipped_plan(job, index, step, f"skipped ({why})", "")
                plan.condition = shown
                self._add(plan, cond)
                state.steps[step_id] = skipped_context()
                continue
            plan = self.step(job, steps, number, index, ctx, env, depth)
            plan.condition = shown
            contexts = {**contexts, "env": written_env(contexts["env"])}  # it may add names
            if isinstance(held, Unknown) or unsure:
                mark_conditional(plan, held, shown or "success()")
            self._add(plan, cond)
            # inside a job that may not run, a step is planned as if the job runs: what it
            # would do then is sure, as the job's own line says once
            tolerated = truth_of(
                evaluate_value(step.get("continue-on-error", False), ctx, nothing_failed)
            )
            sure = not isinstance(held, Unknown) and tolerated is not None
            record_step(plan, step_id, state, sure=sure, tolerated=bool(tolerated))

    def _add(self, plan: StepPlan, cond: Any) -> None:
        """List the step (warned of an ``if:`` that is a string), then a composite's own steps
        (logged as they were planned)."""
        if warned := string_if(cond, self.bounds.file()):
            plan.warnings.append(warned)
        self.plans.append(plan)
        self.transcript.extend(plan_lines(plan))
        self.plans += plan.children

    def step(
        self,
        job: str,
        steps: list[Any],
        number: int,
        index: int | str,
        ctx: dict[str, Any],
        env: Mapping[str, str | Unknown],
        depth: int,
    ) -> StepPlan:
        """Plan one step: a run: step or another action is listed; a gpu-ci step goes
        ``with:`` -> its command calls -> each call's dry run -> the step's verdict."""
        step: dict[str, Any] = steps[number - 1]
        uses = text_of(step.get("uses")).strip()
        plan = StepPlan(job=job, index=index, name=step_name(step), uses=uses)
        if not uses:
            plan.verdict, plan.detail = "run", "a plain run: step (not judged)"
            return plan
        classified = classify_uses(uses, self.workspace)
        if classified is None:
            return self._not_gpuci(plan, step, steps[: number - 1], ctx, depth)
        with_ = step.get("with") or {}
        if not isinstance(with_, dict):
            plan.verdict, plan.detail = "bad-input", "'with:' is not a mapping"
            return plan
        given = given_inputs(plan, with_, ctx, env)
        dispatch = classified[1].dispatch if classified[1] else None
        if dispatch and dispatch in plan.why:
            plan.verdict = "not-evaluated"
            plan.detail = f"'{dispatch}' is set at run time ({plan.why[dispatch]})"
            return plan
        try:
            calls = calls_for(classified[0], classified[1], given)
        except InputError as exc:
            plan.verdict, plan.detail = "bad-input", exc.message
            return plan
        plan.command = " + ".join(full for full, _, _ in calls)
        plan_calls(plan, calls, env, self.probe, self.rt, ctx.get("runner"))
        judge(plan, missing_paths_of(steps, number, calls, self.workspace))
        return plan

    def _not_gpuci(
        self,
        plan: StepPlan,
        step: dict[str, Any],
        before: list[Any],
        ctx: dict[str, Any],
        depth: int,
    ) -> StepPlan:
        """A step that is no gpu-ci action: a local one is planned step by step (and needs a
        checkout before it), any other is listed, not judged."""
        if not plan.uses.startswith("./"):
            plan.verdict, plan.detail = "other-action", "not a gpu-ci action (not judged)"
            return plan
        plan = self.local_action(plan, step, ctx, depth)
        if depth == 0 and not checked_out(before):
            plan.warnings.append(
                f"no step before it checks the repository out (actions/checkout): "
                f"the runner will not find {plan.uses}"
            )
            plan.detail = "; ".join([plan.detail, *plan.warnings])
            if plan.verdict in ("ok", "other-action"):
                plan.verdict = "may-fail"
        return plan

    def local_action(
        self, plan: StepPlan, step: dict[str, Any], ctx: dict[str, Any], depth: int
    ) -> StepPlan:
        """``uses: ./path``: a composite action is planned step by step, its inputs mapped."""
        where = f"job {plan.job} step {plan.index}"
        found = self.bounds.read(load_local_action, self.workspace, plan.uses, where)
        if found is None:
            plan.verdict = "other-action"
            plan.detail = f"local action {plan.uses}: no action.yml in the workspace (not judged)"
            return plan
        folder, action = found
        runs = mapping(action.get("runs"))
        using = text_of(runs.get("using"))
        if using.lower() != "composite":  # the runner: case-blind
            plan.verdict = "other-action"
            plan.detail = f"local {using or 'unknown'} action {plan.uses} (not judged)"
            return plan
        chain = self.bounds.cycle(folder, plan.uses)
        if chain is not None:
            plan.verdict, plan.detail = "bad-input", cycle_detail("action", plan.uses, chain)
            return plan
        if depth >= MAX_ACTION_DEPTH:  # a cycle is bad input at any depth: it never ends
            plan.verdict, plan.detail = "other-action", too_deep(plan.uses)
            return plan
        with_ = mapping(step.get("with"))
        declared = mapping(action.get("inputs"))
        inputs = inputs_context(declared, with_, ctx, lambda s: True)
        inner_ctx = {**ctx, "inputs": inputs, "steps": {}}
        state = JobState()
        self.transcript.say(f"  step {plan.index}: {plan.name} [composite action {plan.uses}]")
        first = len(self.plans)
        with self.bounds.inside(folder, plan.uses):
            steps = runs["steps"]  # a list of mappings: load_local_action refuses others
            self.steps(plan.job, steps, inner_ctx, state, f"{plan.index}.", depth + 1)
        inner = self.plans[first:]
        del self.plans[first:]
        plan.verdict = worst_verdict(p.judged for p in inner if p.judged and p.verdict != "skipped")
        plan.command = f"composite action ({len(inner)} step(s))"
        plan.detail = f"local composite action {plan.uses}: " + (
            "; ".join(f"step {p.index} {p.verdict}" for p in inner if p.verdict in JUDGED)
            or "no gpu-ci step inside"
        )
        plan.children = inner
        return plan
