"""``pods reap`` names the nodes whose GPUs failed gpu-smoke in two or more smokes: by data
centre, GPU UUID and pod (RunPod pods) or host (self-hosted). The verdicts are written by the
real gpu-smoke (fake NVML with an ECC error) as it runs inside a pod (``RUNPOD_DC_ID``)."""

from __future__ import annotations

from pods_testing import smoke

from moto_s3 import FAKE_S3_CREDENTIALS

REAL_TIME_CLOCK = True  # the conftest's ``clock``: pods' timers and the health record run on it


def test_reap_names_nodes_with_repeated_failures(fake, run, tmp_path, clock):
    store = (tmp_path / "health").as_uri()
    bad = "h200:ecc+=1"
    smoke(tmp_path, store, bad, RUNPOD_DC_ID="EU-RO-1", RUNPOD_POD_ID="poda1")
    smoke(tmp_path, store, bad, RUNPOD_DC_ID="EU-RO-1", RUNPOD_POD_ID="poda2")
    smoke(tmp_path, store, bad, RUNPOD_DC_ID="US-KS-2", RUNPOD_POD_ID="podb1")
    smoke(tmp_path, store, "h200", RUNPOD_DC_ID="US-KS-2", RUNPOD_POD_ID="podb2")
    smoke(tmp_path, store, bad, GPUCI_NODE_NAME="gpu-node-3")
    smoke(tmp_path, store, bad, GPUCI_NODE_NAME="gpu-node-3")

    res = run("reap", health_store=store)
    assert res.code == 0, res.stdout
    nodes = {(n["kind"], n["node"]): n for n in res.json["report"]["repeated_failures"]["nodes"]}
    assert nodes[("data centre", "EU-RO-1")]["failures"] == 2
    assert ("data centre", "US-KS-2") not in nodes  # one failure (and one pass) is not repeated
    assert nodes[("host", "gpu-node-3")]["failures"] == 2
    gpus = [n for (kind, _), n in nodes.items() if kind == "GPU"]
    assert len(gpus) == 1 and gpus[0]["failures"] == 5  # the fake H200 has one UUID
    assert not [k for k in nodes if k[0] == "pod"]  # each pod failed once
    assert nodes[("data centre", "EU-RO-1")]["checks"] == ["health"]
    summary = res.json["summary_markdown"]
    assert "Repeated GPU failures" in summary and "| data centre | EU-RO-1 | 2 |" in summary
    warned = [a["message"] for a in res.json["annotations"] if "repeated" in a["message"]]
    assert len(warned) == 1 and "data centre EU-RO-1 (2x)" in warned[0]

    clock.advance(30 * 86400)  # a month later the window holds none of them
    later = run("reap", health_store=store, failure_days="7")
    assert later.json["report"]["repeated_failures"]["nodes"] == []
    assert "Repeated GPU failures" not in later.json["summary_markdown"]


def test_an_unreadable_record_is_one_warning_and_reap_goes_on(fake, run, unreadable_health):
    env = unreadable_health
    res = run("reap", extra_env=env)
    assert res.code == 0, res.stdout
    warned = [a for a in res.json["annotations"] if "GPU health record not read" in a["message"]]
    assert len(warned) == 1, res.stdout
    assert FAKE_S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in res.stdout + res.stderr
    off = run("reap", extra_env=env, failure_days="0")
    assert off.code == 0 and "repeated_failures" not in off.json["report"]


def test_two_smokes_in_one_second_are_two_failures():
    """Records carry whole-second ``at``: two smokes of one host within a second are still two
    events (their exact ``time`` differs), and one smoke's GPUs share one."""
    from gpuci.pods.health._repeat_failures import repeated

    def verdict(time: float, uuid: str) -> dict[str, object]:
        at = "2026-12-01T10:00:00Z"
        return {"host": "gpu-node-3", "uuid": uuid, "time": time, "at": at, "passed": False}

    rows = repeated([verdict(1.25, "GPU-a"), verdict(1.25, "GPU-b"), verdict(1.75, "GPU-a")])
    nodes = {(r["kind"], r["node"]): r["failures"] for r in rows}
    assert nodes == {("host", "gpu-node-3"): 2, ("GPU", "GPU-a"): 2}
