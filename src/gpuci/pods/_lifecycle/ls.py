"""``pods ls``: gpu-ci pods with owner, GPU, cost per hour and expiry."""

from __future__ import annotations

import math

from gpuci import settings
from gpuci.pods._lifecycle.common import open_client, pod_url, tagged_pods
from gpuci.pods._runpod.client import API_KEY_ENV
from gpuci.pods._runpod.clock import SYSTEM, Clock
from gpuci.pods._runpod.naming import PodTag
from gpuci.pods.options import LsInputs
from gpuci.runtime import Result, Runtime, markdown_table, probes_allowed
from gpuci.units import utc_iso


def ls(inp: LsInputs, rt: Runtime, clock: Clock = SYSTEM) -> Result:
    """List gpu-ci pods (``all`` for every pod) with owner, GPU, cost and expiry.

    A dry run calls nothing: it says what would be listed. With ``--probe`` (and a key) it
    lists for real (one GET /v2/pods), as listing only reads.
    """
    if rt.dry_run and not (settings.RUNPOD_API_KEY.is_set(rt.environ) and probes_allowed(rt)):
        result = Result(
            command="pods ls",
            headline="would list the gpu-ci pods (one GET /v2/pods at run time; no network "
            f"used: --probe with {API_KEY_ENV} set lists them now)",
        )
        result.report["probe"] = False
        result.outputs = {"count": 0, "pod-ids": ""}
        return result
    with open_client(rt, clock) as client:
        pods = client.list_pods()
    now = clock.now()
    rows = tagged_pods(pods, inp.owner, inp.all)
    result = Result(command="pods ls", headline=f"{len(rows)} pod(s)")
    result.summary = [
        "### RunPod pods\n\n"
        + markdown_table(
            ["pod", "status", "GPU", "USD/h", "owner", "expires", "run"],
            [
                [
                    p["id"],
                    p.get("status", "?"),
                    (p.get("gpu") or {}).get("id", "cpu"),
                    f"{float(p.get('cost') or 0):.2f}",
                    t.owner if t else "-",
                    _fmt_expiry(t, now),
                    t.run_url if t else "-",
                ]
                for p, t in rows
            ],
        )
    ]
    result.outputs = {"count": len(rows), "pod-ids": ",".join(p["id"] for p, _ in rows)}
    result.report = {
        "pods": [
            {
                "id": p["id"],
                "status": p.get("status"),
                "gpu": (p.get("gpu") or {}).get("id"),
                "cost_per_hr": p.get("cost"),
                "owner": t.owner if t else None,
                "run_url": t.run_url if t else None,
                "expires_at": utc_iso(t.expires_at) if t and not math.isnan(t.expires_at) else None,
                "url": pod_url(p, rt.environ),
            }
            for p, t in rows
        ]
    }
    return result


def _fmt_expiry(tag: PodTag | None, now: float) -> str:
    if tag is None or math.isnan(tag.expires_at):
        return "-"
    left = tag.expires_at - now
    return f"{utc_iso(tag.expires_at)} ({'in ' if left >= 0 else ''}{abs(left) / 60:.0f}m" + (
        ")" if left >= 0 else " ago)"
    )
