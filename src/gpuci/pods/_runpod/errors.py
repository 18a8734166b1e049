"""RunPod's answers as errors: the retry table's classes, and the one map onto them.

:func:`raise_for` reads an HTTP answer as the createPod docs (and podAction's, deletePod's) say
to: 429 and 5xx are :class:`Transient` (retried), 422 a contract violation, 402 a balance too
low, 401 a key refused, 400/403 a candidate rejected, 404 a pod gone, 409 an action not valid
for the pod's status. What the answer says is redacted (secrets, the env a request sent) and
cut to one line before it is shown.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

import httpx

from gpuci import settings, untrusted_json
from gpuci.errors import CheckFailed, InfraError, InputError
from gpuci.redact import excerpt
from gpuci.retry import parse_retry_after

API_KEY_ENV = settings.RUNPOD_API_KEY.name
MAX_RETRY_AFTER_S = 300.0


class RunPodError(InfraError):
    """The API answered with an error we cannot fix by retrying."""

    title = "gpu-ci: RunPod API error"

    def __init__(self, message: str, hint: str | None = None, status: int = 0, detail: str = ""):
        super().__init__(message, hint)
        self.status = status
        self.detail = detail


class Transient(RunPodError):
    """429, 5xx or a transport failure: retry the same request after a wait."""

    def __init__(self, message: str, status: int = 0, retry_after: float | None = None):
        super().__init__(message, "retry later; RunPod or the network is unhealthy", status)
        self.retry_after = retry_after


class Unanswered(Transient):
    """A reused (kept-alive) connection lost before any answer came: most often the server had
    closed it as idle while the request was on its way, so it never saw that request. Retried
    at once, with no backoff (RunPod is not unhealthy). A request the server did act on before
    the connection dropped (a front end reset mid-request) reads the same, and is retried as
    any transport failure is: a create's retry looks for its pod by name first, and an
    action's refused retry reads the pod."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=0.0)


class CandidateRejected(RunPodError):
    """400 or 403 on create: this GPU type / data centre cannot be placed; try the next one."""


class NotFound(RunPodError):
    """404: the pod is gone (a terminate takes it as done: ``RunPodClient.delete_pod``)."""


class InvalidTransition(RunPodError):
    """409: the action is not valid for the pod's current status."""


class ContractViolation(InputError):
    """422: our request does not match the contract; never retried."""

    title = "gpu-ci: RunPod rejected the request"


class InsufficientBalance(CheckFailed):
    """402: no candidate can succeed, so stop at once."""

    title = "gpu-ci: RunPod balance too low"


class Unauthorized(InputError):
    title = "gpu-ci: RunPod key refused"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    return parse_retry_after(headers.get("Retry-After"), cap=MAX_RETRY_AFTER_S)


def sent_env(body: Any) -> frozenset[str]:
    """The env values a request sends, in each form an error may echo them (as sent, as JSON
    escapes them, as Python's repr does): what a refusal says about them is redacted like a
    secret, since a plan shows none of them (their secrecy can't be told from their names)."""
    env = body.get("env") if isinstance(body, dict) else None
    values = [v for v in env.values() if isinstance(v, str)] if isinstance(env, dict) else []
    return frozenset(f for v in values for f in (v, json.dumps(v)[1:-1], repr(v)[1:-1]))


def _problem(response: httpx.Response, hidden: Collection[str] = ()) -> tuple[str, list[str]]:
    """The error's detail and its list of errors, each redacted (the registered secrets and
    ``hidden``) THEN cut to one line."""
    try:
        body = untrusted_json.loads(response.content)
    except untrusted_json.Unusable:
        return excerpt(response.text, 200, hidden), []
    if not isinstance(body, dict):
        return excerpt(str(body), 200, hidden), []
    errors = body.get("errors") or []
    errors = errors if isinstance(errors, list) else [errors]
    detail = excerpt(str(body.get("detail") or body.get("title") or ""), 200, hidden)
    return detail, [excerpt(str(e), 200, hidden) for e in errors[:10]]


def raise_for(response: httpx.Response, what: str, hidden: Collection[str] = ()) -> None:
    """Map one HTTP answer onto the retry table's classes (success returns quietly); the
    answer's text never shows ``hidden`` (what the request sent that a plan hides)."""
    status = response.status_code
    if status < 400:
        return
    detail, errors = _problem(response, hidden)
    text = f"{what}: HTTP {status}: {detail}"
    if status == 429:
        raise Transient(text, status, _retry_after(response.headers))
    if status >= 500:
        raise Transient(text, status)
    if status == 422:
        raise ContractViolation(
            f"{text}{' (' + '; '.join(errors) + ')' if errors else ''}",
            hint="fix the inputs named in the error; this request is never retried",
        )
    if status == 402:
        raise InsufficientBalance(text, hint="add credit to the RunPod account, then rerun")
    if status == 401:
        raise Unauthorized(text, hint=f"set {API_KEY_ENV} to a valid RunPod API key")
    if status in (400, 403):
        raise CandidateRejected(
            text, hint="try another GPU type or data centre", status=status, detail=detail
        )
    if status == 404:
        raise NotFound(text, hint="check the pod id", status=status, detail=detail)
    if status == 409:
        raise InvalidTransition(
            text, hint="check the pod's status with `pods ls`", status=status, detail=detail
        )
    raise RunPodError(text, hint="see the RunPod status page", status=status, detail=detail)
