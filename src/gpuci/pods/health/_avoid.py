"""Keep ``up`` off data centres whose GPUs failed gpu-smoke recently (the health record).

RunPod's v2 API names no machine in a pod and offers no machine exclusion on create: the
finest unit placement can steer is the data centre (``dataCenterIds``). So a hardware
verdict recorded from a pod (``data_center``, from ``RUNPOD_DC_ID``) in the last
``avoid-failed-days`` removes that data centre from every candidate; a candidate left with
none is refused, with the reason in the summary. A candidate with no data centres (the
scheduler chooses) cannot be steered: one warning says so. An unreadable record is one
warning too (a store outage must not keep CI from its GPU); a malformed store URL is exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuci.errors import InfraError
from gpuci.gpu import _health_record as gpu_health
from gpuci.pods._runpod import plan
from gpuci.pods.options import UpInputs
from gpuci.runtime import Runtime


@dataclass
class Avoided:
    """What the health record changed: the candidates left and why others went."""

    candidates: list[plan.Candidate]
    refused: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # data centre -> reason
    warnings: list[str] = field(default_factory=list)


def _reasons(failures: list[dict[str, Any]]) -> dict[str, str]:
    """Per data centre, the newest failure: GPU, UUID, checks, date."""
    out: dict[str, tuple[str, str]] = {}
    for item in failures:
        dc = str(item.get("data_center") or "")
        if not dc:
            continue
        at = str(item.get("at") or "")
        if dc in out and out[dc][0] >= at:
            continue
        checks = ", ".join(str(c) for c in item.get("failed_checks") or []) or "?"
        out[dc] = (at, f"GPU {item.get('uuid') or '?'} failed {checks} at {at}")
    return {dc: why for dc, (_, why) in out.items()}


def avoid_failed(inp: UpInputs, rt: Runtime, cands: list[plan.Candidate], now: float) -> Avoided:
    """The candidates minus data centres with a hardware failure in the last N days."""
    days = float(inp.avoid_failed_days)
    url = gpu_health.store_url(inp.health_store, rt.environ)
    if days <= 0 or not url:
        return Avoided(list(cands))
    skipped: list[str] = []
    try:
        failures = gpu_health.recent_failures(
            url, rt.environ, now - days * 86400, rt, warn=skipped.append
        )
    except (InfraError, OSError) as exc:  # a store outage must not stop CI from getting a GPU
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        return Avoided(
            list(cands),
            warnings=[f"GPU health record not read, no data centre avoided: {text}"],
        )
    failed = _reasons(failures)
    if not failed:
        return Avoided(list(cands), warnings=skipped)
    out = Avoided([], failed=failed, warnings=skipped)
    for cand in cands:
        if not cand.data_centers:
            out.candidates.append(cand)
            out.warnings.append(
                f"{cand.label()}: the scheduler chooses the data centre, so the GPU health "
                f"record cannot keep it off {', '.join(sorted(failed))}; pass data-centers"
            )
            continue
        kept = tuple(dc for dc in cand.data_centers if dc not in failed)
        for dc in cand.data_centers:
            if dc in failed:
                rt.log(f"health: skip {cand.gpu_id} in {dc}: {failed[dc]}")
        if kept:
            out.candidates.append(plan.Candidate(cand.gpu_id, kept))
        else:
            out.refused.append(
                {
                    "candidate": cand.label(),
                    "reason": "hardware failure in the GPU health record in the last "
                    f"{days:g} day(s): " + "; ".join(failed[dc] for dc in cand.data_centers),
                }
            )
    return out
