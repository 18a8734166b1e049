"""``dry-run``: read a workflow as the runner will run it, and judge its gpu-ci steps here.

The point is to learn, before paying for a GPU minute, that a job would fail: a malformed
input, a cache key that would miss, a GPU requirement no runner meets. The walk follows the
runner (:mod:`.planner`): ``if:`` conditions with GitHub's expression semantics
(:mod:`gpuci.dryrun.expressions`), ``env`` at workflow, job and step level, the ``github`` and
``runner`` contexts as far as this checkout tells them (:mod:`.contexts`), a literal matrix leg
by leg, local composite actions and reusable workflows. What only the run knows (secrets,
``vars``, a ``run:`` step's outputs) is never guessed: a step waiting for it is "not
evaluated", never "ok". A check that fails *here* (no GPU on a laptop) is reported, not fatal:
only bad input fails the whole run (exit 2).

No network by default: every command's dry run plans without asking a server; ``--probe``
(or ``GPUCI_PROBE=true``) lets read-only probes through (a HEAD per download, a pod listing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci.dryrun.workflow import ROOT, classify_uses, load_workflow, triggers
from gpuci.errors import InputError
from gpuci.runtime import Result, Runtime

__all__ = ["ROOT", "DryRunInputs", "classify_uses", "run"]


@dataclass(frozen=True)
class DryRunInputs:
    """What ``dry-run`` is given (the specs are in :mod:`gpuci.commands.dry_run`)."""

    workflow: str = ""
    job: str = ""
    event: str = ""
    ref: str = "refs/heads/main"


def run(inp: DryRunInputs, rt: Runtime) -> Result:
    """Plan every gpu-ci step of ``inp.workflow`` here; a step that would fail is in the Result.

    Raises InputError for an unreadable or malformed workflow and for a job it does not have.
    """
    from gpuci.dryrun.contexts import Event, base_contexts, github_context, workspace_of
    from gpuci.dryrun.planner import Planner
    from gpuci.dryrun.report import result
    from gpuci.probe import probes_allowed

    path = Path(inp.workflow)
    workflow = load_workflow(path)
    jobs: dict[str, Any] = workflow["jobs"]
    wanted = inp.job or None
    if wanted and wanted not in jobs:
        raise InputError(
            f"job '{wanted}' not in {path}", hint=f"use one of: {', '.join(map(str, jobs))}"
        )
    event = Event.of(inp.event, inp.ref, workflow)
    workspace = workspace_of(path)
    github = github_context(event, workspace)
    contexts = base_contexts(github)
    contexts["inputs"] = _event_inputs(workflow, event.name)
    probe = probes_allowed(rt)  # --probe, or GPUCI_PROBE=true
    rt.log(
        f"planning {path} for a {event.name} to {event.ref} in {workspace}"
        + ("; read-only probes allowed (--probe)" if probe else "; no network (--probe to ask)")
    )
    planner = Planner(rt, workspace, contexts, probe=probe)
    planner.workflow(workflow, wanted)
    return result(path, planner.plans, wanted, rt, probe)


def _event_inputs(workflow: dict[str, Any], event: str) -> Any:
    """``inputs``: a dispatch's declared defaults (as a dispatch with the form untouched),
    nothing for an event that has none."""
    from gpuci.dryrun.expressions import Partial

    on = triggers(workflow)
    spec = on.get(event) if isinstance(on, dict) else None
    declared = spec.get("inputs") if isinstance(spec, dict) else None
    if event not in ("workflow_dispatch", "workflow_call") or not isinstance(declared, dict):
        return {}
    defaults = {
        str(name): (value.get("default") if isinstance(value, dict) else None)
        for name, value in declared.items()
    }
    return Partial("inputs", {k: v for k, v in defaults.items() if v is not None})
