"""``dry-run``: read a workflow as the runner will run it, and judge its gpu-ci steps here.

The point is to learn, before paying for a GPU minute, that a job would fail: a malformed
input, a cache key that would miss, a GPU requirement no runner meets. The walk follows the
runner (:mod:`._planner`): ``if:`` conditions with GitHub's expression semantics
(:mod:`gpuci.dryrun._expressions`), ``env`` at workflow, job and step level, the ``github`` and
``runner`` contexts as far as this checkout tells them (:mod:`._contexts`), a literal matrix leg
by leg, local composite actions and reusable workflows. What only the run knows (secrets,
``vars``, a ``run:`` step's outputs) is never guessed: a step waiting for it is "not
evaluated", never "ok". A check that fails *here* (no GPU on a laptop) is reported, not fatal:
only bad input fails the whole run (exit 2).

No network by default: every command's dry run plans without asking a server; ``--probe``
(or ``GPUCI_PROBE=true``) lets read-only probes through (a HEAD per download, a pod listing).

Public: the names in ``__all__``; every module here is internal (``_``-named) and may change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuci.commands._dry_run import DryRunInputs
from gpuci.dryrun._workflow import ROOT, classify_uses, load_workflow, trigger_mapping
from gpuci.errors import InputError
from gpuci.runtime import Result, Runtime

__all__ = ["ROOT", "DryRunInputs", "classify_uses", "run"]


def run(inp: DryRunInputs, rt: Runtime) -> Result:
    """Plan every gpu-ci step of ``inp.workflow`` here; a step that would fail is in the Result.

    Raises InputError for an unreadable or malformed workflow and for a job it does not have.
    """
    from gpuci.dryrun._contexts import (
        Event,
        base_contexts,
        github_context,
        triggered_by,
        workspace_of,
    )
    from gpuci.dryrun._given import load_payload, secrets_context, vars_context
    from gpuci.dryrun._planner import Planner
    from gpuci.dryrun._report import result
    from gpuci.runtime import probes_allowed

    path = Path(inp.workflow)
    workflow = load_workflow(path)
    jobs: dict[str, Any] = workflow["jobs"]
    wanted = inp.job or None
    if wanted and wanted not in jobs:
        raise InputError(
            f"job '{wanted}' not in {path}", hint=f"use one of: {', '.join(map(str, jobs))}"
        )
    payload = load_payload(inp.event_payload) if inp.event_payload else None
    event = Event.of(inp.event, inp.ref, workflow)
    workspace = workspace_of(path)
    defaults = _dispatch_defaults(workflow)
    contexts = base_contexts(github_context(event, workspace, payload, defaults))
    contexts["vars"] = vars_context(inp.var, inp.vars_file)
    contexts["secrets"] = secrets_context(inp.secret)
    contexts["inputs"] = _event_inputs(workflow, event.name, payload)
    notes = []
    others = triggered_by(workflow, event.name)
    if others is not None:
        runs_on = ", ".join(others) or "no event"
        notes.append(
            f"{path} does not run on {event.name} (it runs on: {runs_on}); "
            f"planned as if it did: pass --event with one of them"
        )
    probe = probes_allowed(rt)  # --probe, or GPUCI_PROBE=true
    rt.log(
        f"planning {path} for a {event.name} to {event.ref} in {workspace}"
        + ("; read-only probes allowed (--probe)" if probe else "; no network (--probe to ask)")
    )
    planner = Planner(rt, workspace, contexts, probe=probe, source=path)
    planner.workflow(workflow, wanted)
    notes += planner.notes  # e.g. a job's if: that is a string, as GitHub reads it
    return result(path, planner.plans, wanted, rt, probe, notes, planner.transcript)


def _dispatch_defaults(workflow: dict[str, Any]) -> dict[str, str]:
    """A dispatch's inputs as ``github.event.inputs`` holds them with the form untouched: each
    declared default as text (an input without one is empty)."""
    from gpuci.dryrun._values import text_of

    declared = trigger_mapping(workflow, "workflow_dispatch", "inputs") or {}
    return {
        str(name): text_of(value.get("default")) if isinstance(value, dict) else ""
        for name, value in declared.items()
    }


def _event_inputs(workflow: dict[str, Any], event: str, payload: dict[str, Any] | None) -> Any:
    """``inputs``: a dispatch's declared inputs (the payload's ``inputs``, else the defaults,
    as a dispatch with the form untouched), typed as declared; nothing for other events."""
    from gpuci.dryrun._expressions import Partial
    from gpuci.dryrun._jobs import inputs_context, nothing_failed

    declared = trigger_mapping(workflow, event, "inputs")
    if event not in ("workflow_dispatch", "workflow_call") or declared is None:
        return {}
    given = payload.get("inputs") if payload is not None else None
    if isinstance(given, dict):
        return inputs_context(declared, given, {}, nothing_failed, typed=True)
    defaults = {
        str(name): value
        for name, value in declared.items()
        if isinstance(value, dict) and value.get("default") is not None
    }
    known = inputs_context(defaults, {}, {}, nothing_failed, typed=True)
    return Partial("inputs", known)
