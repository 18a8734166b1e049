"""The expression contexts a plan knows before the run: ``github``, ``runner``, ``env``.

What the runner would know and this machine can tell (the event and ref asked for, the local
checkout's commit and origin, the runner's OS from its labels) is filled in; what only the run
knows (``secrets``, ``vars``, ``github.run_id``, a ``run:`` step's outputs) is an
:class:`~gpuci.dryrun._expressions.Unknown` naming itself, so a plan says what it waited for.

``github.event``: a payload is the run's, but which top-level fields it has is fixed per event
(GitHub's webhook payloads, docs.github.com/en/webhooks/webhook-events-and-payloads): a push has
no ``pull_request``, so ``!github.event.pull_request.draft`` on a push reads null and holds, as
it does at run time. Fields the planned event does carry stay unknown (a PR's labels, its draft
flag) until ``--event-payload`` gives them (:mod:`._given`).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci import settings
from gpuci.dryrun import _expressions
from gpuci.dryrun._expressions import (
    EMBEDDED,
    ExpressionError,
    Function,
    Partial,
    Status,
    Unknown,
    evaluate,
    interpolate,
)
from gpuci.dryrun._hash_files import hash_files
from gpuci.dryrun._values import text_of
from gpuci.dryrun._workflow import local_target, triggers
from gpuci.errors import InputError
from gpuci.untrusted_child import git

_REMOTE = re.compile(
    r"(?:github\.com|gitlab\.[\w.-]+|[\w.-]+)[:/](?P<repo>[\w.-]+/[\w.-]+?)(?:\.git)?/?$"
)


@dataclass(frozen=True)
class Event:
    """The event a plan assumes: its name and the ref it runs on."""

    name: str = "push"
    ref: str = "refs/heads/main"

    @classmethod
    def of(cls, name: str | None, ref: str | None, workflow: Mapping[str, Any]) -> Event:
        """``--event``/``--ref``; without ``--event``: push when the workflow runs on push,
        else the first event it names (a plan for an event that never runs it says nothing)."""
        names = _event_names(workflow)
        chosen = (name or "").strip() or ("push" if "push" in names or not names else names[0])
        ref = (ref or "").strip() or "refs/heads/main"
        if not ref.startswith("refs/"):
            ref = f"refs/heads/{ref}"
        return cls(chosen, ref)


def _event_names(workflow: Mapping[Any, Any]) -> list[str]:
    """The events the workflow's ``on:`` names, in its order."""
    on = triggers(workflow)
    return (
        [on] if isinstance(on, str) else [str(n) for n in on] if isinstance(on, list | dict) else []
    )


def workspace_of(workflow: Path) -> Path:
    """The checkout the workflow belongs to: the folder holding its ``.github/workflows``, else
    its git top level, else the current folder. Found from the path as given, never from where
    a symbolic link points: the runner reads the workflow from the checkout itself.

    Raises InputError for a workflow file that is a symbolic link leaving that checkout (its
    target would move ``hashFiles()`` and local actions to another checkout on this machine).
    """
    given = Path(os.path.abspath(workflow))
    folder = given.parent
    if folder.name == "workflows" and folder.parent.name == ".github":
        workspace = folder.parent.parent
    else:
        top = git("rev-parse", "--show-toplevel", cwd=folder)
        workspace = Path(top) if top else Path.cwd()
    inside = given.is_relative_to(workspace)  # as named; a file named elsewhere is planned too
    if inside and local_target(workspace, f"./{given.relative_to(workspace)}") is None:
        raise InputError(
            f"workflow file {workflow} is (or lies behind) a symbolic link that leaves the "
            f"checkout {workspace}",
            hint="dry-run a workflow file inside the checkout (GitHub reads it from the "
            "repository, never through a link)",
        )
    return workspace


# In every payload (some only for an organisation's or an app's repository: unknown, not null).
_COMMON = ("action", "sender", "repository", "organization", "installation", "enterprise")
_PR = (
    *("number", "pull_request", "changes", "label", "assignee", "requested_reviewer"),
    *("requested_team", "milestone", "before", "after", "reason"),
)
FIELDS: dict[str, tuple[str, ...]] = {
    "push": (
        *("ref", "before", "after", "base_ref", "created", "deleted", "forced", "compare"),
        *("commits", "head_commit", "pusher"),
    ),
    "pull_request": _PR,
    "pull_request_target": _PR,
    "pull_request_review": ("review", "pull_request", "changes"),
    "pull_request_review_comment": ("comment", "pull_request", "changes"),
    "workflow_dispatch": ("inputs", "ref", "workflow"),
    "schedule": ("schedule", "workflow"),
    "merge_group": ("merge_group",),
    "release": ("release", "changes"),
    "issue_comment": ("issue", "comment", "changes"),
    "issues": ("issue", "changes", "label", "assignee", "milestone"),
    "workflow_run": ("workflow_run", "workflow"),
    "repository_dispatch": ("branch", "client_payload"),
    "create": ("ref", "ref_type", "master_branch", "description", "pusher_type"),
    "delete": ("ref", "ref_type", "pusher_type"),
}


