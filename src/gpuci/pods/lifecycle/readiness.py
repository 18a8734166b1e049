"""When a new pod is ready: RUNNING according to the API, then (optionally) a 2xx health URL."""

from __future__ import annotations

from typing import Any

import httpx

from gpuci import httpclients, settings
from gpuci.errors import InfraError, InputError
from gpuci.pods.runpod.client import RunPodClient
from gpuci.pods.runpod.clock import Clock
from gpuci.runtime import Runtime


def poll_s(rt: Runtime) -> float:
    """Seconds between polls of a new pod (GPUCI_PODS_POLL_S; InputError when not a number)."""
    return settings.PODS_POLL_S.number(rt.environ)


def wait_running(
    client: RunPodClient, clock: Clock, pod_id: str, deadline: float, rt: Runtime
) -> dict[str, Any]:
    last = ""
    while True:
        pod = client.get_pod(pod_id)
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
    text = raw.strip().replace("{pod_id}", pod["id"])
    if text.startswith("/"):
        if not url:
            raise InputError(
                f"health-url {raw} is a path but the pod exposes no http port",
                hint="add e.g. 8000/http to ports or give a full URL",
            )
        return url + text
    return text


def wait_healthy(url: str, clock: Clock, deadline: float, rt: Runtime) -> None:
    last = ""
    with httpclients.new_client(timeout=10.0, agent="pods-health") as http:
        while True:
            try:
                # Followed here only: the probe carries no credential a redirect could take.
                response = http.get(url, follow_redirects=True)
                if response.is_success:
                    rt.log(f"healthy: {url} answered {response.status_code}")
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            if clock.now() >= deadline:
                raise InfraError(
                    f"health URL {url} did not answer 2xx before the timeout ({last})",
                    hint="raise timeout (large models load slowly) or check the server's logs",
                )
            clock.sleep(poll_s(rt))
