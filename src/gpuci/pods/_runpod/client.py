"""A small httpx client for RunPod's REST API v2 with the spec's retry table as one policy.

The createPod documentation tells callers what each failure means, and this module encodes it
once (:data:`RETRY_POLICY`): ``422`` is a contract violation and is never retried; ``400`` and
``403`` reject this candidate only (the caller tries its next GPU type); ``402`` stops everything;
``429`` waits ``Retry-After`` seconds and ``5xx`` and transport errors back off exponentially,
both retrying the same request. The API key is masked by the caller's runtime the moment it
is read and never appears in a message.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from gpuci import httpclients, settings, untrusted_json
from gpuci.errors import CheckFailed, InfraError, InputError
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.redact import excerpt, json_kind, redact_url
from gpuci.retry import RetryPolicy, parse_retry_after

if TYPE_CHECKING:
    from tenacity import Retrying

DEFAULT_API_URL = "https://api.runpod.io"
API_KEY_ENV = settings.RUNPOD_API_KEY.name
API_URL_ENV = settings.RUNPOD_API_URL.name
MAX_RETRY_AFTER_S = 300.0
# The most of one answer read: a listing of a thousand pods with their env is a few MiB.
MAX_ANSWER = untrusted_json.MAX_BYTES
T = TypeVar("T")


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
    any transport failure is: a create's retry looks for its pod by name first."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=0.0)


class CandidateRejected(RunPodError):
    """400 or 403 on create: this GPU type / data centre cannot be placed; try the next one."""


class NotFound(RunPodError):
    """404: the pod is gone (``down`` treats this as success)."""


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


#: The retry table from the createPod docs, declared once and used for every request: 429 waits
#: its ``Retry-After`` (at most MAX_RETRY_AFTER_S), 5xx and transport errors back off from 1 s,
#: doubling, up to 30 s, plus up to 1 s of jitter; ``from_env`` takes the attempts from the
#: job's GPUCI_PODS_MAX_ATTEMPTS.
RETRY_POLICY = RetryPolicy(
    attempts=int(settings.PODS_MAX_ATTEMPTS.default),
    initial=1.0,
    max_wait=30.0,
    jitter="additive",
    retry_after_cap=MAX_RETRY_AFTER_S,
)
#: What a cleanup after a cancel may spend on one call: quick retries, a short Retry-After.
CLEANUP_POLICY = RetryPolicy(
    attempts=2, initial=0.2, max_wait=0.2, jitter="none", retry_after_cap=0.2
)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    return parse_retry_after(headers.get("Retry-After"), cap=MAX_RETRY_AFTER_S)


def _sent_env(body: Any) -> frozenset[str]:
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


# ----- the shapes we read from answers: a wrong one is one line, exit 3, never a crash --------
# This client is the one reader of RunPod's answers, so every field the pods code goes on to
# read is checked here, once, against a table: its JSON type and, for a nested object or an
# array of objects, the fields of each. Absent or null passes unless the field is required.
_NUMBER = (int, float)


@dataclasses.dataclass(frozen=True)
class _Field:
    """What one field of an answer must hold, and how to say so when it does not."""

    holds: Callable[[Any], bool]
    must_be: str
    required: bool = False
    fields: Mapping[str, _Field] | None = None  # the nested object's (or each item's) fields


def _kind(value: Any, kinds: type | tuple[type, ...]) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)


def _objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _strings_by_name(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


_STRING = _Field(lambda v: _kind(v, str), "a string")
_ID = _Field(lambda v: _kind(v, str), "a string", required=True)
# Money (a price, a pod's cost, a billed amount): a negative one would lower an owner's
# spending below what they spent, so it is as wrong as text (finite: the JSON parse's check).
_AMOUNT = _Field(lambda v: _kind(v, _NUMBER) and 0 <= v < math.inf, "a non-negative number")
_ARRAY = _Field(lambda v: isinstance(v, list), "an array")


def _object(fields: Mapping[str, _Field] | None = None) -> _Field:
    return _Field(lambda v: isinstance(v, dict), "an object", fields=fields)


def _array_of(fields: Mapping[str, _Field]) -> _Field:
    return _Field(_objects, "an array of objects", fields=fields)


_POD_SHAPE: dict[str, _Field] = {
    "id": _ID,
    "name": _STRING,
    "status": _STRING,
    "gpu": _object({"id": _STRING}),
    "ports": _ARRAY,
    "env": _Field(_strings_by_name, "an object of strings"),
    "cost": _AMOUNT,
    "dataCenterId": _STRING,
}
_GPU_TYPE_SHAPE: dict[str, _Field] = {
    "id": _ID,
    # the per-GPU list price of each pod cloud (``price.secure``, ``price.community``)
    "price": _object({"secure": _AMOUNT, "community": _AMOUNT}),
    "dataCenters": _array_of({"id": _ID, "availability": _STRING}),
}
_BILLING_SHAPE: dict[str, _Field] = {"podId": _ID, "totalAmount": _AMOUNT}


def _shape_error(what: str, found: str) -> RunPodError:
    return RunPodError(
        f"{what}: RunPod API answered {found}",
        hint="check RUNPOD_API_URL points at RunPod's REST API v2; retry if RunPod is degraded",
    )


def _json(response: httpx.Response, what: str) -> Any:
    """The answer's JSON through :mod:`gpuci.untrusted_json` (nesting, numbers, UTF-8)."""
    body = response.content
    if not body or body.isspace():  # said as such: "not valid JSON (Expecting value)" hides it
        raise _shape_error(what, f"HTTP {response.status_code} with an empty body, no JSON")
    try:
        return untrusted_json.loads(body, finite=True)
    except untrusted_json.Unusable as exc:
        raise _shape_error(
            what, f"no usable JSON ({exc}; HTTP {response.status_code}, {len(body):,} bytes)"
        ) from None


