"""The shared ledger: spend and budgets hold across runners that share nothing but its URL.

Every test runs on a file store and on a real moto S3 server (``shared_ledger``).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from pods_testing import api_env

from gpuci.pods._budgets import ledger
from gpuci_testing import clean_env, run_cli

UP = dict(image="img", command="serve", ttl="45m", gpu_types="NVIDIA L40S")  # $0.86/h


def _runner(fake, home: Path, shared: dict[str, str], actor: str, run_id: str) -> dict[str, str]:
    """A fresh GitHub-hosted runner: its own HOME, nothing local from earlier jobs."""
    home.mkdir()
    return clean_env(
        **api_env(fake, home, **shared),
        HOME=str(home),
        GITHUB_ACTIONS="true",
        GITHUB_ACTOR=actor,
        GITHUB_RUN_ID=run_id,
        GITHUB_REPOSITORY="org/repo",
        GITHUB_OUTPUT=str(home / "output"),
        GITHUB_ENV=str(home / "env"),
        GITHUB_PATH=str(home / "path"),
        GITHUB_STEP_SUMMARY=str(home / "summary"),
    )


def test_spend_of_a_pod_ended_on_runner_a_is_attributed_on_runner_b(live, tmp_path, shared_ledger):
    a = _runner(live, tmp_path / "a", shared_ledger, "alice", "101")
    up = run_cli(
        "pods", "up", "--json", "--gpu-types", "NVIDIA L40S", "--image", "img", "--ttl", "10m",
        env=a,
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    pod_id = next(iter(live.pods))
    down = run_cli("pods", "down", "--pod-id", pod_id, env=a)
    assert down.returncode == 0, down.stdout + down.stderr
    assert live.pods == {} and live.billed_now(pod_id) > 0  # gone from listPods, still billed

    b = _runner(live, tmp_path / "b", shared_ledger, "bob", "202")
    cost = run_cli("pods", "cost", "--json", env=b)
    assert cost.returncode == 0, cost.stdout + cost.stderr
    report = json.loads(cost.stdout[cost.stdout.index("{") :])  # after the ::add-mask::
    owners = report["report"]["owners"]
    assert "(unattributed)" not in owners, owners
    assert pod_id in owners["alice"]["pods"] and owners["alice"]["live_pods"] == 0
    assert owners["alice"]["spent_usd"] == pytest.approx(live.billed_now(pod_id), abs=1e-4)
    # a fraction of a cent shows as such, never as "$0.00"
    headline = report["headline"]  # the amount depends on how long the pod lived here
    assert "$0.00 " not in headline
    assert re.match(r"\$(<0\.0001|0\.\d*[1-9]\d*) spent", headline), headline
    assert not list((tmp_path / "b").rglob("pods-ledger"))  # B read nothing local


def _racing_creates(monkeypatch) -> None:
    """On moto, hold the first create of a reservation between its ``If-None-Match`` check
    and its write until the second create has reached the server: the interleaving a loaded
    machine makes now and then, made every time."""
    from moto.s3.responses import S3Response

    arrived, held, first = threading.Condition(), [], []
    received, checksum = S3Response._key_response_put, S3Response._get_checksum

    def racing(self: S3Response) -> bool:
        return "/reservations/" in self.path and self.headers.get("If-None-Match") == "*"

    def key_put(self: S3Response, *args: Any) -> Any:
        if racing(self):
            with arrived:
                held.append(self.path)
                arrived.notify_all()
        return received(self, *args)

    def checked(self: S3Response, *args: Any) -> Any:
        if racing(self):
            with arrived:
                if not first:  # the first here waits for the second to reach the server
                    first.append(self.path)
                    arrived.wait_for(lambda: len(held) > 1, timeout=60)
        return checksum(self, *args)

    monkeypatch.setattr(S3Response, "_key_response_put", key_put)
    monkeypatch.setattr(S3Response, "_get_checksum", checked)


def test_two_concurrent_ups_of_one_owner_where_one_fits_make_one_pod(
    fake, run, shared_ledger, monkeypatch
):
    """Both read the owner's reservations before either writes: only the conditional write
    on the next sequence number keeps them from both passing the budget, however the two
    writes interleave in the store."""
    if "s3://" in shared_ledger["GPUCI_PODS_LEDGER"]:
        _racing_creates(monkeypatch)
    barrier = threading.Barrier(2, timeout=60)
    seen = threading.local()
    original = ledger.Ledger.reservations

    def reservations_then_wait(self, owner):
        out = original(self, owner)
        if getattr(seen, "count", 0) == 1:  # the read inside reserve(), first round
            barrier.wait()
        seen.count = getattr(seen, "count", 0) + 1
        return out

    monkeypatch.setattr(ledger.Ledger, "reservations", reservations_then_wait)
    results = {}

    def one(name: str) -> None:
        results[name] = run("up", **UP, owner="alice", budget_usd="1.5", extra_env=shared_ledger)

    threads = [threading.Thread(target=one, args=(n,)) for n in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    codes = sorted(r.code for r in results.values())
    assert codes == [0, 1], {k: r.stdout for k, r in results.items()}
    assert len(fake.calls("POST", "/v2/pods")) == 1 and len(fake.pods) == 1
    refused = next(r for r in results.values() if r.code == 1)
    assert "would pass budget $1.50" in refused.json["headline"]


def test_the_reservation_is_released_when_the_pod_ends(fake, run, shared_ledger, clock):
    first = run("up", **UP, owner="alice", budget_usd="1.5", extra_env=shared_ledger)
    assert first.code == 0, first.stdout
    blocked = run("up", **UP, owner="alice", budget_usd="1.5", extra_env=shared_ledger)
    assert blocked.code == 1, blocked.stdout  # the first pod's reservation holds the budget
    clock.advance(60)
    assert run("down", pod_id=first.outputs["pod-id"], extra_env=shared_ledger).code == 0
    again = run("up", **UP, owner="alice", budget_usd="1.5", extra_env=shared_ledger)
    assert again.code == 0, again.stdout  # released: only the minute it ran still counts


def test_hostile_ledger_objects_are_skipped_not_trusted(tmp_path, env):
    url = (tmp_path / "hostile").as_uri()
    book = ledger.Ledger.open(url, env)
    book.record("created", "podA", 1.0, owner="alice", gpu="g")
    root = tmp_path / "hostile" / ledger.EVENTS
    (root / "podA" / "000000000000002-created-00000000.json").write_text("{not json")
    (root / "podA" / "000000000000003-created-11111111.json").write_bytes(b" " * 70000)
    (root / "podA" / "000000000000004-created-22222222.json").write_text(
        '{"event":"created","podId":"podB","owner":"mallory"}'  # filed under another pod
    )
    fresh = ledger.Ledger.open(url, env).book()
    assert fresh["podA"].owner == "alice" and "podB" not in fresh
    assert ledger.owner_key("../../etc") != "../../etc" and "/" not in ledger.owner_key("a/b")


def test_a_broken_ledger_never_keeps_a_pod_alive(fake, run, tmp_path):
    pod = run("up", **UP, owner="alice").outputs["pod-id"]
    bad = {"GPUCI_PODS_LEDGER": "ftp://ledger.example.com/x"}
    res = run("down", pod_id=pod, extra_env=bad)
    assert res.code == 0 and fake.pods == {}
    assert "pods ledger unusable" in res.stderr
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the ledger's folder should be")
    pod = run("up", **UP, owner="alice").outputs["pod-id"]
    res = run("down", pod_id=pod, extra_env={"GPUCI_PODS_LEDGER": blocked.as_uri()})
    assert res.code == 0 and fake.pods == {} and "could not write the pods ledger" in res.stderr
    # up with a budget cannot enforce it without the ledger: it stops before creating
    refused = run("up", **UP, owner="alice", budget_usd="5", extra_env=bad)
    assert refused.code == 2 and len(fake.calls("POST", "/v2/pods")) == 2


def test_ledger_urls_bare_paths_and_an_old_ledger_file(tmp_path, run, fake):
    assert ledger.ledger_url(str(tmp_path / "l"), {}) == (tmp_path / "l").as_uri()
    assert ledger.ledger_url("", {"GPUCI_PODS_LEDGER": "s3://b/p"}) == "s3://b/p"
    assert ledger.ledger_url("file:///x", {"GPUCI_PODS_LEDGER": "s3://b/p"}) == "file:///x"
    old = tmp_path / "pods-ledger.jsonl"  # what an older gpu-ci wrote
    old.write_text('{"podId": "p1", "owner": "alice"}\n')
    res = run("cost", ledger=str(old))
    assert res.code == 2 and "is a file (an older gpu-ci's local ledger)" in res.json["headline"]
    assert old.read_text().startswith('{"podId"')  # left as it was


def test_a_ttl_extension_beyond_the_reservation_counts(fake, run, shared_ledger):
    first = run("up", **UP, owner="alice", budget_usd="3", extra_env=shared_ledger)
    assert first.code == 0, first.stdout  # holds 0.86 x (45m + 15m) = $0.86
    # ttl moves the expiry of a stopped pod (a running pod's env update would restart it)
    assert run("stop", pod_id=first.outputs["pod-id"], extra_env=shared_ledger).code == 0
    moved = run("start", pod_id=first.outputs["pod-id"], ttl="3h", extra_env=shared_ledger)
    assert moved.code == 0 and "expires" in moved.json["headline"]
    # the pod may now bill 0.86 x 3h15m = $2.80: another $0.86 pod no longer fits in $3
    second = run("up", **UP, owner="alice", budget_usd="3", extra_env=shared_ledger)
    assert second.code == 1, second.stdout
