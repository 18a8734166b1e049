"""Reading a workflow: the file, its gpu-ci ``uses:``, and the command calls each step makes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuci import untrusted_json
from gpuci.commands import Command, command_for_action
from gpuci.errors import InputError
from gpuci.redact import clip

MAX_QUOTED = 40  # characters of a with: value a bad-input line quotes back

# owner/repo/actions/<name>@ref, ./actions/<name>, and the root all-in-one action.
_REMOTE_SUB = re.compile(r"^[\w.-]+/[\w.-]+/(?P<folder>actions/[\w./-]+?)/?@[\w./-]+$")
_LOCAL_SUB = re.compile(r"^\./(?P<folder>actions/[\w./-]+?)/?$")
_ROOT = re.compile(r"^(?:[\w.-]+/gpu-ci@[\w./-]+|\./?)$")


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


def load_workflow(path: Path) -> dict[str, Any]:
    if not path.is_file():
        what = "is a folder, not a workflow file" if path.is_dir() else "not found"
        raise InputError(f"workflow file {path} {what}", hint=_workflow_hint())
    data = read_yaml(path, "workflow")
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
    :mod:`gpuci.commands._all_in_one`) and for an ``actions/...`` folder we don't have.
    """
    uses = uses.strip()
    for pattern in (_REMOTE_SUB, _LOCAL_SUB):
        match = pattern.match(uses)
        if match:
            found = command_for_action(match.group("folder"))
            if found is None and pattern is _LOCAL_SUB:
                return None  # the user's own ./actions/<name>: a local action, read as such
            return match.group("folder"), found[1] if found else None
    if _ROOT.match(uses):
        return ROOT, None
    return None


Call = tuple[str, Command, dict[str, str]]  # (full command name, command, its with: values)


def calls_for(folder: str, cmd: Command | None, given: dict[str, str]) -> list[Call]:
    """Turn one step's ``with:`` into the command calls its action makes.

    Raises InputError naming the input when the step can't be mapped (unknown input, bad
    dispatch value), which the caller reports as this step's bad input.
    """
    from gpuci.commands import _all_in_one as all_in_one
    from gpuci.commands import iter_leaf_commands

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
                f"input '{cmd.dispatch}' is '{clip(choice, MAX_QUOTED)}', not one of: "
                f"{', '.join(subs)}",
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


MAX_FILE_BYTES = 1 << 20  # a workflow or action.yml is a few KiB; a bigger one is not one


def read_yaml(path: Path, what: str) -> Any:
    """A workflow or action file (a PR writes them): read bounded, then parsed."""
    import yaml

    from gpuci import untrusted_yaml as _yaml

    text = untrusted_json.read_input(
        path, what, "point at a workflow or action file, saved as UTF-8", MAX_FILE_BYTES
    )
    try:
        return _yaml.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        if isinstance(exc, _yaml.Refused):
            raise InputError(f"{what} {path} {exc.problem}{where}", hint=exc.hint) from None
        raise InputError(
            f"{what} {path} is not valid YAML{where}",
            hint="fix the YAML (actionlint shows the exact spot)",
        ) from None


def local_target(workspace: Path, uses: str) -> Path | None:
    """The file a ``./path`` ``uses:`` names inside the workspace; None when it leaves it."""
    root = workspace.resolve()
    target = (root / uses.strip()).resolve()
    if target != root and root not in target.parents:
        return None
    return target


def load_local_action(workspace: Path, uses: str) -> tuple[Path, dict[str, Any]] | None:
    """(folder, action.yml) of a local action ``uses: ./path``; None when there is none."""
    folder = local_target(workspace, uses)
    if folder is None:
        return None
    for name in ("action.yml", "action.yaml"):
        path = folder / name
        if path.is_file():
            data = read_yaml(path, "action")
            return (folder, data) if isinstance(data, dict) else None
    return None


def load_local_workflow(workspace: Path, uses: str) -> tuple[Path, dict[str, Any]] | None:
    """(path, workflow) of a local reusable workflow ``uses: ./.github/workflows/x.yml``."""
    path = local_target(workspace, uses.split("@", 1)[0])
    if path is None or not path.is_file():
        return None
    data = read_yaml(path, "reusable workflow")
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        return None
    return path, data


_REMOTE_WORKFLOW = re.compile(
    r"^(?P<repo>[\w.-]+/[\w.-]+)/(?P<path>\.github/workflows/[\w./-]+\.ya?ml)@[\w./-]+$"
)


def own_workflow(uses: str, repository: Any) -> str | None:
    """``./<path>`` when ``uses`` names a workflow of this very repository by its full name
    (``org/repo/.github/workflows/x.yml@main`` in org/repo): it is read from the checkout."""
    match = _REMOTE_WORKFLOW.match(uses.strip())
    if match is None or not isinstance(repository, str):
        return None
    if match.group("repo").casefold() != repository.casefold():
        return None
    return f"./{match.group('path')}"


def triggers(workflow: Mapping[Any, Any]) -> Any:
    """The workflow's ``on:`` block (YAML 1.1 reads a bare ``on`` key as the boolean True)."""
    return workflow.get("on", workflow.get(True))


def trigger_mapping(workflow: Mapping[Any, Any], event: str, key: str) -> dict[Any, Any] | None:
    """``on.<event>.<key>`` (a dispatch's or a call's ``inputs``, a call's ``outputs``); None
    when the workflow does not declare it as a mapping."""
    on = triggers(workflow)
    spec = on.get(event) if isinstance(on, dict) else None
    found = spec.get(key) if isinstance(spec, dict) else None
    return found if isinstance(found, dict) else None


def mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a mapping, else an empty one (a workflow's shapes are untrusted)."""
    return value if isinstance(value, dict) else {}
