"""Which earlier step of a job makes a path a save step needs, and whether it always runs.

A save whose ``path`` nothing before it creates fails at run time (``path ... does not exist``,
exit 2), and a plan made on a laptop can't see that from the save alone: the path is simply
"not there yet". So ``dry-run`` looks back through the job for a step that would make it:

- a ``run:`` step whose script, or its own ``env``, names the path or something under it
  (``--out data/x.npz``, ``mkdir -p baseline``, ``HF_HUB_CACHE: ~/.cache/hub`` for a download);
- a step whose ``with:`` names it (``retry-fetch`` ``dest``, a restore's ``populate`` with that
  ``path``, another action's ``path``); a plain restore doesn't count: on a miss it makes
  nothing, and a miss is when a save runs;
- the checkout itself, when the path exists here.

A maker counts only when it runs whenever the save does: no ``if:``, or the save's own
``if:``. Otherwise the path "may be missing", and the report names the conditional steps. The
look is textual, so it errs towards "made" (a script that names a path may only read it);
globs and ``${{ }}`` paths are not judged. An absolute or ``~`` path (``~/.cache/huggingface/hub``,
``/tmp/x``) is judged like a relative one, except that its being on *this* machine proves
nothing about the runner's (a relative path that exists here is in the checkout); a script
naming it as ``$HOME/...`` makes it too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci.dryrun._expressions import EMBEDDED

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


def _spellings(path: str) -> list[str]:
    """How a script may name the path: ``~/x`` is also ``$HOME/x`` and ``${HOME}/x``."""
    if path.startswith("~/"):
        rest = path[2:]
        return [path, f"$HOME/{rest}", f"${{HOME}}/{rest}", f'"$HOME"/{rest}']
    return [path]


def _mentions(text: str, path: str) -> bool:
    names = "|".join(re.escape(p) for p in _spellings(path))
    pattern = r"(?<![\w.~/-])(?:\./)?(?:" + names + r")(?=$|[/\s\"'`;|&)<>,])"
    return re.search(pattern, text, re.M) is not None


def _makes(step: dict[str, Any], path: str) -> bool:
    run = step.get("run")
    if isinstance(run, str):
        # the script, or its own env naming the folder (HF_HOME=~/.cache/hf: a download there)
        env = step.get("env")
        named = [str(v).strip().rstrip("/") for v in env.values()] if isinstance(env, dict) else []
        inside = any(s.startswith(f"{v}/") for v in named if v for s in _spellings(path))
        return inside or any(_mentions(text, path) for text in [run, *named])
    with_ = step.get("with")
    if not isinstance(with_, dict):
        return False
    uses = str(step.get("uses") or "")
    is_restore = "/cache-weights" in uses and "/save" not in uses
    if is_restore and not with_.get("populate"):
        return False  # on a miss a restore makes nothing
    return any(_mentions(str(value), path) for value in with_.values())


def judgeable(path: str) -> bool:
    """A path the look can judge: written out, not a glob, and not another user's ``~name``."""
    return bool(path) and not (
        EMBEDDED.search(path)
        or _GLOB.search(path)
        or (path.startswith("~") and path != "~" and not path.startswith("~/"))
    )


def missing_paths(
    steps: Sequence[dict[str, Any]], index: int, paths: Sequence[str], root: Path
) -> list[Missing]:
    """The entries of ``paths`` that steps[:index] may not make, for steps[index] (a save)."""
    own = _condition(steps[index])
    found: list[Missing] = []
    for raw in paths:
        path = raw.strip().removeprefix("./").rstrip("/") or raw.strip()
        # os.path.exists: False, not OSError, for a name too long or a link it may not read
        if not judgeable(path) or (not path.startswith(("/", "~")) and os.path.exists(root / path)):
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
