"""Which earlier step of a job makes a path a save step needs, and whether it always runs.

A save whose ``path`` nothing before it creates fails at run time (``path ... does not exist``,
exit 2), and a plan made on a laptop can't see that from the save alone: the path is simply
"not there yet". So ``dry-run`` looks back through the job for a step that would make it:

- a ``run:`` step whose script names the path or something under it (``--out data/x.npz``,
  ``mkdir -p baseline``);
- a step whose ``with:`` names it (``retry-fetch`` ``dest``, a restore's ``populate`` with that
  ``path``, another action's ``path``); a plain restore doesn't count: on a miss it makes
  nothing, and a miss is when a save runs;
- the checkout itself, when the path exists here.

A maker counts only when it runs whenever the save does: no ``if:``, or the save's own
``if:``. Otherwise the path "may be missing", and the report names the conditional steps. The
look is textual, so it errs towards "made" (a script that names a path may only read it);
globs, absolute paths and ``${{ }}`` paths are not judged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_EXPR = re.compile(r"\$\{\{.*?\}\}", re.S)
_GLOB = re.compile(r"[*?\[\]!]")


@dataclass(frozen=True)
class Missing:
    path: str
    reason: str


def _condition(step: dict[str, Any]) -> str:
    cond = step.get("if")
    if cond is None or cond is True or str(cond).strip() in ("", "true", "${{ true }}"):
        return ""
    return " ".join(str(cond).replace("${{", "").replace("}}", "").split())


def _mentions(text: str, path: str) -> bool:
    pattern = r"(?<![\w.~/-])(?:\./)?" + re.escape(path) + r"(?=$|[/\s\"'`;|&)<>,])"
    return re.search(pattern, text, re.M) is not None


def _makes(step: dict[str, Any], path: str) -> bool:
    run = step.get("run")
    if isinstance(run, str):
        return _mentions(run, path)
    with_ = step.get("with")
    if not isinstance(with_, dict):
        return False
    uses = str(step.get("uses") or "")
    is_restore = "/cache-weights" in uses and "/save" not in uses
    if is_restore and not with_.get("populate"):
        return False  # on a miss a restore makes nothing
    return any(_mentions(str(value), path) for value in with_.values())


def judgeable(path: str) -> bool:
    return bool(path) and not (
        _EXPR.search(path) or _GLOB.search(path) or path.startswith(("/", "~"))
    )


def missing_paths(
    steps: Sequence[dict[str, Any]], index: int, paths: Sequence[str], root: Path
) -> list[Missing]:
    """The entries of ``paths`` that steps[:index] may not make, for steps[index] (a save)."""
    own = _condition(steps[index])
    found: list[Missing] = []
    for raw in paths:
        path = raw.strip().removeprefix("./").rstrip("/")
        if not judgeable(path) or (root / path).exists():
            continue
        makers = [(n, s) for n, s in enumerate(steps[:index], 1) if _makes(s, path)]
        always = [n for n, s in makers if _condition(s) in ("", own)]
        if always:
            continue
        if makers:
            names = ", ".join(f"step {n} (if: {_condition(s)})" for n, s in makers)
            found.append(Missing(path, f"only conditional steps make it: {names}"))
        else:
            found.append(Missing(path, "no step before this one makes it"))
    return found