def _seen(value: Any) -> str:
    """A wrong value as a message names it: a number as itself, anything else by its kind."""
    if value is None:
        return "missing"
    return f"the number {value!r}" if _kind(value, _NUMBER) else f"a JSON {json_kind(value)}"


def _check(found: dict[str, Any], shape: Mapping[str, _Field], what: str, noun: str) -> None:
    """Every field of ``shape`` in ``found`` as the table says (paths like ``gpu.id``)."""
    pending: list[tuple[str, dict[str, Any], Mapping[str, _Field]]] = [("", found, shape)]
    while pending:
        path, item, fields = pending.pop()
        for name, field in fields.items():
            value = item.get(name)
            if value is None and not field.required:
                continue
            if value is None or not field.holds(value):
                where = f"{path}{name}"
                raise _shape_error(
                    what, f"{noun} whose '{where}' is {_seen(value)}, not {field.must_be}"
                )
            if field.fields is not None:
                inner = value if isinstance(value, list) else [value]
                pending.extend((f"{path}{name}.", i, field.fields) for i in inner)


def _pod(found: Any, what: str) -> dict[str, Any]:
    """A pod object whose fields, where present, have the types the lifecycle reads."""
    if not isinstance(found, dict) or not _kind(found.get("id"), str):
        raise _shape_error(what, "something other than a pod (an object with a string id)")
    _check(found, _POD_SHAPE, what, "a pod")
    return found


def _list_in(
    found: Any, field: str, what: str, shape: Mapping[str, _Field], noun: str
) -> list[dict[str, Any]]:
    """``found[field]``: a list of objects, each of ``shape``."""
    if not isinstance(found, dict):
        raise _shape_error(what, f"a JSON {json_kind(found)} where an object belongs")
    items = found.get(field)
    if not isinstance(items, list) or not _objects(items):
        raise _shape_error(
            what, f"an object whose '{field}' is {_seen(items)}, not an array of objects"
        )
    for item in items:
        _check(item, shape, what, noun)
    return items


def _named(pod: Mapping[str, Any], name: str) -> bool:
    found = str(pod.get("name") or "")
    return found == name or found.startswith(name + " smoke ")


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


def api_url(environ: Mapping[str, str]) -> str:
    return settings.RUNPOD_API_URL.value(environ)


def api_key_from_env(environ: Mapping[str, str], mask: Callable[[str], None]) -> str:
    key = settings.RUNPOD_API_KEY.value(environ)
    if not key:
        raise InputError(
            f"{API_KEY_ENV} is not set",
            hint=f"store the RunPod key as a secret / masked CI variable named {API_KEY_ENV}",
        )
    mask(key)
    return key


