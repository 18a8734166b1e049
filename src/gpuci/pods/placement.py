"""Where ``up`` puts a pod: the budget filter, then the candidate walk with backoff.

The walk follows RunPod's createPod table: 400 and 403 move to the next candidate, 402 and
422 stop at once (raised by the client), and a round where nothing placed is retried after
15 s, 30 s, ... (at most 5 min) until ``placement-timeout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuci.errors import CheckFailed, InfraError
from gpuci.pods import cost, plan
from gpuci.pods.client import CandidateRejected, RunPodClient, api_url
from gpuci.pods.clock import Clock
from gpuci.pods.naming import PodTag
from gpuci.runtime import Runtime


def affordable(
    values: dict[str, Any],
    rt: Runtime,
    client: RunPodClient,
    clock: Clock,
    spec: plan.PodSpec,
    tag: PodTag,
    catalog: list[dict[str, Any]],
    cands: list[plan.Candidate],
) -> tuple[list[plan.Candidate], list[dict[str, Any]]]:
    """The candidates the owner can afford (and why the others were skipped); none: exit 1."""
    budget = values.get("budget-usd")
    if budget is None:
        return cands, []
    now = clock.now()
    grace = float(values.get("reap-interval") or 0)
    spend = cost.gather(client, rt.environ, float(values["budget-period"]), now, grace)
    exposure = spend.exposure(tag.owner)
    ttl = tag.expires_at - now + grace
    ok: list[plan.Candidate] = []
    refused: list[dict[str, Any]] = []
    for cand in cands:
        rate = plan.price_per_hr(catalog, cand.gpu_id, spec.cloud, spec.gpu_count)
        if rate is None:
            refused.append({"candidate": cand.label(), "reason": "no catalog price"})
            continue
        fits, projected = cost.verdict(float(budget), exposure, rate, ttl)
        if fits:
            ok.append(cand)
        else:
            refused.append(
                {"candidate": cand.label(), "rate": rate, "projected_usd": round(projected, 4)}
            )
            rt.log(f"budget: skip {cand.label()}: ${projected:.2f} projected > ${budget:.2f}")
    if not ok:
        raise CheckFailed(
            f"owner {tag.owner} would pass budget ${float(budget):.2f}: "
            f"${exposure:.2f} spent or committed, every candidate adds more",
            hint="stop or down your other pods, shorten ttl, choose a cheaper GPU, "
            "or raise budget-usd",
        )
    return ok, refused


def place(
    values: dict[str, Any],
    rt: Runtime,
    client: RunPodClient,
    clock: Clock,
    spec: plan.PodSpec,
    tag: PodTag,
    cands: Sequence[plan.Candidate],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Rounds over the candidates (400/403: next one) with backoff between rounds."""
    deadline = clock.now() + float(values.get("placement-timeout") or 0)
    attempts: list[dict[str, Any]] = []
    api = api_url(rt.environ)
    delay = 15.0
    last = ""
    while True:
        for cand in cands:
            body = plan.create_body(spec, tag, cand, api)
            try:
                pod = client.create_pod(body)
            except CandidateRejected as exc:
                last = exc.detail or exc.message
                attempts.append({"candidate": cand.label(), "status": exc.status, "detail": last})
                rt.log(f"not placed: {cand.label()}: HTTP {exc.status} {last}")
                continue
            attempts.append({"candidate": cand.label(), "status": 201, "pod": pod["id"]})
            rt.log(f"placed {pod['id']} on {cand.label()}")
            return pod, attempts
        if clock.now() + delay > deadline:
            break
        rt.log(f"no candidate placed; next round in {delay:.0f}s")
        clock.sleep(delay)
        delay = min(delay * 2, 300.0)
    raise InfraError(
        f"no candidate placed after {len(attempts)} attempt(s); last answer: {last}",
        hint="add GPU types or data centres, raise placement-timeout, or, if every "
        "candidate failed alike, fix the request the detail names",
    )
