"""A day of CI on a fake clock: cancelled jobs, failed teardowns, a reaper every 15 minutes.

Invariants, checked every simulated minute and at the end of the day:
no pod outlives its TTL plus one reaper interval, a pod with the self-stop wrapper never bills
past its expiry, and no owner's billed spend passes their budget.
"""

from __future__ import annotations

import random

from pods_testing import fail_teardown, up_or_refused

from gpuci.pods._budgets import ledger
from gpuci.pods._runpod.naming import tag_of

REAP_S = 15 * 60
TICK_S = 60
BUDGET = 12.0
OWNERS = ("alice", "bob", "carol")
GPUS = ["NVIDIA GeForce RTX 4090", "NVIDIA L40S", "NVIDIA H100 80GB HBM3"]


def test_a_day_of_ci_forgets_nothing_and_keeps_budgets(fake, run, clock, env):
    rng = random.Random(20261129)
    start = clock.now()
    end = start + 86400
    next_reap, next_job = start, start
    teardowns: list[tuple[float, str, str]] = []  # (when, pod id, "ok" | "fail")
    expiry: dict[str, float] = {}
    wrapped: set[str] = set()
    stats = {"up": 0, "refused": 0, "cancelled": 0, "failed_down": 0, "reaped": 0, "down": 0}

    while clock.now() < end:
        fake.self_stop_due()  # the in-pod timers
        if clock.now() >= next_reap:
            # the scheduled reaper; now and then the API is flaky for it too
            if rng.random() < 0.2:
                fake.fail("GET /v2/pods", (503, {}), (429, {"Retry-After": "2"}))
            res = run("reap")
            assert res.code == 0, res.stdout
            stats["reaped"] += int(res.outputs["count"])
            next_reap += REAP_S
        if clock.now() >= next_job:
            owner = rng.choice(OWNERS)
            ttl_min = rng.choice([20, 45, 90])
            order = rng.sample(GPUS, k=len(GPUS))
            self_stop = rng.random() > 0.15  # some images run without the wrapper
            res = run(
                "up",
                gpu_types=",".join(order),
                image="vllm/vllm-openai:v0.6.3",
                command="vllm serve m" if self_stop else None,
                ttl=f"{ttl_min}m",
                owner=owner,
                budget_usd=str(BUDGET),
                budget_period="1d",
                reap_interval="15m",
            )
            pod_id = up_or_refused(res, stats)
            if pod_id is not None:
                expiry[pod_id] = tag_of(fake.view(fake.pods[pod_id])).expires_at
                if self_stop:
                    wrapped.add(pod_id)
                fate = rng.random()
                job_s = rng.uniform(5, ttl_min * 1.5) * 60  # some jobs outrun their TTL
                if fate < 0.2:
                    stats["cancelled"] += 1  # the runner died: no teardown at all
                else:
                    teardowns.append((clock.now() + job_s, pod_id, "fail" if fate < 0.4 else "ok"))
            next_job += rng.choice([5, 10, 20]) * 60
        for item in [t for t in teardowns if t[0] <= clock.now()]:
            teardowns.remove(item)
            _, pod_id, how = item
            if how == "fail":
                fail_teardown(fake, pod_id, stats)
            res = run("down", pod_id=pod_id)
            assert res.code == (3 if how == "fail" else 0), res.stdout
            stats["down"] += res.code == 0
        now = clock.now()
        for pod_id in fake.pods:
            assert now <= expiry.get(pod_id, now) + REAP_S + TICK_S, f"{pod_id} outlived its TTL"
        clock.advance(TICK_S)

    # let the last pods expire and be reaped
    while fake.pods:
        clock.advance(REAP_S)
        fake.self_stop_due()
        assert run("reap").code == 0

    for pod_id, gone in fake.terminated_at.items():
        assert gone <= expiry[pod_id] + REAP_S + TICK_S, f"{pod_id} outlived TTL + one interval"
    book = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env).book()
    spent = dict.fromkeys(OWNERS, 0.0)
    for pod_id, entry in book.items():
        billed = fake.billed_now(pod_id)
        spent[entry.owner] += billed
        if pod_id in wrapped:  # the self-stop layer alone bounds what the pod bills
            limit = entry.cost_per_hr * (expiry[pod_id] - fake.created_at[pod_id] + TICK_S)
            assert billed <= limit / 3600 + 1e-6, pod_id
    for owner, usd in spent.items():
        assert usd <= BUDGET + 1e-6, f"{owner} spent {usd:.2f} > {BUDGET}"
    # the day really exercised every path
    assert stats["up"] >= 10 and stats["refused"] >= 10, stats
    assert stats["cancelled"] >= 3 and stats["failed_down"] >= 3 and stats["reaped"] >= 6, stats
    assert max(spent.values()) > BUDGET * 0.7, spent  # budgets were actually approached
