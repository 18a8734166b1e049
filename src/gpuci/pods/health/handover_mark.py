"""The pod's side of the verdict channel: write the verdict into this pod's own name.

Run inside the pod by the smoke gate (``python3 -m gpuci.pods.health.handover mark NAME``) with what
RunPod gives every pod: its id (``RUNPOD_POD_ID``) and its pod-scoped key
(``RUNPOD_API_KEY``). ``PATCH /v2/pods/{id}`` with ``{"name": NAME}``, under one
:class:`~gpuci.retry.RetryPolicy`: 429 waits its ``Retry-After``, 5xx and network failures
back off, so one bad answer no longer costs a healthy pod (``up`` would wait out its timeout
and terminate it). A refusal (401/403: the key may not rename its pod) is one line in the
pod's log and exit :data:`REFUSED`; the gate's fallback is in :mod:`gpuci.pods.health.handover`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gpuci import settings
from gpuci.retry import RetryPolicy, parse_retry_after

REFUSED = 4
DEFAULT_API_URL = "https://api.runpod.io"


class _Again(Exception):
    def __init__(self, why: str, retry_after: float | None = None) -> None:
        super().__init__(why)
        self.retry_after = retry_after


def policy(environ: Mapping[str, str]) -> RetryPolicy:
    """Six tries over about a minute; ``GPUCI_HANDOVER_RETRY_S`` scales the first wait."""
    try:
        initial = float(settings.HANDOVER_RETRY_S.value(environ))
    except ValueError:
        initial = 1.0
    return RetryPolicy(attempts=6, initial=initial, max_wait=30 * initial, jitter="additive")


def mark(name: str, environ: Mapping[str, str]) -> int:
    """PATCH this pod's name: 0 done, :data:`REFUSED` when the key may not, 3 otherwise."""
    import httpx

    from gpuci import httpclients

    pod, key = settings.RUNPOD_POD_ID.value(environ), settings.RUNPOD_API_KEY.value(environ)
    if not pod or not key or not name:
        print("gpu-ci: cannot write the verdict: RUNPOD_POD_ID or RUNPOD_API_KEY is not set")
        return 3
    base = settings.RUNPOD_API_URL_ON_POD.value(environ).rstrip("/")

    def once(client: httpx.Client) -> int:
        try:
            response = client.patch(f"{base}/v2/pods/{pod}", json={"name": name})
        except httpx.TransportError as exc:
            raise _Again(type(exc).__name__) from None
        code = response.status_code
        if code == 429 or code >= 500:
            raise _Again(f"HTTP {code}", parse_retry_after(response.headers.get("Retry-After")))
        return code

    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpclients.new_client(timeout=30.0, agent="handover", headers=headers) as client:
            code = policy(environ).retrying(_Again)(once, client)
    except _Again as exc:
        print(f"gpu-ci: could not write the verdict into pod {pod}'s name: {exc} (retried)")
        return 3
    if code in (401, 403):
        print(
            f"gpu-ci: RunPod refused this pod's key renaming pod {pod} (HTTP {code}): the "
            "verdict cannot travel in its name; on a hardware failure the pod stops itself "
            "and up reads that stop as the verdict"
        )
        return REFUSED
    if code >= 300:
        print(f"gpu-ci: RunPod answered HTTP {code} to the pod's rename: verdict not written")
        return 3
    return 0


if __name__ == "__main__":  # pragma: no cover - run through gpuci.pods.health.handover
    import sys

    raise SystemExit(mark(sys.argv[1] if len(sys.argv) > 1 else "", os.environ))
