"""Run a composite action's steps the way the GitHub runner does, on this machine, offline.

What it reproduces, because our actions depend on it:
- the ``inputs`` context from ``with:`` plus the action's defaults, and NO automatic
  ``INPUT_*`` variables (composite actions don't get them: they must come through ``env:``);
- fresh ``GITHUB_OUTPUT`` / ``GITHUB_ENV`` / ``GITHUB_PATH`` / ``GITHUB_STEP_SUMMARY`` /
  ``GITHUB_STATE`` files per step, parsed after it (``NAME=value`` and the heredoc form);
  ``GITHUB_ENV`` and ``GITHUB_PATH`` carried into later steps; summaries concatenated;
- ``RUNNER_TEMP``, ``GITHUB_ACTION_PATH``, ``GITHUB_WORKSPACE``, ``GITHUB_ACTIONS=true``;
- ``${{ }}`` in ``env:``, ``run:``, ``if:`` and ``outputs.*.value`` (see gpuci.dryrun._expressions);
- ``shell: bash`` as ``bash --noprofile --norc -eo pipefail {0}``; a failing step skips the rest
  unless ``continue-on-error`` or a status function says otherwise;
- ``::add-mask::`` (later text is shown as ``***`` in :attr:`StepRun.log`) and annotations.

What it does not: ``uses:`` steps (e.g. actions/setup-python) need the network and a runner, so
they are recorded as ``skipped`` with reason ``offline`` and produce no outputs. Tests put
``GPUCI_PYTHON`` (this interpreter) in the job env so bootstrap.sh reuses it, exactly as it
does for the second gpu-ci action of a real job.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuci.dryrun._expressions import condition, evaluate, interpolate, to_text
from gpuci_testing import parse_file_command

SHELLS = {
    "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail", "{0}"],
    "sh": ["sh", "-e", "{0}"],
}
_COMMAND = re.compile(r"^::([a-z-]+)(?: ([^:]*))?::(.*)$")


class HarnessError(RuntimeError):
    """The action uses something the harness (or the runner) would reject."""


@dataclass
class Annotation:
    level: str
    message: str
    properties: dict[str, str]


@dataclass
class StepRun:
    name: str
    id: str | None
    outcome: str  # success, failure, skipped
    reason: str = ""  # why skipped: "condition" or "offline"
    exit_code: int | None = None
    stdout: str = ""  # raw, as the process wrote it (add-mask lines included)
    stderr: str = ""
    log: str = ""  # what the runner would display: commands consumed, secrets as ***
    outputs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the step's own env: after evaluation
    script: str = ""  # the run: text after ${{ }} evaluation
    annotations: list[Annotation] = field(default_factory=list)


@dataclass
class ActionRun:
    outputs: dict[str, str]
    summary: str
    steps: list[StepRun]
    env: dict[str, str]  # everything written to GITHUB_ENV
    path: list[str]
    state: dict[str, str]

    @property
    def ok(self) -> bool:
        return all(s.outcome != "failure" for s in self.steps)

    @property
    def exit_code(self) -> int:
        failed = [s for s in self.steps if s.outcome == "failure"]
        return (failed[0].exit_code or 1) if failed else 0

    @property
    def stdout(self) -> str:
        return "".join(s.stdout for s in self.steps)

    @property
    def log(self) -> str:
        return "".join(s.log for s in self.steps)

    @property
    def annotations(self) -> list[Annotation]:
        return [a for s in self.steps for a in s.annotations]

    def step(self, step_id: str) -> StepRun:
        return next(s for s in self.steps if s.id == step_id)


def _unescape(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")


def runner_view(raw: str, masks: list[str]) -> tuple[str, list[Annotation]]:
    """Consume ``::add-mask::`` and annotations the way the runner does; mask the rest."""
    shown: list[str] = []
    notes: list[Annotation] = []
    for line in raw.splitlines():
        match = _COMMAND.match(line)
        if match and match.group(1) == "add-mask":
            value = _unescape(match.group(3).replace("%25", "%"))
            masks.extend(v for v in (value, *value.splitlines()) if v)
            continue
        if match and match.group(1) in ("error", "warning", "notice"):
            props = {}
            for pair in (match.group(2) or "").split(","):
                if "=" in pair:
                    key, _, value = pair.partition("=")
                    props[key.strip()] = _unescape(value).replace("%25", "%")
            message = _unescape(match.group(3)).replace("%25", "%")
            notes.append(Annotation(match.group(1), message, props))
        for secret in sorted(masks, key=len, reverse=True):
            line = line.replace(secret, "***")
        shown.append(line)
    return "".join(f"{line}\n" for line in shown), notes


def load_action(action_dir: Path) -> dict[str, Any]:
    for name in ("action.yml", "action.yaml"):
        if (action_dir / name).exists():
            data = yaml.safe_load((action_dir / name).read_text(encoding="utf-8"))
            if data.get("runs", {}).get("using") != "composite":
                raise HarnessError(f"{action_dir}: not a composite action")
            return data
    raise HarnessError(f"{action_dir}: no action.yml")


def _text(value: Any) -> str:
    return to_text(value) if not isinstance(value, str) else value


def run_action(
    action_dir: Path,
    inputs: Mapping[str, Any] | None = None,
    *,
    job_env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    workspace: Path,
    runner_temp: Path,
    timeout: float = 60,
) -> ActionRun:
    """Run the action in ``action_dir`` with ``with:`` values ``inputs``.

    ``job_env`` is the workflow/job ``env:`` (visible as the ``env`` context and to processes);
    ``base_env`` the runner machine's environment (PATH, HOME...); ``INPUT_*`` are removed.
    """
    action_dir = action_dir.resolve()
    spec = load_action(action_dir)
    declared: dict[str, Any] = spec.get("inputs") or {}
    unknown = set(inputs or {}) - set(declared)
    if unknown:
        raise HarnessError(f"unexpected input(s) {sorted(unknown)}; valid: {sorted(declared)}")
    input_values = {name: _text((inputs or {}).get(name, "")) for name in declared}
    machine = {
        k: v
        for k, v in (os.environ if base_env is None else base_env).items()
        if not k.startswith("INPUT_")
    }
    carried_env: dict[str, str] = dict(job_env or {})
    written_env: dict[str, str] = {}
    carried_path: list[str] = []
    state: dict[str, str] = {}
    summary: list[str] = []
    steps_ctx: dict[str, dict[str, Any]] = {}
    runs: list[StepRun] = []
    failed = False
    masks: list[str] = []
    files_dir = runner_temp / "_runner_file_commands"
    files_dir.mkdir(parents=True, exist_ok=True)

    def status(name: str) -> bool:
        return {"success": not failed, "failure": failed, "always": True, "cancelled": False}[name]

    def contexts() -> dict[str, Any]:
        return {
            "inputs": input_values,
            "steps": steps_ctx,
            "env": dict(carried_env),
            "github": {
                "action_path": str(action_dir),
                "workspace": str(workspace),
                "event_name": "workflow_dispatch",
            },
            "runner": {"temp": str(runner_temp), "os": "Linux"},
        }

    for name, meta in declared.items():  # a default is evaluated by the runner, as ${{ }}
        if name not in (inputs or {}):
            default = _text((meta or {}).get("default", ""))
            input_values[name] = _text(interpolate(default, contexts(), status))

    for index, step in enumerate(spec["runs"].get("steps") or []):
        name = step.get("name") or step.get("run") or step.get("uses") or f"step {index}"
        run = StepRun(name=str(name), id=step.get("id"), outcome="skipped")
        runs.append(run)
        if run.id:
            steps_ctx[run.id] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
        if not condition(step.get("if"), contexts(), status):
            run.reason = "condition"
            continue
        if "uses" in step:
            run.reason = "offline"  # see the module docstring
            continue
        shell = step.get("shell")
        if shell not in SHELLS:
            raise HarnessError(f"step {name!r}: shell {shell!r} (composite steps need bash or sh)")
        run.env = {
            k: _text(interpolate(_text(v), contexts(), status))
            for k, v in (step.get("env") or {}).items()
        }
        run.script = interpolate(step["run"], contexts(), status)
        token = uuid.uuid4().hex
        files = {
            var: files_dir / f"{var.lower()}_{token}"
            for var in (
                "GITHUB_OUTPUT",
                "GITHUB_ENV",
                "GITHUB_PATH",
                "GITHUB_STEP_SUMMARY",
                "GITHUB_STATE",
            )
        }
        for path in files.values():
            path.touch()
        script = runner_temp / f"{token}.sh"
        script.write_text(run.script, encoding="utf-8")
        env = {
            **machine,
            **carried_env,
            **run.env,
            **{var: str(path) for var, path in files.items()},
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_ACTION_PATH": str(action_dir),
            "GITHUB_WORKSPACE": str(workspace),
            "RUNNER_TEMP": str(runner_temp),
            "RUNNER_OS": "Linux",
        }
        env["PATH"] = os.pathsep.join([*carried_path, env.get("PATH", os.defpath)])
        cwd = workspace / step["working-directory"] if step.get("working-directory") else workspace
        argv = [part.replace("{0}", str(script)) for part in SHELLS[shell]]
        try:
            proc = subprocess.run(
                argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
            run.exit_code, run.stdout, run.stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            run.exit_code = 124
            run.stdout = (
                (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            )
            run.stderr = f"harness: step timed out after {timeout} s\n"
        out_log, notes = runner_view(run.stdout, masks)
        err_log, err_notes = runner_view(run.stderr, masks)
        run.log, run.annotations = out_log + err_log, notes + err_notes
        run.outputs = parse_file_command(files["GITHUB_OUTPUT"].read_text("utf-8"), "GITHUB_OUTPUT")
        new_env = parse_file_command(files["GITHUB_ENV"].read_text("utf-8"), "GITHUB_ENV")
        carried_env.update(new_env)
        written_env.update(new_env)
        state.update(parse_file_command(files["GITHUB_STATE"].read_text("utf-8"), "GITHUB_STATE"))
        new_path = [p for p in files["GITHUB_PATH"].read_text("utf-8").splitlines() if p.strip()]
        carried_path = list(reversed(new_path)) + carried_path
        summary.append(files["GITHUB_STEP_SUMMARY"].read_text("utf-8"))
        run.outcome = "success" if run.exit_code == 0 else "failure"
        conclusion = run.outcome
        if run.outcome == "failure" and step.get("continue-on-error") in (True, "true"):
            conclusion = "success"
        elif run.outcome == "failure":
            failed = True
        if run.id:
            steps_ctx[run.id] = {
                "outputs": dict(run.outputs),
                "outcome": run.outcome,
                "conclusion": conclusion,
            }

    outputs = {
        name: to_text(
            evaluate(_strip_expression(str((meta or {}).get("value", ""))), contexts(), status)
        )
        for name, meta in (spec.get("outputs") or {}).items()
    }
    return ActionRun(
        outputs=outputs,
        summary="".join(summary),
        steps=runs,
        env=written_env,
        path=carried_path,
        state=state,
    )


def _strip_expression(value: str) -> str:
    """``outputs.x.value`` must be a single ``${{ }}``; return the expression inside it."""
    text = value.strip()
    if not (text.startswith("${{") and text.endswith("}}")):
        raise HarnessError(f"output value {value!r} is not a single ${{{{ }}}} expression")
    return text[3:-2]