class RunPodClient:
    """One method per operation we use; every request goes through :data:`RETRY_POLICY`."""

    def __init__(
        self,
        api_key: str,
        base_url: str = DEFAULT_API_URL,
        *,
        clock: Clock = SYSTEM,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        read_only: bool = False,
        policy: RetryPolicy | None = None,
    ) -> None:
        self._clock = clock
        self._read_only = read_only
        self._key, self._transport = api_key, transport
        self._policy = policy or RETRY_POLICY
        self._body_seconds = 3 * timeout  # one answer, headers to body, however it trickles
        self._http = httpclients.new_client(
            timeout=timeout,
            agent="pods",
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            transport=transport,
        )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        mask: Callable[[str], None],
        clock: Clock = SYSTEM,
        read_only: bool = False,
    ) -> RunPodClient:
        key = api_key_from_env(environ, mask)
        attempts = settings.PODS_MAX_ATTEMPTS.integer(environ, minimum=1)
        policy = dataclasses.replace(RETRY_POLICY, attempts=attempts)
        return cls(key, api_url(environ), clock=clock, read_only=read_only, policy=policy)

    def bounded(self, timeout: float) -> RunPodClient:
        """A client for cleanup after a cancel: each request at most ``timeout`` seconds,
        :data:`CLEANUP_POLICY`'s few quick retries (a cancelled job has seconds, not minutes)."""
        return RunPodClient(
            self._key,
            str(self._http.base_url),
            clock=self._clock,
            timeout=timeout,
            transport=self._transport,
            read_only=self._read_only,
            policy=CLEANUP_POLICY,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RunPodClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- plumbing -----------------------------------------------------------------------
    def _retrying(self, deadline: float | None = None) -> Retrying:
        """The policy's controller on this client's clock. ``deadline`` (the phase's end, as
        ``clock.now()`` reads it: ``timeout``, ``placement-timeout``) bounds its waits: one
        that would end past it (a 300 s ``Retry-After``) is not started, the last failure is
        raised instead, so no request outlasts the phase that made it."""
        left = None if deadline is None else deadline - self._clock.now()
        return self._policy.retrying(
            Transient, deadline=left, sleep=self._wait, now=self._clock.now
        )

    def _wait(self, seconds: float) -> None:
        if seconds > 0:  # an :class:`Unanswered` retry waits for nothing
            self._clock.sleep(seconds)

    def _retried(self, attempt: Callable[[int], T], deadline: float | None) -> T:
        """``attempt(n)`` (n from 1) under :meth:`_retrying`; a failure whose retry the
        deadline cut short, not the attempts running out, says so and names the fix."""
        tried = 0
        try:
            for state in self._retrying(deadline):
                with state:
                    tried = state.retry_state.attempt_number
                    return attempt(tried)
        except Transient as exc:
            if deadline is None or tried >= self._policy.attempts:
                raise
            cut = Transient(f"{exc.message}; its retry would end past the timeout", exc.status)
            cut.hint = "retry later, or raise timeout / placement-timeout: RunPod is throttling"
            raise cut from None
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def _once(self, method: str, path: str, what: str, **kwargs: Any) -> httpx.Response:
        if self._read_only and method != "GET":
            # A dry run's client: a bug that would change something fails here, unsent.
            raise RuntimeError(f"dry run: refusing to send {method} {path} ({what})")
        try:
            response = self._bounded(method, path, what, **kwargs)
        except httpx.TransportError as exc:
            raise Transient(f"{what}: {type(exc).__name__}: {excerpt(str(exc), 200)}") from None
        except httpx.InvalidURL as exc:
            raise InputError(
                f"{what}: {API_URL_ENV} is not a usable URL ({redact_url(str(self._http.base_url))}"
                f": {excerpt(str(exc), 120)})",
                hint=f"set {API_URL_ENV} to e.g. {DEFAULT_API_URL}",
            ) from None
        raise_for(response, what, _sent_env(kwargs.get("json")))
        return response

    def _bounded(self, method: str, path: str, what: str, **kwargs: Any) -> httpx.Response:
        """Send, and read at most :data:`MAX_ANSWER` bytes of the answer (a server's claim of
        its length is not trusted): over it is one line, exit 3. The whole request, from the
        connect to the body's last byte, ends within its deadline (3 x the timeout)."""
        # httpcore's trace: sent on a connection it did not open, no answer's head read
        seen = {"sent": False, "fresh": False}

        def trace(event: str, _info: object) -> None:
            seen["sent"] |= event.endswith(".send_request_headers.started")
            seen["fresh"] |= ".connect_" in event or event.endswith("response_headers.complete")

        request = self._http.build_request(method, path, extensions={"trace": trace}, **kwargs)
        limit = httpclients.Deadline.after(self._body_seconds)
        try:
            return httpclients.read_bounded(self._http, request, limit, MAX_ANSWER)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if seen["fresh"] or not seen["sent"]:
                raise
            said = f"{type(exc).__name__}: {excerpt(str(exc), 200)}"
            raise Unanswered(
                f"{what}: a kept-alive connection closed unanswered ({said})"
            ) from None
        except untrusted_json.Unusable as exc:
            raise RunPodError(
                f"{what}: RunPod API answered with a body {exc}"[:300],
                hint="check RUNPOD_API_URL points at RunPod's REST API v2",
            ) from None

    def request(
        self, method: str, path: str, what: str, *, deadline: float | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One request under the retry policy, its waits ending by ``deadline`` if given."""
        return self._retried(lambda _n: self._once(method, path, what, **kwargs), deadline)

    # ----- pods ---------------------------------------------------------------------------
    def list_pods(self, deadline: float | None = None) -> list[dict[str, Any]]:
        answer = self.request("GET", "/v2/pods", "list pods", deadline=deadline)
        found = _json(answer, "list pods")
        # ListPodsResponse requires ``pods``: an answer without it (a proxy's error page with
        # 200, a wrong URL) is not "no pods", or reap and down would end nothing and exit 0.
        return [_pod(p, "list pods") for p in _list_in(found, "pods", "list pods", {}, "a pod")]

    def get_pod(self, pod_id: str, deadline: float | None = None) -> dict[str, Any] | None:
        what = f"get pod {pod_id}"
        try:
            answer = self.request("GET", f"/v2/pods/{pod_id}", what, deadline=deadline)
            return _pod(_json(answer, what), what)
        except NotFound:
            return None

    def create_pod(self, body: dict[str, Any], deadline: float | None = None) -> dict[str, Any]:
        """POST once per attempt; before a retry, look for the pod by its unique name. Every
        wait, the look-up's included, ends by ``deadline`` (the placement timeout) if given.

        A create that timed out may still have placed the pod; retrying blindly would start a
        second, forgotten one. Our names carry a nonce, so a name match is our pod.
        """
        what = f"create pod on {body.get('gpu', {}).get('id', '?')}"

        def attempt(number: int) -> dict[str, Any]:
            if number > 1:
                existing = self.find_by_name(body["name"], deadline)
                if existing is not None:
                    return existing
            return _pod(_json(self._once("POST", "/v2/pods", what, json=body), what), what)

        return self._retried(attempt, deadline)

    def find_by_name(self, name: str, deadline: float | None = None) -> dict[str, Any] | None:
        """The pod named ``name``, also after its smoke gate appended its verdict to it."""
        return next((p for p in self.list_pods(deadline) if _named(p, name)), None)

    def update_pod(self, pod_id: str, body: dict[str, Any]) -> dict[str, Any]:
        what = f"update pod {pod_id}"
        found = _json(self.request("PATCH", f"/v2/pods/{pod_id}", what, json=body), what)
        if not isinstance(found, dict):
            raise _shape_error(what, f"a JSON {json_kind(found)} where a pod belongs")
        return found

    def action(self, pod_id: str, action: str) -> dict[str, Any] | None:
        """start/stop/restart/terminate; terminate answers 204 (None)."""
        response = self.request(
            "POST", f"/v2/pods/{pod_id}/action", f"{action} pod {pod_id}", json={"action": action}
        )
        if response.status_code == 204 or not response.content:
            return None
        found = _json(response, f"{action} pod {pod_id}")
        return found if isinstance(found, dict) else None

    def delete_pod(self, pod_id: str) -> None:
        self.request("DELETE", f"/v2/pods/{pod_id}", f"terminate pod {pod_id}")

    # ----- catalog and billing ------------------------------------------------------------
    def list_gpu_types(
        self, cloud: str = "SECURE", count: int = 1, deadline: float | None = None
    ) -> list[dict[str, Any]]:
        """The catalog with each type's availability for pods of ``count`` GPUs in ``cloud``
        (availability differs by count: 8 GPUs on one machine are scarcer than 1)."""
        params = {"include": "AVAILABILITY", "product": "POD", "cloud": cloud, "count": count}
        what = "read GPU catalog"
        response = self.request("GET", "/v2/catalog/gpus", what, params=params, deadline=deadline)
        return _list_in(_json(response, what), "gpus", what, _GPU_TYPE_SHAPE, "a GPU type")

    def pod_billing(
        self, start_time: str, end_time: str, deadline: float | None = None
    ) -> list[dict[str, Any]]:
        params = {"startTime": start_time, "endTime": end_time, "bucketSize": "day"}
        what = "read pod billing"
        response = self.request("GET", "/v2/billing/pods", what, params=params, deadline=deadline)
        return _list_in(_json(response, what), "records", what, _BILLING_SHAPE, "a billing record")
