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
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from gpuci import httpclients, settings, untrusted_json
from gpuci.errors import InputError
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.errors import (
    API_KEY_ENV,
    MAX_RETRY_AFTER_S,
    NotFound,
    RunPodError,
    Transient,
    Unanswered,
    raise_for,
    sent_env,
)
from gpuci.redact import excerpt, json_kind, redact_url
from gpuci.retry import RetryPolicy

if TYPE_CHECKING:
    from tenacity import Retrying

DEFAULT_API_URL = "https://api.runpod.io"
API_URL_ENV = settings.RUNPOD_API_URL.name
# The most of one answer read: a listing of a thousand pods with their env is a few MiB.
MAX_ANSWER = untrusted_json.MAX_BYTES
T = TypeVar("T")


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


#: The statuses each action leaves a pod in (terminate: gone, a 404 or TERMINATED), which a
#: refused retry reads for (restart has none: its refusal stays the error).
_LEAVES = {
    "start": ("PROVISIONING", "STARTING", "RUNNING"),
    "stop": ("EXITED",),
    "terminate": ("TERMINATED",),
}
_REFUSED = (400, 404, 409)  # what podAction and deletePod answer for a pod in another state


@dataclasses.dataclass(frozen=True)
class Acted:
    """An action done: ``pod`` as its answer gave it (None for a 204, or where a refusal read
    the pod: as read); ``already``: a refusal found the pod the action's way; ``lost``: an
    attempt's answer was lost before, so it may be the one that acted."""

    pod: dict[str, Any] | None
    already: bool = False
    lost: bool = False

    @property
    def ours(self) -> bool:
        """This call acted (its answer said so, or a lost one did): the ledger records it."""
        return self.lost or not self.already

    def said(self, done: str) -> str:
        """``done`` ("stopped"), or "already stopped" when a refusal found it so."""
        return f"already {done}" if self.already else done


def _named(pod: Mapping[str, Any], name: str) -> bool:
    found = str(pod.get("name") or "")
    return found == name or found.startswith(name + " smoke ")


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
        raise_for(response, what, sent_env(kwargs.get("json")))
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

    def action(self, pod_id: str, action: str, *, settled_ok: bool = False) -> Acted:
        """start/stop/restart (podAction), or terminate (DELETE, deletePod's equivalent), made
        idempotent: a retry RunPod refuses (409 not valid for the status, 404 gone, 400) after
        an attempt whose answer was lost (cut, its connection closed, a 5xx: it may have acted)
        reads the pod, and one the action's way (:data:`_LEAVES`) means done; otherwise the
        refusal is the error. ``settled_ok``: a first refusal is read too (``pods stop`` of a
        stopped pod, ``down`` of a gone one); without it, it stays the error."""
        what = f"{action} pod {pod_id}"
        lost = False

        def attempt(_number: int) -> Acted:
            nonlocal lost
            try:
                if action == "terminate":
                    self._once("DELETE", f"/v2/pods/{pod_id}", what)
                    return Acted(None, lost=lost)
                sent = {"action": action}
                response = self._once("POST", f"/v2/pods/{pod_id}/action", what, json=sent)
            except Transient as exc:
                lost = lost or exc.status != 429  # a 429 is refused unread: no action taken
                raise
            except RunPodError as exc:
                if exc.status in _REFUSED and (lost or settled_ok):
                    pod = None if exc.status == 404 else self.get_pod(pod_id)
                    status = "TERMINATED" if pod is None else pod.get("status")
                    if status in _LEAVES.get(action, ()):
                        return Acted(pod, already=True, lost=lost)
                raise
            if response.status_code == 204 or not response.content:
                return Acted(None, lost=lost)
            found = _json(response, what)
            return Acted(found if isinstance(found, dict) else None, lost=lost)

        return self._retried(attempt, None)

    def delete_pod(self, pod_id: str) -> Acted:
        """Terminate; one already gone (404) is done, ``already``."""
        return self.action(pod_id, "terminate", settled_ok=True)

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
