"""``dry-run``: read a workflow, find its gpu-ci steps, and judge each one on this machine.

The point is to learn, before paying for a GPU minute, that a job would fail: a malformed
input, a cache key that would miss, a URL that doesn't answer, a GPU requirement no runner
meets. Each gpu-ci step's ``with:`` is resolved (literal values only: ``${{ ... }}`` is
reported as unresolved, never guessed) and handed to the same command the action runs, in
dry-run mode. A check that fails *here* (no GPU on a laptop) is reported, not fatal: the
verdict is about the plan. Only bad input makes the whole run fail (exit 2).

A job with a literal ``strategy.matrix`` is judged once per leg (:mod:`gpuci.matrix`), with
``${{ matrix.<key> }}`` replaced by the leg's value. A save whose path no earlier step surely
makes is "may-fail" (:mod:`gpuci.path_origins`). An ``env:`` value written as ``${{ }}`` (a
secret, say) is provided at run time: the plan runs without it (or with this machine's own
value of that variable) and lists it as unresolved, never as bad input.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.commands import Command, command_for_action
from gpuci.errors import ExitCode, InputError
from gpuci.runtime import Result, Runtime, format_output, markdown_table

# owner/repo/actions/<name>@ref, ./actions/<name>, and the root all-in-one action.
_REMOTE_SUB = re.compile(r"^[\w.-]+/[\w.-]+/(?P<folder>actions/[\w./-]+?)/?@[\w./-]+$")
_LOCAL_SUB = re.compile(r"^\./(?P<folder>actions/[\w./-]+?)/?$")
_ROOT = re.compile(r"^(?:[\w.-]+/gpu-ci@[\w./-]+|\./?)$")
_EXPR = re.compile(r"\$\{\{.*?\}\}", re.S)


@dataclass
class StepPlan:
    job: str
    index: int
    name: str
    uses: str = ""
    command: str = ""
    # ok | may-fail | would-fail | bad-input | not-implemented | run | other-action
    verdict: str = ""
    detail: str = ""
    unresolved: list[str] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a path that may be missing


def _workflow_hint(root: Path | None = None) -> str:
    """Name the workflows that are here, so a wrong path is fixed without a search."""
    root = root or Path.cwd()
    found = sorted(
        str(p.relative_to(root))
        for folder in (".github/workflows", "examples/workflows")
        for p in (root / folder).glob("*.y*ml")
    )
    if not found:
        return "pass the path of a workflow file, e.g. .github/workflows/train.yml"
    more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
    return "pass the path of a workflow file; here: " + ", ".join(found[:5]) + more


def _load_workflow(path: Path) -> dict[str, Any]:
    import yaml

    if not path.is_file():
        what = "is a folder, not a workflow file" if path.is_dir() else "not found"
        raise InputError(f"workflow file {path} {what}", hint=_workflow_hint())
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(
            f"workflow {path} is not UTF-8 text (byte {exc.start} cannot be decoded)",
            hint="save the workflow as UTF-8 (GitHub reads workflows as UTF-8)",
        ) from None
    except OSError as exc:
        raise InputError(
            f"cannot read workflow {path}: {exc.strerror or type(exc).__name__}",
            hint="check the path and its permissions",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(
            f"workflow {path} is not valid YAML{where}",
            hint="fix the YAML (actionlint shows the exact spot)",
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        raise InputError(
            f"workflow {path} has no 'jobs:' mapping",
            hint="point dry-run at a GitHub Actions workflow file; for GitLab CI, run the job "
            "with GPUCI_DRY_RUN=true (every gpuci command then plans only)",
        )
    return data


ROOT = "."  # the all-in-one action at the repository root


def classify_uses(uses: str) -> tuple[str, Command | None] | None:
    """(action folder, its command) for a gpu-ci ``uses:``; None for someone else's action.

    The command is None for the root all-in-one action (several commands, see
    :mod:`gpuci.commands.all_in_one`) and for an ``actions/...`` folder we don't have.
    """
    uses = uses.strip()
    for pattern in (_REMOTE_SUB, _LOCAL_SUB):
        match = pattern.match(uses)
        if match:
            found = command_for_action(match.group("folder"))
            return match.group("folder"), found[1] if found else None
    if _ROOT.match(uses):
        return ROOT, None
    return None


Call = tuple[str, Command, dict[str, str]]  # (full command name, command, its with: values)


def _calls_for(folder: str, cmd: Command | None, given: dict[str, str]) -> list[Call]:
    """Turn one step's ``with:`` into the command calls its action makes.

    Raises InputError naming the input when the step can't be mapped (unknown input, bad
    dispatch value), which the caller reports as this step's bad input.
    """
    from gpuci.commands import all_in_one, iter_leaf_commands

    if folder == ROOT:
        leaves = dict(iter_leaf_commands())
        inputs_of = {part.command: leaves[part.command].inputs for part in all_in_one.PARTS}
        known = {s.name for s in all_in_one.SWITCHES} | {
            part.public(spec.name) for part in all_in_one.PARTS for spec in inputs_of[part.command]
        }
        _reject_unknown(given, known, "the all-in-one action")
        return [
            (name, leaves[name], values)
            for name, values in all_in_one.split_inputs(given, inputs_of)
        ]
    if cmd is None:
        raise InputError(
            f"'{folder}' is not a gpu-ci action",
            hint="use one of the folders listed in actions/README.md",
        )
    full_name = next((n for n, c in iter_leaf_commands() if c is cmd), cmd.name)
    if cmd.dispatch:
        choice = given.get(cmd.dispatch, "")
        subs = {sub.name: sub for sub in cmd.subcommands}
        if choice not in subs:
            raise InputError(
                f"input '{cmd.dispatch}' is '{choice}', not one of: {', '.join(subs)}",
                hint=f"set {cmd.dispatch} to one of them",
            )
        cmd, full_name = subs[choice], f"{cmd.name} {choice}"
        given = {k: v for k, v in given.items() if k != cmd.dispatch and k != "action"}
    _reject_unknown(given, {spec.name for spec in cmd.inputs}, full_name)
    return [(full_name, cmd, given)]


def _reject_unknown(given: dict[str, str], known: set[str], what: str) -> None:
    unknown = sorted(set(given) - known)
    if unknown:
        raise InputError(
            f"unknown input(s) {', '.join(unknown)} for {what}; known: {', '.join(sorted(known))}",
            hint="fix the input names",
        )


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _literal_env(*scopes: Any) -> dict[str, str]:
    env: dict[str, str] = {}
    for scope in scopes:
        if isinstance(scope, dict):
            for key, value in scope.items():
                text = _literal(value)
                if not _EXPR.search(text):
                    env[str(key)] = text
    return env


def _runtime_env(*scopes: Any) -> list[str]:
    """Names whose ``env:`` value is an expression this machine does not provide itself."""
    return sorted(
        f"env {key}"
        for scope in scopes
        if isinstance(scope, dict)
        for key, value in scope.items()
        if _EXPR.search(_literal(value)) and not os.environ.get(str(key))
    )


def _plan_step(
    job: str,
    steps: list[Any],
    index: int,
    env: dict[str, str],
    rt: Runtime,
    runtime_env: list[str] | None = None,
) -> StepPlan:
    step: dict[str, Any] = steps[index - 1]
    uses = str(step.get("uses", "") or "")
    name = str(
        step.get("name") or uses or (str(step.get("run", "")).strip().splitlines() or [""])[0]
    )
    plan = StepPlan(job=job, index=index, name=name, uses=uses)
    if not uses:
        plan.verdict, plan.detail = "run", "a plain run: step (not judged)"
        return plan
    classified = classify_uses(uses)
    if classified is None:
        plan.verdict, plan.detail = "other-action", "not a gpu-ci action (not judged)"
        return plan
    with_ = step.get("with") or {}
    if not isinstance(with_, dict):
        plan.verdict, plan.detail = "bad-input", "'with:' is not a mapping"
        return plan
    given = {str(k): _literal(v) for k, v in with_.items()}
    plan.unresolved = sorted(k for k, v in given.items() if _EXPR.search(v))
    plan.unresolved += runtime_env or []
    dispatch = classified[1].dispatch if classified[1] else None
    if dispatch and dispatch in plan.unresolved:
        plan.verdict = "ok"
        plan.detail = f"'{dispatch}' is set at run time: plan not evaluated"
        return plan
    try:
        calls = _calls_for(classified[0], classified[1], given)
    except InputError as exc:
        plan.verdict, plan.detail = "bad-input", exc.message
        return plan
    plan.command = " + ".join(full for full, _, _ in calls)
    inner_env = {k: v for k, v in os.environ.items() if not k.startswith("INPUT_")}
    inner_env.update(env)
    for full_name, cmd, values in calls:
        plan.results.append(_plan_command(full_name, cmd, values, inner_env, rt))
    codes = [r.exit_code for r in plan.results]
    if ExitCode.BAD_INPUT in codes:
        plan.verdict = "bad-input"
    elif any(r.report.get("not_implemented") for r in plan.results):
        plan.verdict = "not-implemented"
    elif any(
        c != ExitCode.OK or r.report.get("verdict") == "fail"
        for c, r in zip(codes, plan.results, strict=True)
    ):
        plan.verdict = "would-fail"
    else:
        plan.verdict = "ok"
    plan.detail = "; ".join(f"{r.command}: {r.headline or 'ok'}" for r in plan.results)
    missing = _missing_paths(steps, index, calls)
    plan.warnings = [f"path '{m.path}' may be missing: {m.reason}" for m in missing]
    if plan.warnings:
        if plan.verdict == "ok":
            plan.verdict = "may-fail"
        plan.detail = "; ".join([plan.detail, *plan.warnings])
    return plan


def _missing_paths(steps: list[Any], index: int, calls: list[Call]) -> list[Any]:
    """For a save: the paths that no earlier step surely makes (see gpuci.path_origins)."""
    from gpuci.path_origins import missing_paths

    paths = [
        line
        for name, _, values in calls
        if name == "cache-weights save"
        for line in values.get("path", "").splitlines()
    ]
    if not paths:
        return []
    dict_steps = [s if isinstance(s, dict) else {} for s in steps]
    return missing_paths(dict_steps, index - 1, paths, Path.cwd())


def _plan_command(
    full_name: str,
    cmd: Command,
    given: dict[str, str],
    env: dict[str, str],
    rt: Runtime,
) -> Result:
    from gpuci.commands.dispatch import run_command

    unresolved = {k for k, v in given.items() if _EXPR.search(v)}
    if cmd.target is None:
        result = Result(command=full_name, headline="not implemented in this version of gpu-ci")
        result.report["not_implemented"] = True
        return result
    flags: dict[str, str | None] = {k: v for k, v in given.items() if k not in unresolved}
    missing = [
        s.name for s in cmd.inputs if s.required and s.default is None and s.name in unresolved
    ]
    if missing:
        result = Result(
            command=full_name,
            headline=f"needs run-time value(s) for {', '.join(missing)}: plan not evaluated",
        )
        return result
    inner = Runtime(
        env,
        dry_run=True,
        stdout=rt.stderr if rt.platform == "json" else rt.stdout,
        stderr=rt.stderr,
    )
    inner.platform = "terminal" if rt.platform == "json" else rt.platform
    result = run_command(cmd, full_name, flags, inner)
    if result.exit_code == ExitCode.BAD_INPUT and unresolved and _literals_parse(cmd, flags, inner):
        # The literal inputs are fine, but the command refused to go on without the values the
        # workflow provides at run time (a restore whose key is an expression: key or manifest
        # is needed): no verdict, as for a required input.
        names = ", ".join(sorted(unresolved))
        return Result(
            command=full_name,
            headline=f"needs run-time value(s) for {names}: plan not evaluated "
            f"(without them: {result.headline})",
        )
    return result


def _literals_parse(cmd: Command, flags: dict[str, str | None], rt: Runtime) -> bool:
    """Whether the inputs written literally in the workflow parse on their own."""
    from gpuci.inputs import resolve

    try:
        resolve(cmd.inputs, flags, rt.environ, on_secret=rt.mask)
    except InputError:
        return False
    return True


def run(values: dict[str, Any], rt: Runtime) -> Result:
    path = Path(values["workflow"])
    workflow = _load_workflow(path)
    jobs: dict[str, Any] = workflow["jobs"]
    wanted = values.get("job")
    if wanted and wanted not in jobs:
        raise InputError(
            f"job '{wanted}' not in {path}", hint=f"use one of: {', '.join(map(str, jobs))}"
        )
    plans: list[StepPlan] = []
    for job_id, job in jobs.items():
        if (wanted and job_id != wanted) or not isinstance(job, dict):
            continue
        for name, leg_job in _legs(str(job_id), job, rt):
            steps = leg_job.get("steps") or []
            runs_on = leg_job.get("runs-on", "")
            with rt.group(f"job {name} (runs-on: {_literal(runs_on) or '?'})"):
                for index, step in enumerate(steps, start=1):
                    if not isinstance(step, dict):
                        continue
                    scopes = (workflow.get("env"), leg_job.get("env"), step.get("env"))
                    plan = _plan_step(
                        name, steps, index, _literal_env(*scopes), rt, _runtime_env(*scopes)
                    )
                    plans.append(plan)
                    _log_plan(plan, rt)
    return _result(path, plans, wanted, rt)


def _legs(job_id: str, job: dict[str, Any], rt: Runtime) -> list[tuple[str, dict[str, Any]]]:
    """(name, job with the leg's matrix values put in) for each leg of the job's matrix."""
    from gpuci import matrix

    strategy = job.get("strategy")
    legs = matrix.expand(strategy.get("matrix") if isinstance(strategy, dict) else None)
    if legs is None:
        rt.log(f"job {job_id}: its matrix is built at run time; judged once, matrix unresolved")
        return [(job_id, job)]
    if legs == [{}]:
        return [(job_id, job)]
    return [(f"{job_id} ({matrix.label(leg)})", _put_leg(job, leg)) for leg in legs]


def _put_leg(value: Any, leg: dict[str, Any]) -> Any:
    from gpuci import matrix

    if isinstance(value, str):
        return matrix.substitute(value, leg)
    if isinstance(value, list):
        return [_put_leg(v, leg) for v in value]
    if isinstance(value, dict):
        return {k: _put_leg(v, leg) for k, v in value.items()}
    return value


def _log_plan(plan: StepPlan, rt: Runtime) -> None:
    marks = {
        "ok": "ok",
        "may-fail": "MAY FAIL",
        "would-fail": "would fail here",
        "bad-input": "BAD INPUT",
        "not-implemented": "not implemented",
        "run": "run",
        "other-action": "other",
    }
    rt.log(f"  step {plan.index}: {plan.name} [{marks[plan.verdict]}]")
    if plan.verdict in ("run", "other-action"):
        return
    if plan.unresolved:
        rt.log(
            f"    unresolved at plan time (set by the workflow at run time): "
            f"{', '.join(plan.unresolved)}"
        )
    if not plan.results:
        rt.log(f"    {plan.detail}")
    for result in plan.results:
        rt.log(f"    {result.command}: {result.headline or 'ok'}")
        for note in result.annotations:
            if note.message != result.headline:
                rt.log(f"      {note.level}: {note.message}")
        for key, value in result.outputs.items():
            text = format_output(value)
            if text not in ("", "0") and "\n" not in text and len(text) < 200:
                rt.log(f"      {key} = {text}")
    for warning in plan.warnings:
        rt.log(f"    warning: {warning}")


def _result(path: Path, plans: list[StepPlan], job: str | None, rt: Runtime) -> Result:
    judged = [p for p in plans if p.verdict not in ("run", "other-action")]
    bad = [p for p in judged if p.verdict == "bad-input"]
    failing = [p for p in judged if p.verdict == "would-fail"]
    risky = [p for p in judged if p.warnings]
    result = Result(command="dry-run")
    if rt.platform != "terminal":  # on a terminal the per-step log above says it all
        rows = [(p.job, p.index, p.name, p.command, p.verdict, p.detail) for p in judged]
        result.summary.append(
            f"### gpu-ci dry run of `{path}`\n\n"
            + markdown_table(["job", "step", "name", "command", "verdict", "detail"], rows)
        )
    result.report = {
        "workflow": str(path),
        "job": job,
        "steps": [
            {
                "job": p.job,
                "index": p.index,
                "name": p.name,
                "uses": p.uses,
                "command": p.command,
                "verdict": p.verdict,
                "detail": p.detail,
                "unresolved": p.unresolved,
                "warnings": p.warnings,
                "plans": [
                    {
                        "command": r.command,
                        "exit_code": int(r.exit_code),
                        "headline": r.headline,
                        "outputs": {k: format_output(v) for k, v in r.outputs.items()},
                        "report": r.report,
                    }
                    for r in p.results
                ],
            }
            for p in plans
        ],
    }
    result.outputs = {
        "steps": len(judged),
        "bad-input": len(bad),
        "would-fail": len(failing),
        "may-fail": len(risky),
    }
    for p in risky:
        for warning in p.warnings:
            result.warning(f"job {p.job}, step {p.index} ({p.name}): {warning}", "gpu-ci dry run")
    if not judged:
        result.headline = f"no gpu-ci steps found in {path}"
        result.warning(result.headline)
    elif bad:
        result.exit_code = ExitCode.BAD_INPUT
        for p in bad:
            result.error(
                f"job {p.job}, step {p.index} ({p.name}): {p.detail}", "gpu-ci dry run: bad input"
            )
        result.headline = (
            f"{len(bad)} of {len(judged)} gpu-ci step(s) have bad input; "
            "fix them before paying for a GPU"
        )
    else:
        result.headline = f"plan is valid: {len(judged)} gpu-ci step(s) checked"
        if failing:
            result.headline += (
                f"; {len(failing)} would fail on this machine ("
                + ", ".join(f"{p.job} step {p.index}" for p in failing)
                + "; expected where this machine is not the runner)"
            )
        if risky:
            result.headline += f"; {len(risky)} may fail at run time (a path may be missing)"
    return result
