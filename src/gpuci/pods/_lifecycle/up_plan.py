"""``pods up --dry-run``: the candidates, the exact create bodies, the TTL and the budget rule,
shown without calling the API (its own module: the plan is a report, not a placement).
"""

from __future__ import annotations

from typing import Any

from gpuci import settings
from gpuci.pods._budgets import holds, ledger
from gpuci.pods._budgets import policy as budgets
from gpuci.pods._runners import registry as runners
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.client import API_KEY_ENV, api_url
from gpuci.pods._runpod.naming import PodTag
from gpuci.pods.options import UpInputs
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import utc_iso

BUDGET_RULE = (
    "refuse a candidate when billed spend + live pods' committed cost "
    "+ live reservations + catalog USD/h x (ttl + reap-interval, the budgets file's or "
    "longer) exceeds the budget (checked against the API and the ledger at run time)"
)


def plan_up(
    inp: UpInputs,
    rt: Runtime,
    spec: plan.PodSpec,
    tag: PodTag,
    warn: str,
    decision: budgets.Decision,
    book: ledger.Ledger,
    runner: runners.Request | None = None,
) -> Result:
    """The dry run: candidates, exact bodies, TTL and the budget rule, without the API."""
    cands = plan.candidates(inp.gpu_types, inp.data_centers)
    result = Result(command="pods up", headline=f"plan: {len(cands)} candidate(s), not sent")
    if warn:
        result.warning(warn)
    if not settings.RUNPOD_API_KEY.is_set(rt.environ):
        result.warning(f"{API_KEY_ENV} is not set; a real run would stop here")
    if decision.budget is not None and inp.ttl + decision.grace_s > holds.MAX_HOLD_S:
        result.warning(  # as ledger.Ledger.reserve refuses it (exit 2)
            f"ttl plus the reap interval is over the {holds.MAX_HOLD_S / 86400:.0f} days a "
            "budget reservation holds; a real run would stop here"
        )
    result.outputs = {
        "pod-id": "",
        "status": "PLANNED",
        "cost-per-hr": "",
        "url": "",
        "runner-name": runner.name if runner else "",
    }
    result.report = {"plan": _plan_report(inp, rt, spec, tag, decision, book, cands)}
    if runner is not None:
        for note in runner.notes:
            result.warning(note)
        result.report["plan"]["runner"] = _runner_plan(runner, spec)
    result.summary = [_plan_summary(cands, tag)]
    return result


def _plan_report(
    inp: UpInputs,
    rt: Runtime,
    spec: plan.PodSpec,
    tag: PodTag,
    decision: budgets.Decision,
    book: ledger.Ledger,
    cands: list[plan.Candidate],
) -> dict[str, Any]:
    """The report's ``plan``: who, until when, where, the exact requests and the rules."""
    api = api_url(rt.environ)
    bodies = [plan.shown_body(plan.create_body(spec, tag, c, api), spec.env) for c in cands]
    budget = decision.budget
    return {
        "owner": tag.owner,
        "run_url": tag.run_url,
        "ttl_s": inp.ttl,
        "expires_at": utc_iso(tag.expires_at),
        "gpu_order": [c.gpu_id for c in cands],
        "candidates": [{"gpu": c.gpu_id, "data_centers": list(c.data_centers)} for c in cands],
        "requests": [{"method": "POST", "path": "/v2/pods", "body": b} for b in bodies],
        "ledger": book.where,
        "identity": {"login": decision.identity.login, "source": decision.identity.source},
        "budget": {
            "budget_usd": budget,
            "period_s": decision.period_s,
            "rule": BUDGET_RULE if budget is not None else "no budget-usd: no check",
        },
        "self_stop": bool(spec.command),
        "smoke": {
            "before_handover": spec.smoke,
            "attempts": inp.smoke_attempts if spec.smoke else 1,
        },
    }


def _runner_plan(runner: runners.Request, spec: plan.PodSpec) -> dict[str, Any]:
    """The runner a real run would register, and the request it would send."""
    return {
        "platform": runner.target.platform,
        "name": runner.name,
        "labels": runner.labels,
        "scope": runner.target.scope,
        "idle_timeout_s": runner.idle_s,
        "image": spec.image,
        "request": runner.call(),
    }


def _plan_summary(cands: list[plan.Candidate], tag: PodTag) -> str:
    return "### pods up plan (dry run)\n\n" + markdown_table(
        ["#", "GPU type", "data centres", "TTL ends"],
        [
            [i + 1, c.gpu_id, ", ".join(c.data_centers) or "any", utc_iso(tag.expires_at)]
            for i, c in enumerate(cands)
        ],
    )
