"""When a new pod is ready: RUNNING according to the API, then (optionally) a 2xx health URL;
for a runner pod, its runner online.

A runner pod that GitHub refuses (a deprecated version, a registration error) ends itself; the
job it was made for would then wait in the queue until GitHub drops it after 24 hours. So after
the pod is RUNNING, ``up`` polls both sides until the platform lists the runner ``online`` (or
busy, or already gone: a quick job may be over), and a refused runner fails the start job, not
train. The pod's start script writes a refusal into the pod's name (``... refused: GitHub
refused runner 2.x: ...``, gpuci.pods._runners.boot), which is what this wait prints; a pod that
ends without saying why is one line too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from gpuci import httpclients, settings
from gpuci.errors import InfraError, InputError
from gpuci.forges._rest import Forbidden
from gpuci.httpclients import origin
from gpuci.pods._lifecycle.common import URL_SAFE_ID
from gpuci.pods._runners.registry import Request
from gpuci.pods._runpod.client import RunPodClient
from gpuci.pods._runpod.clock import Clock
from gpuci.redact import excerpt
from gpuci.runtime import Runtime


def poll_s(rt: Runtime) -> float:
    """Seconds between polls of a new pod (GPUCI_PODS_POLL_S; InputError when not a number)."""
    return settings.PODS_POLL_S.number(rt.environ)


def wait_running(
    client: RunPodClient, clock: Clock, pod_id: str, deadline: float, rt: Runtime
) -> dict[str, Any]:
    """Until the pod is RUNNING; by ``deadline`` (the job's timeout), each poll's retries
    (a 429's ``Retry-After``) included."""
    last = ""
    while True:
        pod = client.get_pod(pod_id, deadline)
        status = (pod or {}).get("status", "TERMINATED")
        if status != last:
            rt.log(f"{pod_id}: {status}")
            last = status
        if status == "RUNNING" and pod is not None:
            return pod
        if status in ("EXITED", "ERROR", "TERMINATED"):
            raise InfraError(
                f"pod {pod_id} became {status} before RUNNING",
                hint="check the image and command in the pod's logs; the pod was terminated",
            )
        if clock.now() >= deadline:
            raise InfraError(
                f"pod {pod_id} still {status} at the timeout",
                hint="raise timeout or pick a GPU type with more stock",
            )
        clock.sleep(poll_s(rt))


def health_url(raw: str, pod: dict[str, Any], url: str) -> str:
    """The health URL for this pod: ``{pod_id}`` filled in, a path joined to the pod's URL."""
    if not URL_SAFE_ID.fullmatch(str(pod.get("id"))):
        raise InfraError(
            f"RunPod answered a pod id no URL can hold: {excerpt(str(pod.get('id')), 80)!r}",
            hint="check RUNPOD_API_URL points at RunPod's REST API v2",
        )
    text = raw.strip().replace("{pod_id}", pod["id"])
    if text.startswith("/"):
        if not url:
            raise InputError(
                f"health-url {raw} is a path but the pod exposes no http port",
                hint="add e.g. 8000/http to ports or give a full URL",
            )
        return url + text
    return text


#: Redirects a health check follows, each on the health URL's own origin.
HEALTH_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def wait_healthy(url: str, clock: Clock, deadline: float, rt: Runtime) -> None:
    """Until ``url`` answers 2xx; every attempt, headers and redirects included, ends by
    ``deadline`` (the job's timeout): httpx's timeouts bound each read only, so a server
    trickling its answer held a billing pod past the timeout."""
    last = "the timeout passed before it was asked"
    with httpclients.new_client(timeout=10.0, agent="pods-health") as http:
        while (left := deadline - clock.now()) > 0:
            try:
                with httpclients.deadline(httpclients.Deadline.after(left)):
                    healthy, last = _ask(http, url)
            except httpx.HTTPError as exc:
                healthy, last = False, type(exc).__name__
            if healthy:
                rt.log(f"healthy: {url} answered {last}")
                return
            clock.sleep(min(poll_s(rt), max(0.0, deadline - clock.now())))
    raise InfraError(
        f"health URL {url} did not answer 2xx before the timeout ({last})",
        hint="raise timeout (large models load slowly) or check the server's logs",
    )


def _ask(http: httpx.Client, url: str) -> tuple[bool, str]:
    """One health check: (2xx?, what it answered). Status and headers only, the body is never
    read (a 2xx whose body trickles or never ends is healthy at once); a redirect is followed
    on ``url``'s own origin only (no credential goes, but a pod's server does not choose
    where the runner sends requests)."""
    current = httpx.URL(url)
    for _hop in range(HEALTH_REDIRECTS + 1):
        with http.stream("GET", current) as response:
            status, location = response.status_code, response.headers.get("Location")
        if response.is_success:
            return True, f"HTTP {status}"
        if status not in _REDIRECTS or not location:
            return False, f"HTTP {status}"
        try:
            target = current.join(location)
        except (httpx.InvalidURL, ValueError):  # ValueError: a UnicodeError of a host name
            return False, f"HTTP {status} to a Location that is no URL (not followed)"
        if origin(target) != origin(current):
            return False, f"HTTP {status} to another origin (not followed)"
        current = target
    return False, f"more than {HEALTH_REDIRECTS} redirects"


REFUSED = " refused: "
ONLINE = ("online", "active")  # GitHub says online; GitLab online (older: active)


def refusal(pod: Mapping[str, Any] | None) -> str:
    """The refusal a runner pod wrote into its name, or ""."""
    name = str((pod or {}).get("name") or "")
    _, found, why = name.partition(REFUSED)
    return excerpt(why, 300) if found else ""


def wait_online(
    client: RunPodClient,
    clock: Clock,
    pod_id: str,
    runner: Request,
    deadline: float,
    rt: Runtime,
) -> str:
    """Until the runner is online: its status; a refusal, an ended pod or the timeout raise."""
    reg = runner.registration
    if reg is None or reg.runner_id is None:
        return "unknown"
    hint = (
        "see docs/runners.md (runner versions): pin a release GitHub accepts with "
        "runner-version/runner-sha256, or use an image with a current runner"
    )
    with runner.target.client() as api:
        last = ""
        while True:
            pod = client.get_pod(pod_id, deadline)
            why = refusal(pod)
            if why:
                raise InfraError(why, hint=hint)
            status = (pod or {}).get("status", "TERMINATED")
            if status in ("EXITED", "ERROR", "TERMINATED"):
                raise InfraError(
                    f"runner pod {pod_id} became {status} before runner {reg.name} came online",
                    hint="check the pod's logs (RunPod console); the runner was deleted",
                )
            try:
                state = api.status(reg.runner_id)
            except Forbidden:  # a GitLab token with create_runner only may not read runners
                rt.log(
                    f"warning: this token cannot read runner {reg.name}'s status (GitLab: "
                    "give it read_api or api): not waiting for it to come online"
                )
                return "unknown"
            if state != last:
                rt.log(f"runner {reg.name}: {state or 'gone'}")
                last = state or ""
            if state is None:
                return "gone"  # its one job is already over, or it was deleted
            if state in ONLINE or state == "busy":
                return state
            if clock.now() >= deadline:
                raise InfraError(
                    f"runner {reg.name} not online at the timeout (GitHub/GitLab says {state})",
                    hint="check the pod's logs; raise timeout for a large image",
                )
            clock.sleep(poll_s(rt))
