"""gpu-ci's own errors are never a verdict on the GPU: a budget the OS cannot wait on is refused
as bad input, a child's wait never overflows, and an exception from our own code (not a
framework's CUDA error) fails the check without quarantining a healthy runner."""

from __future__ import annotations

import json
import sys

import pytest
from smoke_helpers import outcome, run
from test_smoke_cli import smoke

from gpuci import quarantine, untrusted_child
from gpuci.errors import InputError
from gpuci.gpu._smoke.checks import Budget, Planned, run_check
from gpuci.gpu.options import SmokeInputs
from gpuci.inputs import build, resolve, specs_of
from gpuci.runtime import Result

PASS = json.dumps({"DCGM GPU Diagnostic": {"test_categories": []}})


def smoke_inputs(**flags: str) -> SmokeInputs:
    return build(SmokeInputs, resolve(specs_of(SmokeInputs), flags, {}))


@pytest.mark.parametrize(
    ("flag", "value", "most"),
    [("budget-seconds", "1e30", "86400"), ("max-throttle-percent", "500", "100")],
)
def test_an_absurd_budget_or_throttle_share_is_bad_input(flag, value, most):
    """1e30 s overflowed select() in the dcgm check; 500 % switched the throttle check off."""
    with pytest.raises(InputError) as refused:
        smoke_inputs(**{flag: value})
    assert f"above the maximum {most}" in refused.value.message
    assert refused.value.hint == f"set {flag} to at most {most}"
    assert smoke_inputs(**{flag: most})  # the maximum itself is accepted


def test_the_cli_refuses_a_budget_of_1e30_in_one_line(tmp_path):
    proc = smoke(tmp_path, "--framework", "none", "--budget-seconds", "1e30",
                 GPUCI_FAKE_NVML="h200")  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "budget-seconds" in ln]
    assert len(said) == 1 and "above the maximum 86400" in said[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("timeout", [1e30, float("inf"), float("nan")])
def test_a_child_given_a_huge_timeout_still_runs(timeout):
    code, out = untrusted_child.run([sys.executable, "-c", "print('ok')"], timeout=timeout)
    assert (code, out.strip()) == (0, "ok")


def failed_with(exc: Exception) -> dict:
    def check(ctx):
        raise exc

    got = run_check(Planned("dcgm", None, {}, lambda: 0, check), Budget(30))
    assert got.status == "fail"
    return got.to_dict()


def findings(*checks: dict) -> list[quarantine.Finding]:
    result = Result(command="gpu-smoke", exit_code=1)
    result.report = {"checks": list(checks)}
    return quarantine.hardware_findings(result)


@pytest.mark.parametrize(
    "exc",
    [
        OverflowError("timestamp out of range for platform time_t"),
        TypeError("unsupported operand"),
        KeyError("figures"),
        NotImplementedError("no such device call"),
    ],
)
def test_our_own_error_fails_the_check_but_is_no_hardware_finding(exc):
    check = failed_with(exc)
    assert check["reason"].startswith("gpu-ci's own error, not a finding about the GPU: ")
    assert type(exc).__name__ in check["reason"] and "\n" not in check["reason"]
    assert findings(check) == []


def test_a_framework_cuda_error_is_still_a_hardware_finding():
    cuda = failed_with(RuntimeError("CUDA error: an illegal memory access was encountered"))
    oom = failed_with(MemoryError("Out of memory allocating 1024 bytes"))
    assert cuda["reason"].startswith("RuntimeError: CUDA error: an illegal memory access")
    assert [f.label for f in findings(cuda, oom)] == ["dcgm", "dcgm"]


def test_an_overflow_inside_the_dcgm_check_leaves_the_runner_in_the_pool(tmp_path, monkeypatch):
    """The reviewer's run: dcgm's wait overflowed, and the smoke said 'take this node out'."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text(f"#!/bin/sh\necho '{PASS}'\n")
    (bin_dir / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")

    def overflows(*args, **kwargs):
        raise OverflowError("timestamp out of range for platform time_t")

    monkeypatch.setattr(untrusted_child, "run", overflows)
    result = run(tmp_path, "h200", None, framework="none", dcgm_level=1, checks=["dcgm"])
    assert outcome(result, "dcgm")["status"] == "fail" and result.exit_code == 1
    assert quarantine.hardware_findings(result) == []
    assert "the node is not suspected" in result.headline
    assert "take this node out" not in result.headline


def test_a_check_failed_by_our_own_error_is_no_failed_gpu_in_the_health_record():
    """Pods placement steers away from GPUs whose health records failed: a check that failed
    on gpu-ci's own error (or a framework that could not start) must not count against one."""
    from gpuci.gpu._health_record import verdicts

    own = failed_with(OverflowError("timestamp out of range for platform time_t"))
    broken = {**own, "name": "context", "reason": "no CUDA context: libcudart missing"}
    real = failed_with(RuntimeError("CUDA error: an illegal memory access was encountered"))
    result = Result(command="gpu-smoke", exit_code=1)
    result.report = {"checks": [own, broken], "gpus": [{"index": 0, "uuid": "GPU-0"}]}
    (record,) = verdicts(result, {}, 0.0)
    assert record["passed"] and record["failed_checks"] == []
    result.report["checks"].append(real)
    (record,) = verdicts(result, {}, 0.0)
    assert not record["passed"] and record["failed_checks"] == ["dcgm"]
