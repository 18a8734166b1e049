"""Where ``up`` puts a pod: the budget filter, then the candidate walk with backoff.

The walk follows RunPod's createPod table: 400 and 403 move to the next candidate, 402 and
422 stop at once (raised by the client), and a round where nothing placed is retried after
15 s, 30 s, ... (at most 5 min) until ``placement-timeout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuci.errors import CheckFailed, GpuciError, InfraError
from gpuci.pods._budgets import cost, ledger
from gpuci.pods._budgets import policy as budgets
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.client import RunPodClient, api_url
from gpuci.pods._runpod.clock import Clock
from gpuci.pods._runpod.errors import CandidateRejected
from gpuci.pods._runpod.naming import PodTag
from gpuci.pods.options import UpInputs
from gpuci.retry import RetryPolicy
from gpuci.runtime import Runtime
from gpuci.units import utc_iso


def affordable(
    decision: budgets.Decision,
    inp: UpInputs,
    rt: Runtime,
    client: RunPodClient,
    clock: Clock,
    spec: plan.PodSpec,
    tag: PodTag,
    catalog: list[dict[str, Any]],
    cands: list[plan.Candidate],
    book: ledger.Ledger,
    deadline: float | None = None,
    place_by: float | None = None,
) -> tuple[list[plan.Candidate], list[dict[str, Any]], ledger.Reservation | None]:
    r"""The candidates the owner can afford, why the others were skipped, and the budget
    reservation that holds them (none fits: exit 1).

    Exposure is billed spend in the period, plus what live pods without a reservation may
    still bill, plus the owner's live reservations; the reservation is for the dearest
    affordable candidate, written create-if-absent so concurrent ``up``\ s serialise.
    ``deadline`` (the job's timeout) bounds RunPod's retry waits in the billing reads;
    ``place_by``, written into the reservation, is when ``up`` stops creating pods under it.
    """
    if decision.budget is None:
        return cands, [], None
    budget = float(decision.budget)
    now = clock.now()
    grace = decision.grace_s  # the budgets file's reap interval or the floor; never the job's less
    base = cost.exposure(client, book, tag.owner, decision.period_s, now, grace, deadline)
    until = tag.expires_at + grace
    refused: list[dict[str, Any]] = []
    ok: list[plan.Candidate] = []

    def decide(reserved: float) -> float:
        exposure = base + reserved
        ok[:], refused[:], rates = _judge(cands, catalog, spec, budget, exposure, until - now, rt)
        if not ok:
            _refused_event(rt, book, now, tag, budget, exposure)
            raise CheckFailed(
                f"owner {tag.owner} would pass budget ${budget:.2f}: "
                f"${cost.usd(exposure)} spent, committed or reserved; every candidate adds more",
                hint="stop or down your other pods, shorten ttl, choose a cheaper GPU, "
                "or ask for a larger budget in the budgets file",
            )
        return max(rates)

    hold = ledger.Hold(tag.run_url, tag.name(), budget, decision.period_s, place_by=place_by)
    reservation = book.reserve(tag.owner, now, until, decide, hold)
    rt.log(
        f"budget: reserved ${cost.usd(reservation.remaining(now))} for {tag.owner} "
        f"until {utc_iso(until)} in {book.where}"
    )
    return list(ok), list(refused), reservation


def _judge(
    cands: list[plan.Candidate],
    catalog: list[dict[str, Any]],
    spec: plan.PodSpec,
    budget: float,
    exposure: float,
    horizon_s: float,
    rt: Runtime,
) -> tuple[list[plan.Candidate], list[dict[str, Any]], list[float]]:
    """Each candidate against the budget: the ones that fit, the refusals, the fits' rates."""
    ok: list[plan.Candidate] = []
    refused: list[dict[str, Any]] = []
    rates: list[float] = []
    for cand in cands:
        rate = plan.price_per_hr(catalog, cand.gpu_id, spec.cloud, spec.gpu_count)
        if rate is None:
            refused.append({"candidate": cand.label(), "reason": "no catalog price"})
            continue
        fits, projected = cost.verdict(budget, exposure, rate, horizon_s)
        if fits:
            ok.append(cand)
            rates.append(rate)
        else:
            refused.append(
                {"candidate": cand.label(), "rate": rate, "projected_usd": round(projected, 4)}
            )
            rt.log(
                f"budget: skip {cand.label()}: ${cost.usd(projected)} projected > "
                f"${cost.usd(budget)}"
            )
    return ok, refused, rates


def _refused_event(
    rt: Runtime, book: ledger.Ledger, now: float, tag: PodTag, budget: float, exposure: float
) -> None:
    try:
        book.record(
            "budget-refused",
            "",
            now,
            owner=tag.owner,
            runUrl=tag.run_url,
            budgetUsd=budget,
            exposureUsd=round(exposure, 4),
        )
    except (OSError, GpuciError) as exc:
        rt.log(f"warning: could not record the refusal in the ledger: {exc}")


class _NonePlaced(Exception):
    """A round in which no candidate took the pod: the next round waits, as ROUNDS says."""


#: Rounds over the candidates: 15 s apart, doubling to at most 300 s, no jitter; the
#: placement timeout (on the job's clock) decides how many fit.
ROUNDS = RetryPolicy(
    attempts=1 << 30, initial=15.0, max_wait=300.0, jitter="none", retry_after_cap=None
)


def place(
    inp: UpInputs,
    rt: Runtime,
    client: RunPodClient,
    clock: Clock,
    spec: plan.PodSpec,
    tag: PodTag,
    cands: Sequence[plan.Candidate],
    place_by: float | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Rounds over the candidates (400/403: next one) with backoff between rounds, all ending
    by ``placement-timeout`` (and ``place_by``, the budget reservation's): the rounds' waits
    and each create's own retries (a 429's ``Retry-After``) alike."""
    attempts: list[dict[str, Any]] = []
    api = api_url(rt.environ)
    last = [""]
    end = clock.now() + inp.placement_timeout
    if place_by is not None:
        end = min(end, place_by)

    def one_round() -> dict[str, Any]:
        for cand in cands:
            body = plan.create_body(spec, tag, cand, api)
            try:
                pod = client.create_pod(body, deadline=end)
            except CandidateRejected as exc:
                last[0] = exc.detail or exc.message
                attempts.append(
                    {"candidate": cand.label(), "status": exc.status, "detail": last[0]}
                )
                rt.log(f"not placed: {cand.label()}: HTTP {exc.status} {last[0]}")
                continue
            attempts.append({"candidate": cand.label(), "status": 201, "pod": pod["id"]})
            rt.log(f"placed {pod['id']} on {cand.label()}")
            return pod
        raise _NonePlaced

    rounds = ROUNDS.retrying(
        _NonePlaced,
        deadline=end - clock.now(),
        sleep=clock.sleep,
        now=clock.now,
        on_retry=lambda _exc: rt.log("no candidate placed; next round after the backoff"),
    )
    try:
        return rounds(one_round), attempts
    except _NonePlaced:
        raise InfraError(
            f"no candidate placed after {len(attempts)} attempt(s); last answer: {last[0]}",
            hint="add GPU types or data centres, raise placement-timeout, or, if every "
            "candidate failed alike, fix the request the detail names",
        ) from None