def event_context(
    event: str, payload: dict[str, Any] | None, dispatch_inputs: dict[str, str] | None = None
) -> Any:
    """``github.event``: the given payload (what it lacks is null), else the event's fields as
    unknowns and every other field null; an event this table lacks is unknown throughout. A
    dispatch's ``inputs`` are its declared defaults, as text (the form left untouched)."""
    if payload is not None:
        return payload
    fields = FIELDS.get(event)
    if fields is None:
        return Partial("github.event", {})
    known: dict[str, Any] = {}
    if event == "workflow_dispatch" and dispatch_inputs is not None:
        known["inputs"] = Partial("github.event.inputs", dispatch_inputs, open=frozenset())
    return Partial("github.event", known, open=frozenset(_COMMON + fields))


def github_context(
    event: Event,
    workspace: Path,
    payload: dict[str, Any] | None = None,
    dispatch_inputs: dict[str, str] | None = None,
) -> Partial:
    """``github.*`` as far as this checkout, the chosen event and its payload (if given) tell
    it; ``dispatch_inputs``: a dispatch's declared defaults, for ``github.event.inputs``."""
    known: dict[str, Any] = {
        "event_name": event.name,
        "ref": event.ref,
        "ref_name": event.ref.split("/", 2)[-1],
        "ref_type": "tag" if event.ref.startswith("refs/tags/") else "branch",
        "workspace": str(workspace),
        "server_url": "https://github.com",
        "api_url": "https://api.github.com",
        "graphql_url": "https://api.github.com/graphql",
        "action_path": "",
    }
    pull = event.name in ("pull_request", "pull_request_target")
    if not pull:
        known.update(head_ref="", base_ref="")
    elif payload is not None:
        pr = payload.get("pull_request")
        for side in ("head", "base"):
            end = pr.get(side) if isinstance(pr, dict) else None
            ref = end.get("ref") if isinstance(end, dict) else None
            if isinstance(ref, str):
                known[f"{side}_ref"] = ref
    known["event"] = event_context(event.name, payload, dispatch_inputs)
    sha = git("rev-parse", "HEAD", cwd=workspace)
    if sha and re.fullmatch(r"[0-9a-f]{40,64}", sha):
        known["sha"] = sha
    remote = git("remote", "get-url", "origin", cwd=workspace)
    match = _REMOTE.search(remote)
    if match:
        known["repository"] = match.group("repo")
        known["repository_owner"] = match.group("repo").split("/")[0]
    repo = payload.get("repository") if payload is not None else None
    if isinstance(repo, dict) and isinstance(repo.get("full_name"), str):
        # the payload names the repository the run is in, as the runner's github context does
        known["repository"] = repo["full_name"]
        known["repository_owner"] = repo["full_name"].split("/")[0]
    return Partial("github", known)


def triggered_by(workflow: Mapping[Any, Any], event: str) -> list[str] | None:
    """The events the workflow runs on when ``event`` is not one of them; None when it is."""
    names = _event_names(workflow)
    return None if event in names else names


def runner_context(runs_on: Any) -> Partial:
    """``runner.os`` from the job's labels (Linux unless they say otherwise), ``runner.temp``,
    and ``runner.environment`` where the labels tell: what the gpu-ci commands the job runs
    see as ``RUNNER_ENVIRONMENT`` (the runner-local tier is off on a GitHub-hosted one)."""
    text = runs_on_label(runs_on).lower()
    system = "Windows" if "windows" in text else "macOS" if "macos" in text else "Linux"
    temp = settings.RUNNER_TEMP.value() or str(Path(tempfile.gettempdir()) / "runner-temp")
    known = {"os": system, "temp": temp, "name": Unknown("runner.name")}
    return Partial("runner", {**known, "environment": runner_environment(runs_on)})


# GitHub's own images (docs.github.com, "GitHub-hosted runners": ubuntu-latest, ubuntu-24.04,
# ubuntu-24.04-arm, windows-2025, macos-15-xlarge, ...); a larger runner's label is its owner's
# choice and tells nothing.
_HOSTED_LABEL = re.compile(r"(ubuntu|windows|macos)-(latest|\d+(\.\d+)?)(-arm|-large|-xlarge)?")


