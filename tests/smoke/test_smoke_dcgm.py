"""dcgmi diag folded in: a stand-in dcgmi on PATH, run as a real subprocess."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from smoke_helpers import outcome, run

from gpuci import untrusted_json
from gpuci.gpu._smoke import dcgm
from gpuci.gpu._smoke.checks import CheckError, CheckSkipped, Context
from gpuci.gpu._smoke.dcgm import verdict
from gpuci.gpu.fake.nvml import FakeNvml

PASS = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {"name": "Blacklist", "results": [{"gpu_ids": "0", "status": "Pass"}]},
                    {"name": "NVML Library", "results": [{"gpu_ids": "0", "status": "Pass"}]},
                ],
            },
            {
                "category": "Hardware",
                "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": "0", "status": "Skip"}]}],
            },
        ]
    }
}
FAIL = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "GPU Memory",
                        "results": [
                            {
                                "gpu_ids": "0",
                                "status": "Fail",
                                "warnings": [{"warning": "Pending page retirements on GPU 0"}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
}


def stand_in(
    tmp_path: Path, monkeypatch, stdout: str = "", code: int = 0, script: str = ""
) -> Path:
    """A dcgmi on PATH that records its args and prints ``stdout``, or runs ``script``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "out.txt").write_text(stdout)
    exe = bin_dir / "dcgmi"
    exe.write_text(
        "#!/bin/sh\n"
        + (script or f'echo "$@" > "{bin_dir}/args"\ncat "{bin_dir}/out.txt"\nexit {code}\n')
    )
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def test_passing_diag_is_folded_in(tmp_path, monkeypatch):
    bin_dir = stand_in(tmp_path, monkeypatch, json.dumps(PASS))
    result = run(tmp_path, "h200", None, framework="none", dcgm_level=1, checks=["dcgm"])
    dcgm = outcome(result, "dcgm")
    assert dcgm["status"] == "pass"
    assert dcgm["figures"] == {
        "tests": 3, "passed": 2, "skipped": 1, "warned": 0, "failed": 0, "level": 1,
    }  # fmt: skip
    assert (bin_dir / "args").read_text().split() == ["diag", "-r", "1", "-i", "0", "-j"]


def test_failing_diag_fails_the_smoke_with_the_test_name(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, json.dumps(FAIL), code=226)
    result = run(tmp_path, "h200", None, framework="none", dcgm_level=1, checks=["dcgm", "health"])
    dcgm = outcome(result, "dcgm")
    assert dcgm["status"] == "fail"
    assert dcgm["reason"] == (
        "dcgmi diag failed 1 test(s): GPU Memory: Pending page retirements on GPU 0"
    )
    assert result.outputs["failed-checks"] == "dcgm"


def test_no_host_engine_is_a_skip_with_the_reason(tmp_path, monkeypatch):
    stand_in(
        tmp_path, monkeypatch, "Error: unable to connect to host engine. Host engine down?", 255
    )
    result = run(tmp_path, "h200", None, framework="none", dcgm_level=1, checks=["dcgm"])
    dcgm = outcome(result, "dcgm")
    assert dcgm["status"] == "skip"
    assert dcgm["reason"].startswith("dcgmi cannot reach the DCGM host engine: Error: unable")
    assert result.exit_code == 0


def test_absent_dcgmi_is_a_skip(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run(tmp_path, "h200", None, framework="none", dcgm_level=2, checks=["dcgm"])
    dcgm = outcome(result, "dcgm")
    assert (dcgm["status"], dcgm["reason"]) == (
        "skip",
        "dcgmi is not installed on this machine (DCGM absent)",
    )


def test_level_2_does_not_fit_the_default_budget(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, json.dumps(PASS))
    result = run(tmp_path, "h200", None, framework="none", dcgm_level=2, checks=["dcgm"])
    reason = outcome(result, "dcgm")["reason"]
    assert reason.startswith("skipped to keep the budget: needs ~120.0s")


@pytest.mark.parametrize(
    ("text", "code", "status"),
    [("not json at all", 1, "fail"), ("", 0, "skip"), ('{"DCGM Diagnostic": {}}', 1, "fail")],
)
def test_verdict_edges(text, code, status):
    kind = CheckError if status == "fail" else CheckSkipped
    with pytest.raises(kind):
        verdict(text, code)


def test_dcgm_covers_only_the_jobs_gpus(tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES=1,3 on four GPUs: DCGM gets -i 1,3, not every tenant's GPU."""
    bin_dir = stand_in(tmp_path, monkeypatch, json.dumps(PASS))
    four = FakeNvml(["h100-sxm"] * 4)
    result = run(tmp_path, four, visible="1,3", framework="none", dcgm_level=1, checks=["dcgm"])
    assert outcome(result, "dcgm")["status"] == "pass"
    assert (bin_dir / "args").read_text().split() == ["diag", "-r", "1", "-i", "1,3", "-j"]


def test_a_dcgm_run_past_the_budget_is_a_skip_not_a_fail(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, script="exec sleep 60\n")
    ctx = Context({}, time.monotonic() + 1.0, time.monotonic)
    with pytest.raises(CheckSkipped, match="did not finish within the 1s left of the budget"):
        dcgm.run(1, ctx, [0])


def test_a_dcgmi_printing_megabytes_then_hanging_is_cut_at_once(tmp_path, monkeypatch):
    """Before: every byte was kept until the budget ran out (then a "did not finish" skip);
    now the output is capped as it comes and the child killed, with its background writer."""
    stand_in(tmp_path, monkeypatch, script="head -c 2000000 /dev/zero\nsleep 600\n")
    monkeypatch.setattr(untrusted_json, "MAX_BYTES", 1 << 20)
    ctx = Context({}, time.monotonic() + 20.0, time.monotonic)
    with pytest.raises(CheckSkipped, match=r"^dcgmi diag printed over 1048576 bytes \(killed\)"):
        dcgm.run(1, ctx, [0])


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # past any parser's recursion: was a RecursionError
        '{"tests": ' * 10_000 + "1" + "}" * 10_000,
        '{"status": "Fail", "warnings": ' + "9" * 5_000 + "}",  # Python's int-string limit
    ],
)
def test_hostile_dcgmi_output_is_no_verdict_not_a_traceback(text):
    """dcgmi's output is read through untrusted_json: nesting and numbers are bounded."""
    with pytest.raises(CheckSkipped, match="printed no JSON verdict"):
        verdict(text, 0)
    with pytest.raises(CheckError, match="dcgmi diag exited 1"):
        verdict(text, 1)
