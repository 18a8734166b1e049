"""``github.event`` at plan time: the fields each event's payload carries, or the payload given.

A payload is the run's, but which top-level fields it has is fixed per event (GitHub's webhook
payloads, docs.github.com/en/webhooks/webhook-events-and-payloads): a push has no
``pull_request``, so ``!github.event.pull_request.draft`` on a push reads null and holds, as it
does at run time. Fields the planned event does carry stay unknown (a PR's labels, its draft
flag) until ``--event-payload`` gives them, as act's ``-e`` does: that JSON *is* the event, and
what it lacks is null.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuci import untrusted_json
from gpuci.dryrun._expressions import Partial

__all__ = ["MAX_PAYLOAD_BYTES", "event_context", "load_payload"]

MAX_PAYLOAD_BYTES = 4 << 20  # GitHub caps webhook payloads at 25 MB; a test event is KiBs

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


def load_payload(path: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``--event-payload``), as act's ``-e`` reads it.

    Raises InputError for a file that is missing, too large, or not a JSON object.
    """
    hint = 'pass a JSON file holding the payload, e.g. {"pull_request": {"draft": true}}'
    return untrusted_json.object_input(
        Path(path), "the event payload", hint, MAX_PAYLOAD_BYTES, finite=True
    )
