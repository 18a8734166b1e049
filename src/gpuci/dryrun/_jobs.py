"""A job as the plan sees it: its status functions, its ``if:`` at plan time, the order of
jobs by ``needs``, the ``inputs`` of a called workflow or composite action, matrix legs, and
what a container or service asks of the runner. Used by :mod:`._planner`'s walk.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci import settings
from gpuci.dryrun._bounds import Loaded, PlanBounds
from gpuci.dryrun._contexts import PLAN_FUNCTIONS, evaluate_text, evaluate_value
from gpuci.dryrun._embedded import OPEN, unclosed
from gpuci.dryrun._expressions import (
    EMBEDDED,
    ExpressionError,
    Unknown,
    condition,
    condition_expression,
    evaluate,
    first_unknown,
    opaque,
    to_number,
    to_text,
    truth_of,
)
from gpuci.dryrun._values import text_of
from gpuci.dryrun._workflow import (
    job_needs,
    load_local_workflow,
    own_workflow,
    trigger_mapping,
)
from gpuci.redact import clip

__all__ = [
    "JobState",
    "Refusal",
    "call_outputs",
    "callee_secrets",
    "cond_text",
    "cond_values",
    "docker_notes",
    "find_callee",
    "inputs_context",
    "job_legs",
    "job_result",
    "job_title",
    "merge_leg_outputs",
    "needs_order",
    "nothing_failed",
    "own_needs",
    "plan_condition",
    "refusals",
    "skipped_context",
    "string_if",
    "upstream_state",
    "worst_outcome",
]


@dataclass
class JobState:
    """One job (or composite action) as it runs: its steps so far and whether one failed."""

    failed: bool | Unknown = False
    failure: str = ""  # which step, in words
    steps: dict[str, Any] = field(default_factory=dict)
    # what failure() reads where it is not ``failed``: a job above was skipped, none failed
    failing: bool | Unknown | None = None

    def status(self, name: str) -> bool | Unknown:
        if name == "always":
            return True
        if name == "cancelled":
            return False
        if name == "failure" and self.failing is not None:
            return self.failing
        if isinstance(self.failed, Unknown):
            return self.failed
        return self.failed if name == "failure" else not self.failed


def upstream_state(
    results: Mapping[str, Any], above: Mapping[str, Mapping[str, Any]]
) -> tuple[JobState, dict[str, Any]]:
    """A job's status functions from the results of every job above it (``results``: its
    needs', ``above``: each need's own upstream), not only of those it needs: GitHub's
    ``success()`` for a job is false when any ancestor failed or was skipped, though the
    jobs it needs succeeded (actions/runner#2205), and ``failure()`` "returns true if any
    ancestor job fails" (a skipped one is no failure). Also the results of them all, for the
    jobs below it."""
    upstream = dict(results)
    for need in results:
        for name, result in above.get(need, {}).items():
            upstream.setdefault(name, result)
    state = JobState()
    failed = [n for n, r in upstream.items() if r in ("failure", "skipped")]
    near, far = [n for n in failed if n in results], [n for n in failed if n not in results]
    if failed:
        words = [f"needs {', '.join(near)}"] if near else []
        words += [f"ancestor {', '.join(far)}"] if far else []
        state.failed, state.failure = True, " and ".join(words)
        if "failure" not in (upstream[n] for n in failed):  # skipped only
            unsure = next((n for n, r in upstream.items() if isinstance(r, Unknown)), "")
            state.failing = Unknown(f"needs.{unsure}.result", path=False) if unsure else False
    elif unsure := next((n for n, r in upstream.items() if isinstance(r, Unknown)), ""):
        state.failed = Unknown(f"needs.{unsure}.result", path=False)
    return state, upstream


def nothing_failed(name: str) -> bool:
    return name in ("success", "always")


def cond_text(cond: Any) -> str:
    text = " ".join(text_of(cond).split())
    whole = EMBEDDED.fullmatch(text)
    return " ".join(whole.group(1).split()) if whole else text


_REFERENCE = re.compile(
    r"(?<![\w.'])(?:inputs|matrix|vars|env|github|needs|steps|runner)(?:\.[A-Za-z_][\w-]*)+"
)


def cond_values(cond: Any, ctx: Mapping[str, Any]) -> str:
    """The values an ``if:`` read, as the plan knew them (``inputs.gpu-arch-type is 'cpu'``),
    so a skipped step says why in values; a secret is never shown, an unknown is left out."""
    shown: list[str] = []
    for ref in dict.fromkeys(_REFERENCE.findall(cond_text(cond))):
        try:
            value = evaluate(ref, ctx, lambda s: True)
        except ExpressionError:
            continue
        if isinstance(value, Unknown | dict | list):
            continue
        text = "null" if value is None else repr(to_text(value))
        shown.append(f"{ref} is {text}")
    return "; ".join(shown[:4])


def plan_condition(cond: Any, ctx: Mapping[str, Any], status: Any) -> bool | Unknown:
    """An ``if:`` at plan time; one this plan cannot parse is left to the run, not refused."""
    try:
        return condition(cond, ctx, status, PLAN_FUNCTIONS)
    except ExpressionError as exc:
        return Unknown(f"an expression this plan cannot evaluate ({exc})", path=False)


def string_if(cond: Any, where: str) -> str:
    """The warning for an ``if:`` (in the file ``where``) that mixes text and ``${{ }}``, '' for
    any other: GitHub makes it ``format()`` of both (:func:`condition_expression`), a string,
    true when not empty, so ``${{ false }} && false`` runs: the plan follows GitHub, and says so
    (actionlint calls it a condition that is always true)."""
    if not isinstance(cond, str) or OPEN not in cond or EMBEDDED.fullmatch(cond) or unclosed(cond):
        return ""
    text = EMBEDDED.sub(lambda span: "", cond)  # a | block's newline is text too
    try:
        after = condition_expression(cond).startswith("success() && (")
    except ExpressionError:  # an expression the plan cannot parse: GitHub still adds success()
        after = True
    truth = ("always true" if text else "true when not empty") + (
        " after success" if after else ", even after a failure"
    )
    return (
        f"if: {clip(repr(cond), 200)} in {where} mixes text and ${{{{ }}}}: GitHub reads it as "
        f"a string, {truth}; put the whole condition inside one ${{{{ }}}} (or drop the ${{{{ }}}})"
    )


Refusal = tuple[str, str, tuple[str, str]]  # (job, uses, (a few words, the bad-input line))


def find_callee(
    bounds: PlanBounds,
    workspace: Path,
    uses: str,
    contexts: Mapping[str, Any],
    job: str,
    depth: int,
) -> tuple[Loaded | None, str | None, tuple[str, str] | None]:
    """The local workflow ``job`` calls (None: remote or missing), ``./<path>`` when it names
    this repository's own by its full name, and why GitHub refuses the call, if it does
    (:meth:`PlanBounds.refusal`)."""
    github = contexts.get("github")
    own = own_workflow(uses, github.get("repository") if isinstance(github, dict) else None)
    local = own or (uses if uses.startswith("./") else None)
    found = bounds.read(load_local_workflow, workspace, local, f"job {job}") if local else None
    return found, own, bounds.refusal(found[0] if found else None, uses, job, depth)


def refusals(
    bounds: PlanBounds,
    workspace: Path,
    uses: str,
    contexts: Mapping[str, Any],
    job: str,
    depth: int,
) -> list[Refusal]:
    """Why GitHub refuses a run whose ``job`` calls ``uses``, though the job never runs here (a
    false ``if:``): it reads every workflow a run calls when it creates the run, before any
    ``if:``, and refuses a cycle or a chain too deep. The jobs of a local callee are walked,
    each counted, their steps never planned."""
    found, _, refused = (
        find_callee(bounds, workspace, uses, contexts, job, depth) if uses else (None,) * 3
    )
    if refused is not None:
        return [(job, uses, refused)]
    out: list[Refusal] = []
    if found is not None:
        with bounds.inside(found[0], uses):
            for inner, body in found[1]["jobs"].items():  # a mapping: load_local_workflow
                bounds.count(1, f"job {job}/{inner}")
                inner_uses = str(body.get("uses") or "") if isinstance(body, dict) else ""
                out += refusals(
                    bounds, workspace, inner_uses, contexts, f"{job}/{inner}", depth + 1
                )
    return out


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


def job_result(job: Mapping[str, Any], ctx: Mapping[str, Any], outcome: Any) -> Any:
    """A leg's result as the jobs that need it read it: a job with ``continue-on-error`` that
    fails does not fail the run, and ``needs.<job>.result`` is ``success`` (actions/runner
    #1161: the UI still shows it failed); unknown when only the run knows the setting."""
    if outcome == "success" or "continue-on-error" not in job:
        return outcome
    tolerated = truth_of(evaluate_value(job["continue-on-error"], ctx, nothing_failed))
    if tolerated is None:
        return outcome if isinstance(outcome, Unknown) else Unknown("continue-on-error")
    return "success" if tolerated else outcome


def needs_order(jobs: Mapping[str, Any]) -> list[str]:
    """Job ids in an order where each comes after what it needs, file order otherwise: of the
    jobs ready together, the first in the file goes first. A need the workflow lacks is
    ignored; jobs in a cycle follow the rest, in file order (the loader refuses both, as GitHub
    does: ``_workflow._needs_refused``).

    Kahn's topological sort, by file position, in time linear in the jobs and their needs.
    """
    position = {job_id: index for index, job_id in enumerate(jobs)}
    waiting_on = [0] * len(position)  # how many of its needs each job still waits for
    needed_by: dict[int, list[int]] = {}
    for job_id, index in position.items():
        for need in _known_needs(jobs[job_id], jobs):
            waiting_on[index] += 1
            needed_by.setdefault(position[need], []).append(index)
    ready = [index for index, count in enumerate(waiting_on) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for after in needed_by.get(index, ()):
            waiting_on[after] -= 1
            if waiting_on[after] == 0:
                heapq.heappush(ready, after)
    placed = set(order)
    order += [index for index in range(len(position)) if index not in placed]
    ids = list(position)
    return [ids[index] for index in order]


def own_needs(jobs: Mapping[Any, Any]) -> dict[Any, Any]:
    """The jobs with each ``needs:`` naming the jobs by their ids as ``jobs:`` writes them:
    GitHub matches a need to a job case-blind (``needs: Build`` is the job ``build``)."""
    ids = {str(name).casefold(): str(name) for name in jobs}
    return {
        name: {**job, "needs": [ids.get(n.casefold(), n) for n in job_needs(job)]}
        if isinstance(job, dict) and "needs" in job
        else job
        for name, job in jobs.items()
    }


def _known_needs(job: Any, jobs: Mapping[str, Any]) -> set[str]:
    """The jobs of this workflow that ``job`` needs (``needs:`` a name or a list of them)."""
    return {n for n in job_needs(job) if n in jobs}


def inputs_context(
    declared: Mapping[str, Any],
    with_: Mapping[str, Any],
    ctx: Mapping[str, Any],
    status: Any,
    typed: bool = False,
) -> dict[str, Any]:
    """``inputs`` of a composite action or called workflow: ``with:`` over the defaults.

    A composite action's inputs are text; a called workflow's (``typed``) take their declared
    ``type``, so ``inputs.flag`` is a boolean and ``inputs.n`` a number, as on the runner.
    """
    inputs: dict[str, Any] = {}
    for name, spec in declared.items():
        spec = spec if isinstance(spec, dict) else {}
        default = spec.get("default")
        if not typed:
            inputs[str(name)] = (
                "" if default is None else evaluate_text(text_of(default), ctx, status)
            )
        else:
            value = "" if default is None else evaluate_value(default, ctx, status)
            inputs[str(name)] = _typed(value, spec.get("type"))
    for name, value in with_.items():
        if not typed:
            inputs[str(name)] = evaluate_text(text_of(value), ctx, status)
        else:
            spec = declared.get(name)
            kind = spec.get("type") if isinstance(spec, dict) else None
            inputs[str(name)] = _typed(evaluate_value(value, ctx, status), kind)
    return inputs


def _typed(value: Any, kind: Any) -> Any:
    """A called workflow's input as its declared type (booleans and numbers from text too)."""
    if isinstance(value, Unknown) or kind not in ("boolean", "number"):
        return value if isinstance(value, Unknown) else _scalar_text(value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        return text_of(value).strip().lower() == "true"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    number = to_number(text_of(value))
    return int(number) if number.is_integer() else number


def _scalar_text(value: Any) -> Any:
    """A string input's value: text, as the runner passes it (a YAML number becomes text)."""
    if isinstance(value, dict | list):
        return value
    return to_text(value)


def callee_secrets(job: Mapping[str, Any], ctx: Mapping[str, Any], status: Any) -> Any:
    """``secrets`` inside a called workflow: the caller's (``secrets: inherit``), those the call
    names, and ``GITHUB_TOKEN``; any other is empty there, as on the runner."""
    given = job.get("secrets")
    if given == "inherit":
        return ctx.get("secrets")
    caller = ctx.get("secrets")
    name = settings.GITHUB_TOKEN.name
    token = caller.get(name) if isinstance(caller, dict) else None
    found: dict[str, Any] = {name: token or opaque(f"secrets.{name}")}
    if isinstance(given, dict):
        for name, value in given.items():
            found[str(name)] = evaluate_value(value, ctx, status)
    return found


def call_outputs(called: Mapping[str, Any], ctx: Mapping[str, Any], status: Any) -> dict[str, Any]:
    """A called workflow's ``on.workflow_call.outputs``, from its jobs' planned outputs."""
    found: dict[str, Any] = {}
    for name, spec in (trigger_mapping(called, "workflow_call", "outputs") or {}).items():
        value = spec.get("value") if isinstance(spec, dict) else None
        found[str(name)] = evaluate_text(text_of(value), ctx, status)
    return found


def job_title(job: Mapping[str, Any], ctx: Mapping[str, Any]) -> str:
    """A job's ``name:`` as the runner shows it ('' when it has none); as written if it needs
    a value only the run knows."""
    raw = text_of(job.get("name"))
    shown = evaluate_text(raw, ctx, lambda s: True) if raw else ""
    return raw if isinstance(shown, Unknown) else shown


def merge_leg_outputs(per_leg: list[dict[str, Any]]) -> dict[str, Any]:
    """A matrix job's outputs: one leg's, or what every leg agrees on (the runner keeps
    whichever leg wrote last, so a value that differs by leg is known only at run time)."""
    if len(per_leg) == 1:
        return per_leg[0]
    merged: dict[str, Any] = {}
    for name in {k for leg in per_leg for k in leg}:
        values = [leg.get(name) for leg in per_leg]
        first = values[0]
        same = all(isinstance(v, str) and v == first for v in values)
        merged[name] = first if same else Unknown(f"outputs.{name} (differs by matrix leg)")
    return merged


def docker_notes(job: Mapping[str, Any], ctx: Mapping[str, Any]) -> list[str]:
    """``container:`` and ``services:``: named, for a runner without Docker cannot run them."""
    container, services = job.get("container"), job.get("services")
    named = [("runs in container", container)] if container else []
    if isinstance(services, dict):
        named += [(f"service {name} runs container", spec) for name, spec in services.items()]
    notes = []
    for what, spec in named:
        image = spec.get("image") if isinstance(spec, dict) else spec
        shown = evaluate_text(text_of(image), ctx, lambda s: True)
        name = shown.why if isinstance(shown, Unknown) else shown
        notes.append(f"{what} {name}: needs Docker on the runner")
    return notes


# Entries copied to put the legs into a job (the job's parts that read ``matrix``, times its
# legs): past it the matrix is judged once, unresolved. A real job copies a few hundred a leg.
MAX_LEG_COPIES = 1_000_000


def job_legs(
    name: str, job: dict[str, Any], contexts: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any], Any]]:
    """(leg name, the job with the leg put in, the matrix context) for each leg of the job's
    matrix, built from the contexts where it is an expression (``fromJSON(inputs.legs)``);
    one unresolved run when only the run can build it, when the plan's budget ran out weighing
    its include and exclude entries, or when putting the legs in would copy more than
    :data:`MAX_LEG_COPIES` entries (only the parts that read ``matrix`` are copied, the rest
    shared: ``strategy`` itself is never copied, as the runner reads it before legs).

    Raises TooManyLegs (bad input) for a matrix of more than GitHub's 256 legs.
    """
    from gpuci.dryrun import _matrix as matrix

    strategy = job.get("strategy")
    raw = strategy.get("matrix") if isinstance(strategy, dict) else None
    value = evaluate_value(raw, contexts, nothing_failed)
    try:
        legs = None if first_unknown(value) is not None else matrix.expand(value)
    except ExpressionError as exc:  # the plan's budget ran out weighing its entries
        return [(name, job, Unknown(f"matrix ({exc})"))]
    if legs is None:
        return [(name, job, Unknown("matrix"))]
    if legs == [{}]:
        return [(name, job, {})]
    reading = _reading_matrix(job)
    copies = sum(len(part) for part in reading.values())
    if copies * len(legs) > MAX_LEG_COPIES:
        return [(name, job, Unknown("matrix (too large to plan leg by leg)"))]
    return [
        (leg_name, _put(job, leg, reading, {}), leg) for leg_name, leg in matrix.named(name, legs)
    ]


def _reading_matrix(job: Any) -> dict[int, Any]:
    """Each list and mapping of ``job`` (by id: an alias is one) that holds a ``matrix``
    reference, itself (so the id stays its); the job's ``strategy`` is left out."""
    reading: dict[int, Any] = {}
    seen: set[int] = set()

    def holds(value: Any) -> bool:
        if isinstance(value, str):
            return "matrix" in value
        if not isinstance(value, list | dict) or id(value) in seen:
            return id(value) in reading
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        found = [holds(v) for k, v in items if not (value is job and k == "strategy")]
        if any(found):
            reading[id(value)] = value
        return any(found)

    holds(job)
    return reading


def _put(value: Any, leg: dict[str, Any], reading: dict[int, Any], done: dict[int, Any]) -> Any:
    """``value`` with the leg's values put in for ``${{ matrix.<key> }}``, copying only what
    :func:`_reading_matrix` found (each part once a leg, ``done``); a value that is one whole
    reference takes the leg's value itself, so ``continue-on-error: ${{ matrix.x }}`` stays a
    boolean (the text 'false' would be truthy)."""
    from gpuci.dryrun import _matrix as matrix

    if isinstance(value, str):
        if "matrix" not in value:
            return value
        whole = matrix.whole_reference(value)
        if whole is not None and whole in leg and leg[whole] is not None:
            return leg[whole]
        return matrix.substitute(value, leg)
    if not isinstance(value, list | dict) or id(value) not in reading:
        return value
    if id(value) not in done:
        if isinstance(value, list):
            done[id(value)] = [_put(v, leg, reading, done) for v in value]
        else:
            done[id(value)] = {k: _put(v, leg, reading, done) for k, v in value.items()}
    return done[id(value)]