def runner_environment(runs_on: Any) -> str | Unknown:
    """``github-hosted`` when every label of ``runs-on`` is one of GitHub's images,
    ``self-hosted`` when one is ``self-hosted``, else unknown (a group, a custom label)."""
    labels = runs_on if isinstance(runs_on, list) else [runs_on]
    names = [label.strip().lower() for label in labels if isinstance(label, str)]
    if len(names) != len(labels) or not names:
        return Unknown("runner.environment")
    if "self-hosted" in names:
        return "self-hosted"
    if all(_HOSTED_LABEL.fullmatch(name) for name in names):
        return "github-hosted"
    return Unknown("runner.environment")


def runs_on_label(runs_on: Any) -> str:
    """``runs-on`` as a person reads it: the label(s), ``group NAME``; '' when there is none."""
    if isinstance(runs_on, Unknown):
        return f"known at run time ({runs_on.why})"
    if isinstance(runs_on, list):
        return ", ".join(runs_on_label(v) for v in runs_on)
    if isinstance(runs_on, dict):
        group, labels = runs_on.get("group"), runs_on.get("labels")
        parts = [f"group {runs_on_label(group)}"] if group not in (None, "") else []
        if labels not in (None, "", []):
            parts.append(runs_on_label(labels))
        return ", ".join(parts)
    return text_of(runs_on)


def base_contexts(github: Partial) -> dict[str, Any]:
    """Every context a step's expressions may name, unknown where only the run knows it."""
    return {
        "github": github,
        "runner": runner_context(""),
        "env": {},
        "matrix": {},
        "strategy": Unknown("strategy"),
        "job": Unknown("job"),
        "steps": {},
        "needs": Unknown("needs"),
        "inputs": Unknown("inputs"),
        "secrets": Unknown("secrets"),
        "vars": Unknown("vars"),
    }


def evaluate_text(text: str, contexts: Mapping[str, Any], status: Status) -> str | Unknown:
    """A ``with:``/``env:`` value with its ``${{ }}`` put in; Unknown when only the run can."""
    if not EMBEDDED.search(text):
        return text
    try:
        return interpolate(text, contexts, status, PLAN_FUNCTIONS)
    except ExpressionError as exc:
        return Unknown(f"an expression this plan cannot evaluate ({exc})", path=False)


def evaluate_value(value: Any, contexts: Mapping[str, Any], status: Status) -> Any:
    """A YAML value with its ``${{ }}`` evaluated; a value that is one whole expression keeps
    its type (``${{ fromJSON(inputs.legs) }}`` is a list), so matrices and ``runs-on`` resolve."""
    if isinstance(value, str):
        whole = EMBEDDED.fullmatch(value.strip())
        if not whole:
            return evaluate_text(value, contexts, status)
        try:
            return evaluate(whole.group(1), contexts, status, PLAN_FUNCTIONS)
        except ExpressionError as exc:
            return Unknown(f"an expression this plan cannot evaluate ({exc})", path=False)
    if isinstance(value, list):
        return [evaluate_value(v, contexts, status) for v in value]
    if isinstance(value, dict):
        return {k: evaluate_value(v, contexts, status) for k, v in value.items()}
    return value


def layer_env(
    env: Mapping[str, str | Unknown],
    scope: Any,
    contexts: Mapping[str, Any],
    status: Status,
) -> dict[str, str | Unknown]:
    """``env`` with one more level (workflow, job, step) put over it, as GitHub does.

    GitHub evaluates one ``env:`` block within one expression budget (``MAX_TEXT`` characters,
    :mod:`gpuci.dryrun._expressions`): past it a value is left to the run, so values that each
    repeat a long one (``X1: x${{ env.BIG }}``, ``X2: ...``) cannot add up without end."""
    merged = Partial(env.name, env, env.open) if isinstance(env, Partial) else dict(env)
    size = 0
    if isinstance(scope, dict):
        for key, value in scope.items():
            found = evaluate_text(text_of(value), {**contexts, "env": merged}, status)
            size += len(found) if isinstance(found, str) else 0
            if size > _expressions.MAX_TEXT:
                why = "its env: block is larger than GitHub evaluates"
                found = Unknown(f"env.{key} ({why})", path=False)
            merged[str(key)] = found
    elif isinstance(scope, str) and EMBEDDED.search(scope):
        merged["*"] = Unknown("env (built at run time)", path=False)
    return merged


def written_env(env: Mapping[str, str | Unknown]) -> Partial:
    """``env`` once a step may have run: that step may have added names (``NAME=value`` into
    ``$GITHUB_ENV``, an action's ``core.exportVariable``), so a name no ``env:`` block declares
    is unknown, not empty, and an input taken from it is left to the run."""
    if isinstance(env, Partial):
        return env
    return Partial("env", env)


PLAN_FUNCTIONS: dict[str, Function] = {"hashfiles": hash_files}
