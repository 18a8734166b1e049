"""A simulated month for three people on two runners that share only the ledger URL.

Owners come from the CI identity, budgets from the repository's budgets file. Jobs are
cancelled, teardowns fail, pods outlive their jobs; an hourly reaper ends them. Checked every
simulated quarter hour: nobody's billed spend passes their budget. At the end: every reaped
pod is traced to its owner, in the reaper's report, in the ledger and in ``cost``.
"""

from __future__ import annotations

import random
from collections import Counter

from pods_testing import fail_teardown, up_or_refused

from gpuci.pods._budgets import ledger

TICK_S = 15 * 60
REAP_S = 3600
BUDGETS = {"alice": 60.0, "bob": 25.0, "carol": 90.0}
GPUS = ["NVIDIA GeForce RTX 4090", "NVIDIA L40S", "NVIDIA H100 80GB HBM3"]


def test_a_month_for_three_people_keeps_every_budget_and_traces_every_reaped_pod(
    fake, run, clock, env, tmp_path
):
    rng = random.Random(202611)
    budgets = tmp_path / "budgets.yml"
    budgets.write_text(
        "period: 30d\nowners:\n" + "".join(f"  {o}: {usd}\n" for o, usd in BUDGETS.items())
    )
    runners = [{"HOME": str(tmp_path / name)} for name in ("runner-a", "runner-b")]
    start = clock.now()
    end = start + 30 * 86400
    next_reap, next_job, run_no = start, start, 0
    teardowns: list[tuple[float, str, bool]] = []
    owner_of: dict[str, str] = {}
    reaped: list[dict] = []
    stats = Counter()

    final: dict[str, float] = {}  # a terminated pod's bill, which no longer changes

    def billed() -> Counter[str]:
        """Each owner's billed spend now, in one pass over the pods."""
        spent: Counter[str] = Counter()
        for pod_id, owner in owner_of.items():
            if pod_id in final:
                spent[owner] += final[pod_id]
                continue
            usd = fake.billed_now(pod_id)
            if pod_id in fake.terminated_at:
                final[pod_id] = usd
            spent[owner] += usd
        return spent

    def within_budgets() -> Counter[str]:
        spent = billed()
        for owner, usd in BUDGETS.items():
            assert spent[owner] <= usd + 1e-6, f"{owner} spent {spent[owner]:.2f} > {usd}"
        return spent

    while clock.now() < end:
        fake.self_stop_due()
        if clock.now() >= next_reap:
            res = run("reap", extra_env=rng.choice(runners))
            assert res.code == 0, res.stdout
            reaped += res.json["report"].get("reaped", [])
            next_reap += REAP_S
        if clock.now() >= next_job:
            run_no += 1
            owner = rng.choice(list(BUDGETS))
            ident = {
                **rng.choice(runners),
                "GITHUB_RUN_ID": str(run_no),
                "GITHUB_REPOSITORY": "org/repo",
                "GITHUB_ACTOR": owner,
            }
            ttl_h = rng.choice([1, 3, 6])
            res = run(
                "up",
                gpu_types=",".join(rng.sample(GPUS, k=2)),
                image="img",
                command="serve" if rng.random() > 0.2 else None,
                ttl=f"{ttl_h}h",
                budgets=str(budgets),
                reap_interval="1h",
                extra_env=ident,
            )
            pod_id = up_or_refused(res, stats)
            if pod_id is not None:
                owner_of[pod_id] = owner
                fate = rng.random()
                if fate < 0.25:
                    stats["forgotten"] += 1  # the runner died: no teardown at all
                else:
                    when = clock.now() + rng.uniform(0.2, 1.5) * ttl_h * 3600
                    teardowns.append((when, pod_id, fate < 0.4))
            next_job += rng.uniform(2, 8) * 3600
        for item in [t for t in teardowns if t[0] <= clock.now()]:
            teardowns.remove(item)
            _, pod_id, fails = item
            if fails:
                fail_teardown(fake, pod_id, stats)
            res = run("down", pod_id=pod_id, extra_env=rng.choice(runners))
            assert res.code == (3 if fails else 0), res.stdout
        within_budgets()
        clock.advance(TICK_S)

    while fake.pods:  # the last pods expire and are reaped
        clock.advance(REAP_S)
        fake.self_stop_due()
        res = run("reap")
        reaped += res.json["report"].get("reaped", [])

    spent = within_budgets()
    assert reaped, "the month reaped nothing: the test did not exercise forgetting"
    for row in reaped:
        assert row["owner"] == owner_of[row["pod"]], row
    book = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env).book()
    for row in reaped:
        events = [e for e in book[row["pod"]].events if e["event"] == "reaped"]
        assert events and events[0]["owner"] == row["owner"], row["pod"]
    counts = Counter(row["owner"] for row in reaped)
    owners = run("cost", period="31d").json["report"]["owners"]
    assert {o: owners[o]["reaped_pods"] for o in counts} == dict(counts)
    assert "(unattributed)" not in owners
    assert stats["up"] >= 40 and stats["refused"] >= 10 and stats["failed_down"] >= 5, stats
    assert max(spent[o] / usd for o, usd in BUDGETS.items()) > 0.7  # budgets were approached
