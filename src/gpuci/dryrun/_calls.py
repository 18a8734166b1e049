"""One gpu-ci step's command calls planned in dry-run mode, and what their results mean.

Each call runs the very command the action runs (``run_command``), with ``--dry-run``, the
workflow's literal and evaluated inputs, and the step's env. An input known only at run time is
left out; if the command cannot plan without it, the result is "not evaluated", never a verdict.
A call that would have to ask a server (a store or ledger on the network) is not made unless
``--probe`` allows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuci import settings
from gpuci.commands import Command
from gpuci.dryrun._expressions import EMBEDDED
from gpuci.dryrun._workflow import Call
from gpuci.errors import ExitCode, InputError
from gpuci.runtime import Result, Runtime

RUNPOD_KEY = settings.RUNPOD_API_KEY.name


# Commands whose plan reads a store: (command prefix, input, its setting, what, what --probe does)
_STORES = (
    ("cache-weights", "store", settings.STORE, "the store", "look the key up"),
    ("pods ", "ledger", settings.PODS_LEDGER, "the pods ledger", "read it"),
)


def network_needed(full_name: str, values: Mapping[str, str], env: Mapping[str, str]) -> str:
    """Why this command's plan would have to ask a server ('' when it plans offline)."""
    from gpuci.redact import redact_url

    for prefix, name, setting, what, probe in _STORES:
        if not full_name.startswith(prefix):
            continue
        url = (values.get(name) or setting.value(env)).strip()
        if "://" in url and not url.lower().startswith("file:"):
            return f"{what} {redact_url(url)} is on the network; --probe lets the plan {probe}"
    return ""


def verdict(results: list[Result]) -> str:
    codes = [r.exit_code for r in results]
    if ExitCode.BAD_INPUT in codes:
        return "bad-input"
    if any(r.report.get("not_implemented") for r in results):
        return "not-implemented"
    if any(
        c != ExitCode.OK or r.report.get("verdict") == "fail"
        for c, r in zip(codes, results, strict=True)
    ):
        return "would-fail"
    if any(r.report.get("not_evaluated") for r in results):
        return "not-evaluated"
    return "ok"


def missing_paths_of(
    steps: list[Any], number: int, calls: list[Call], workspace: Path
) -> list[Any]:
    """For a save: the paths that no earlier step surely makes (see :mod:`._path_origins`)."""
    from gpuci.dryrun._path_origins import missing_paths

    paths = [
        line
        for name, _, values in calls
        if name == "cache-weights save"
        for line in values.get("path", "").splitlines()
    ]
    if not paths:
        return []
    dict_steps = [s if isinstance(s, dict) else {} for s in steps]
    return missing_paths(dict_steps, number - 1, paths, workspace)


def plan_command(
    full_name: str,
    cmd: Command,
    given: dict[str, str],
    why: Mapping[str, str],
    env: dict[str, str],
    rt: Runtime,
    present: set[str] | frozenset[str] = frozenset(),
) -> Result:
    """The command's dry run on the inputs known here. An input only the run knows is left
    out; the plan is then "not evaluated" (never ok), unless that input is a secret the user
    said exists (``--secret``): its presence is all a plan may know of it."""
    from gpuci.commands._dispatch import run_command

    unresolved = {k for k, v in given.items() if EMBEDDED.search(v) or k in why}
    if cmd.target is None:
        result = Result(command=full_name, headline="not implemented in this version of gpu-ci")
        result.report["not_implemented"] = True
        return result
    flags: dict[str, str | None] = {k: v for k, v in given.items() if k not in unresolved}
    missing = [
        s.name for s in cmd.inputs if s.required and s.default is None and s.name in unresolved
    ]
    if missing:
        return _not_evaluated(full_name, missing, why, "")
    inner = Runtime(
        env,
        dry_run=True,
        stdout=rt.stderr,  # stdout carries the dry run's own result only
        stderr=rt.stderr,
    )
    inner.platform = "terminal" if rt.platform == "json" else rt.platform
    result = run_command(cmd, full_name, flags, inner)
    if result.exit_code == ExitCode.BAD_INPUT and unresolved and _literals_parse(cmd, flags, inner):
        # The literal inputs are fine, but the command refused to go on without the values the
        # workflow provides at run time (a restore whose key is an expression: key or manifest
        # is needed): no verdict, as for a required input.
        return _not_evaluated(full_name, sorted(unresolved), why, result.headline)
    if unresolved and result.exit_code == ExitCode.OK:
        # Planned without some inputs: what it says may change once they are known.
        result.report["unresolved"] = sorted(unresolved)
        secret = {s.name for s in cmd.inputs if s.secret}
        blocking = sorted(k for k in unresolved if not (k in present and k in secret))
        if blocking:
            waits = ", ".join(f"{n} ({why[n]})" if n in why else n for n in blocking)
            result.report["not_evaluated"] = f"needs run-time value(s) for {waits}"
            result.headline = (
                f"needs run-time value(s) for {waits}: planned without them: {result.headline}"
            )
    return result


def _not_evaluated(
    full_name: str, names: list[str], why: Mapping[str, str], without: str
) -> Result:
    waits = ", ".join(f"{n} ({why[n]})" if n in why else n for n in names)
    headline = f"needs run-time value(s) for {waits}: plan not evaluated"
    if without:
        headline += f" (without them: {without})"
    result = Result(command=full_name, headline=headline)
    result.report["not_evaluated"] = f"needs run-time value(s) for {waits}"
    return result


def _literals_parse(cmd: Command, flags: dict[str, str | None], rt: Runtime) -> bool:
    """Whether the inputs written literally in the workflow parse on their own."""
    from gpuci.inputs import resolve

    try:
        resolve(cmd.inputs, flags, rt.environ, on_secret=rt.mask)
    except InputError:
        return False
    return True
