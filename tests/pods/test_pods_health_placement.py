"""``pods up`` keeps off data centres where gpu-smoke recorded a hardware failure recently.

The failure is written by a real ``gpu-smoke`` run (fake NVML, ECC error) inside what it takes
for a RunPod pod (``RUNPOD_DC_ID``), into a file store; placement then runs against the fake
RunPod, whose catalog lists the RTX 4090 in EU-RO-1 (most stock, tried first) and US-KS-2.
"""

from __future__ import annotations

import json
from pathlib import Path

from pods_testing import smoke

from moto_s3 import FAKE_S3_CREDENTIALS

GPU = "NVIDIA GeForce RTX 4090"
UP = dict(gpu_types=GPU, image="img", command="sleep 1", ttl="30m", owner="alice")


def _fail_smoke_in(tmp_path: Path, store: str, dc: str) -> dict:
    smoke(tmp_path, store, "h200:ecc+=1", RUNPOD_DC_ID=dc, RUNPOD_POD_ID="podbad1")
    files = (tmp_path / "health").rglob("*.json")
    (record,) = [json.loads(p.read_text()) for p in files if "-fail-" in p.name]
    assert record["data_center"] == dc and record["pod"] == "podbad1"
    return record


def _posted_dcs(fake) -> list[list[str]]:
    return [c.body.get("dataCenterIds") for c in fake.calls("POST", "/v2/pods")]


def test_a_recent_failure_keeps_up_off_that_data_centre(fake, run, tmp_path):
    store = (tmp_path / "health").as_uri()
    bad = _fail_smoke_in(tmp_path, store, "EU-RO-1")
    res = run("up", health_store=store, **UP)
    assert res.code == 0, res.stdout
    assert _posted_dcs(fake) == [["US-KS-2"]]
    assert res.outputs["data-center"] == "US-KS-2"
    summary = res.json["summary_markdown"]
    assert "Kept off (GPU health record)" in summary
    row = [ln for ln in summary.splitlines() if ln.startswith("| EU-RO-1")]
    assert len(row) == 1 and bad["uuid"] in row[0] and "health" in row[0]


def test_every_candidate_failed_refuses_and_zero_days_turns_it_off(fake, run, tmp_path):
    store = (tmp_path / "health").as_uri()
    bad = _fail_smoke_in(tmp_path, store, "EU-RO-1")
    res = run("up", health_store=store, data_centers="EU-RO-1", **UP)
    assert res.code == 1, res.stdout
    assert fake.calls("POST", "/v2/pods") == []  # nothing created, nothing billed
    assert "EU-RO-1" in res.stdout and bad["uuid"] in res.stdout
    assert "avoid-failed-days" in res.stdout

    res = run("up", health_store=store, data_centers="EU-RO-1", avoid_failed_days="0", **UP)
    assert res.code == 0, res.stdout
    assert _posted_dcs(fake) == [["EU-RO-1"]]


def test_a_failure_older_than_the_window_is_ignored(fake, run, tmp_path, clock):
    store = (tmp_path / "health").as_uri()
    _fail_smoke_in(tmp_path, store, "EU-RO-1")
    clock.advance(30 * 86400)  # the record is a month old by the pods clock
    res = run("up", health_store=store, avoid_failed_days="7", **UP)
    assert res.code == 0, res.stdout
    assert _posted_dcs(fake) == [["EU-RO-1", "US-KS-2"]]
    assert "Kept off" not in res.json["summary_markdown"]


def test_an_unreadable_record_is_one_warning_and_up_still_places(fake, run, unreadable_health):
    env = unreadable_health
    res = run("up", extra_env=env, **UP)
    assert res.code == 0, res.stdout
    warnings = [a for a in res.json["annotations"] if "GPU health record not read" in a["message"]]
    assert len(warnings) == 1, res.stdout
    assert _posted_dcs(fake) == [["EU-RO-1", "US-KS-2"]]
    assert FAKE_S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in res.stdout + res.stderr
