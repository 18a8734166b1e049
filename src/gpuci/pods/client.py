"""A small httpx client for RunPod's REST API v2 with the spec's retry table as one policy.

The createPod documentation tells callers what each failure means, and this module encodes it
once (:data:`RETRY_POLICY`): ``422`` is a contract violation and is never retried; ``400`` and
``403`` reject this candidate only (the caller tries its next GPU type); ``402`` stops everything;
``429`` waits ``Retry-After`` seconds and ``5xx`` and transport errors back off exponentially,
both retrying the same request. The API key is masked by the caller's runtime the moment it
is read and never appears in a message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from gpuci.errors import CheckFailed, InfraError, InputError
from gpuci.pods.clock import SYSTEM, Clock

DEFAULT_API_URL = "https://api.runpod.io"
API_KEY_ENV = "RUNPOD_API_KEY"
API_URL_ENV = "RUNPOD_API_URL"
MAX_RETRY_AFTER_S = 300.0
USER_AGENT = "gpuci-pods/1"


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


def _wait(state: RetryCallState) -> float:
    """``Retry-After`` for 429 (integer seconds on this API), else exponential with jitter."""
    exc = state.outcome.exception() if state.outcome else None
    if isinstance(exc, Transient) and exc.retry_after is not None:
        return min(max(exc.retry_after, 0.0), MAX_RETRY_AFTER_S)
    return _BACKOFF(state)


_BACKOFF = wait_exponential_jitter(initial=1, max=30, jitter=1)

#: The retry table from the createPod docs, declared once and used for every request.
RETRY_POLICY: dict[str, Any] = {
    "retry": retry_if_exception_type(Transient),
    "stop": stop_after_attempt(int(os.environ.get("GPUCI_PODS_MAX_ATTEMPTS", "6"))),
    "wait": _wait,
    "reraise": True,
}


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("Retry-After", "")
    try:
        return float(raw)
    except ValueError:
        return None


def _problem(response: httpx.Response) -> tuple[str, list[str]]:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200].replace("\n", " "), []
    if not isinstance(body, dict):
        return str(body)[:200], []
    errors = [str(e) for e in body.get("errors") or []]
    return str(body.get("detail") or body.get("title") or ""), errors


def raise_for(response: httpx.Response, what: str) -> None:
    """Map one HTTP answer onto the retry table's classes (success returns quietly)."""
    status = response.status_code
    if status < 400:
        return
    detail, errors = _problem(response)
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
    return environ.get(API_URL_ENV) or DEFAULT_API_URL


def api_key_from_env(environ: Mapping[str, str], mask: Callable[[str], None]) -> str:
    key = environ.get(API_KEY_ENV, "").strip()
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
    ) -> None:
        self._clock = clock
        self._read_only = read_only
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT},
            timeout=timeout,
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
        return cls(key, api_url(environ), clock=clock, read_only=read_only)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RunPodClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- plumbing -----------------------------------------------------------------------
    def _retrying(self) -> Retrying:
        return Retrying(sleep=self._clock.sleep, **RETRY_POLICY)

    def _once(self, method: str, path: str, what: str, **kwargs: Any) -> httpx.Response:
        if self._read_only and method != "GET":
            # A dry run's client: a bug that would change something fails here, unsent.
            raise RuntimeError(f"dry run: refusing to send {method} {path} ({what})")
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Transient(f"{what}: {type(exc).__name__}: {exc}") from None
        raise_for(response, what)
        return response

    def request(self, method: str, path: str, what: str, **kwargs: Any) -> httpx.Response:
        for attempt in self._retrying():
            with attempt:
                return self._once(method, path, what, **kwargs)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    # ----- pods ---------------------------------------------------------------------------
    def list_pods(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v2/pods", "list pods").json().get("pods", [])

    def get_pod(self, pod_id: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", f"/v2/pods/{pod_id}", f"get pod {pod_id}").json()
        except NotFound:
            return None

    def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST once per attempt; before a retry, look for the pod by its unique name.

        A create that timed out may still have placed the pod; retrying blindly would start a
        second, forgotten one. Our names carry a nonce, so a name match is our pod.
        """
        what = f"create pod on {body.get('gpu', {}).get('id', '?')}"
        for attempt in self._retrying():
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    existing = self.find_by_name(body["name"])
                    if existing is not None:
                        return existing
                return self._once("POST", "/v2/pods", what, json=body).json()
        raise AssertionError("unreachable")  # pragma: no cover

    def find_by_name(self, name: str) -> dict[str, Any] | None:
        return next((p for p in self.list_pods() if p.get("name") == name), None)

    def update_pod(self, pod_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"/v2/pods/{pod_id}", f"update pod {pod_id}", json=body).json()

    def action(self, pod_id: str, action: str) -> dict[str, Any] | None:
        """start/stop/restart/terminate; terminate answers 204 (None)."""
        response = self.request(
            "POST", f"/v2/pods/{pod_id}/action", f"{action} pod {pod_id}", json={"action": action}
        )
        return None if response.status_code == 204 or not response.content else response.json()

    def delete_pod(self, pod_id: str) -> None:
        self.request("DELETE", f"/v2/pods/{pod_id}", f"terminate pod {pod_id}")

    # ----- catalog and billing ------------------------------------------------------------
    def list_gpu_types(self, cloud: str = "SECURE") -> list[dict[str, Any]]:
        params = {"include": "AVAILABILITY", "product": "POD", "cloud": cloud}
        return self.request("GET", "/v2/catalog/gpus", "read GPU catalog", params=params).json()[
            "gpus"
        ]

    def pod_billing(self, start_time: str, end_time: str) -> list[dict[str, Any]]:
        params = {"startTime": start_time, "endTime": end_time, "bucketSize": "day"}
        return self.request("GET", "/v2/billing/pods", "read pod billing", params=params).json()[
            "records"
        ]
