"""GitHub and GitLab usernames are case-insensitive, so owners are too: the CI identity, the
budgets file's owners and delegations, the ``owner`` input and the ledger all see one owner
whatever the case it was written in, and what an older gpu-ci recorded as ``Alice`` counts
against ``alice``'s budget.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pods_testing import L40S, SUBS

from gpuci.errors import InputError
from gpuci.inputs import build, resolve
from gpuci.pods._budgets import ledger
from gpuci.pods._budgets import policy as budgets
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.naming import PodTag

GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "7", "GITHUB_REPOSITORY": "org/repo"}
UP = dict(image="img", command="serve", ttl="3h", gpu_types=L40S)  # $0.86/h: about $2.80


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "budgets.yml"
    path.write_text(text)
    return str(path)


def _decide(tmp_path: Path, text: str, actor: str, owner: str = "") -> budgets.Decision:
    """``up``'s decision (whom to bill, their budget) for ``actor`` under budgets ``text``."""
    cmd = SUBS["up"]
    raw = {"image": "img", "gpu-types": L40S, "budgets": _file(tmp_path, text), "owner": owner}
    env = {**GITHUB, "GITHUB_ACTOR": actor}
    values = resolve(cmd.inputs, {k: v for k, v in raw.items() if v}, env, on_secret=print)
    return budgets.decide(build(cmd.load_options(), values), env)


def test_the_budgets_file_holds_whatever_case_the_actor_is_reported_in(tmp_path):
    """The reviewer's case: 'alice: 10' did not limit the actor GitHub reported as 'Alice'."""
    for actor in ("Alice", "ALICE", "alice"):
        decision = _decide(tmp_path, "owners:\n  alice: 10\n", actor)
        assert (decision.owner, decision.budget) == ("alice", 10.0), actor
    assert _decide(tmp_path, "owners:\n  Alice: 10\n", "alice").budget == 10.0


def test_a_delegation_holds_whatever_case_either_side_is_written_in(tmp_path):
    text = "delegations:\n  Bob: [Team-ML]\n"
    assert _decide(tmp_path, text, "bob", owner="team-ml").owner == "team-ml"
    assert _decide(tmp_path, text, "BOB", owner="TEAM-ML").owner == "team-ml"
    assert budgets.parse({"delegations": {"Bob": ["Team-ML"]}}, "f").may_act_for("bOb", "tEAM-ml")


def test_two_keys_naming_one_owner_are_bad_input(tmp_path):
    with pytest.raises(InputError) as err:
        _decide(tmp_path, "owners:\n  alice: 1\n  Alice: 100\n", "alice")
    assert "owners.alice and owners.Alice name one owner" in err.value.message


def _legacy_key(owner: str) -> str:
    """Where an older gpu-ci filed ``owner``'s reservations: under its exact case."""
    return f"{owner}-{hashlib.sha256(owner.encode()).hexdigest()[:12]}"


def test_spending_recorded_as_alice_capitalised_counts_against_alices_budget(
    fake, run, clock, tmp_path
):
    """$8 billed to a pod the ledger says 'Alice' created: alice ($10) can't add $2.80."""
    book = ledger.Ledger.open(str(tmp_path / "ledger"), {})
    fake.charge("old-pod", clock.now() - 3 * 3600, clock.now() - 3600, 4.0)
    book.record("created", "old-pod", clock.now() - 3 * 3600, owner="Alice", costPerHr=4.0)
    file = _file(tmp_path, "owners:\n  alice: 10\n")
    res = run("up", **UP, budgets=file, extra_env={**GITHUB, "GITHUB_ACTOR": "alice"})
    assert res.code == 1 and "owner alice would pass budget $10.00" in res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []
    cost = run("cost", owner="ALICE")
    assert cost.json["report"]["owners"]["alice"]["spent_usd"] == pytest.approx(8.0)


def test_a_live_pod_tagged_alice_capitalised_counts_against_alices_budget(fake, run, clock):
    """A pod an older gpu-ci made for 'Alice' (its tag in that case) commits alice's money."""
    tag = PodTag("Alice", "local", clock.now() + 10 * 3600, "abc123")
    body = plan.create_body(plan.PodSpec(image="img"), tag, plan.Candidate(L40S), fake.url)
    assert fake.api("POST", "/v2/pods", body)[0] == 201  # $0.86/h for 10 h: about $8.60
    res = run("up", **UP, budget_usd="10", extra_env={**GITHUB, "GITHUB_ACTOR": "alice"})
    assert res.code == 1 and "would pass budget $10.00" in res.json["headline"], res.stdout


def test_a_reservation_filed_under_alice_capitalised_counts_for_alice(fake, run, clock, tmp_path):
    """An older gpu-ci filed Alice's reservation under her name's case: it is found through the
    pod it holds (stopped: its reservation alone holds it), whose tag carries that case; her
    folder is listed by its own name, never with every folder of a like name."""
    tag = PodTag("Alice", "local", clock.now() + 3600, "abc123")
    body = plan.create_body(plan.PodSpec(image="img"), tag, plan.Candidate(L40S), fake.url)
    status, created = fake.api("POST", "/v2/pods", body)
    assert status == 201
    fake.pods[created["id"]]["status"] = "EXITED"
    book = ledger.Ledger.open(str(tmp_path / "ledger"), {})
    key = f"{ledger.RESERVATIONS}/{_legacy_key('Alice')}/0000000000.json"
    item = {"owner": "Alice", "costPerHr": 4.0, "untilEpoch": clock.now() + 2 * 3600}
    item.update(podName=tag.name(), createdEpoch=clock.now())
    book.store.put_if_absent(key, json.dumps(item).encode())  # $8 held for 2 more hours
    assert book.reservations("alice")[0] == []  # no pod seen tagged 'Alice': not looked for
    book.seen_pods(fake.pods.values())
    live, _, seq = book.reservations("alice")
    assert [r.key for r in live] == [key] and seq == 0  # alice's own folder is still empty
    res = run("up", **UP, budget_usd="10", extra_env={**GITHUB, "GITHUB_ACTOR": "alice"})
    assert res.code == 1 and "would pass budget $10.00" in res.json["headline"], res.stdout
    assert book.release(key)  # beside it, in its folder
    assert (
        tmp_path / "ledger" / ledger.RELEASES / _legacy_key("Alice") / "0000000000.json"
    ).exists()


def test_an_owner_filter_matches_an_owner_in_any_case_and_tags_are_written_folded():
    """``pods down/ls/reap --owner Alice`` finds alice's pods, and the pods an older gpu-ci
    tagged ``Alice``; a tag made now carries the folded name."""
    from gpuci.pods._lifecycle.common import tagged_pods
    from gpuci.pods._runpod.naming import ENV_OWNER, clean_owner

    pods = [
        {"id": "new", "env": {ENV_OWNER: "alice"}},
        {"id": "old", "env": {ENV_OWNER: "Alice"}},
        {"id": "bob", "env": {ENV_OWNER: "bob"}},
    ]
    for asked in ("Alice", "alice", "ALICE"):
        assert [pod["id"] for pod, _ in tagged_pods(pods, asked)] == ["new", "old"]
    assert clean_owner("Alice") == "alice"
