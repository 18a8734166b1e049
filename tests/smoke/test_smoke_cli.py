"""gpu-smoke as a user runs it: a subprocess, fake NVML by env, exit codes, report, dry run."""

from __future__ import annotations

import json
from pathlib import Path

from gpuci_testing import clean_env, run_cli, run_cli_here, run_python

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'boto3', 'botocore', 'tenacity', 'httpx', 'yaml'}:
            raise ImportError(f'{name} is blocked: a GPU image does not have it')
        return None
sys.meta_path.insert(0, Block())
from gpuci.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ('torch', 'cupy', 'numpy', 'boto3', 'tenacity', 'httpx', 'yaml')
               if m in sys.modules)
print('LOADED', ','.join(heavy), file=sys.stderr)
sys.exit(code)
"""


def smoke(tmp_path: Path, *args: str, process: bool = False, **env: str):
    """``gpuci gpu-smoke ARGS`` with ``env``, its journal in ``tmp_path``: in this process
    (:func:`run_cli_here`), or with ``process`` in a fresh interpreter of its own."""
    environ = clean_env(GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"), **env)
    if process:
        return run_cli("gpu-smoke", *args, env=environ, cwd=tmp_path, timeout=60)
    return run_cli_here("gpu-smoke", *args, env=environ, cwd=tmp_path)


def test_health_only_run_passes_and_writes_the_report(tmp_path):
    proc = smoke(tmp_path, "--json", "--framework", "none", GPUCI_FAKE_NVML="h200,h200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["outputs"]["passed"] == "true"
    assert body["outputs"]["failed-checks"] == ""
    report = Path(body["outputs"]["report"])
    assert report == tmp_path / "gpuci-smoke-report.json"
    on_disk = json.loads(report.read_text())
    assert on_disk["passed"] is True
    assert [c["name"] for c in on_disk["checks"] if c["status"] == "pass"] == ["health", "health"]
    skips = [c for c in on_disk["checks"] if c["status"] == "skip"]
    assert skips and all(
        c["reason"] == "framework none: health checks only, no load" for c in skips
    )
    assert not list(tmp_path.glob("*.incomplete"))
    assert "#### gpu-smoke: GPU 1 NVIDIA H200" in body["summary_markdown"]
    assert any("health checks only" in a["message"] for a in body["annotations"])
    journal = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert journal[-1]["kind"] == "gpu-smoke" and journal[-1]["passed"] is True


def test_xid_across_the_process_boundary_fails_with_exit_1(tmp_path):
    nvml = "h100-sxm:xid=79,h100-sxm"
    proc = smoke(tmp_path, "--json", "--framework", "none", process=True, GPUCI_FAKE_NVML=nvml)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["outputs"]["passed"] == "false"
    assert body["outputs"]["failed-checks"] == "gpu0:health"
    assert body["headline"] == (
        "1 check(s) failed: gpu0:health (XID 79 raised during the run) (fix: take this node out "
        f"of the runner pool and rerun elsewhere; the figures are in {body['outputs']['report']})"
    )


def test_github_outputs_are_rendered_by_the_runtime(tmp_path):
    out = tmp_path / "gh_output"
    summary = tmp_path / "gh_summary"
    proc = smoke(
        tmp_path,
        "--framework",
        "none",
        GPUCI_FAKE_NVML="h200:ecc+=1",
        GITHUB_ACTIONS="true",
        GITHUB_OUTPUT=str(out),
        GITHUB_STEP_SUMMARY=str(summary),
    )
    assert proc.returncode == 1
    text = out.read_text()
    assert "passed<<" in text and "\nfalse\n" in text
    assert "gpu0:health" in text
    assert (
        "::error title=gpu-smoke::gpu0:health: volatile uncorrected ECC errors rose" in proc.stdout
    )
    assert "| health | ❌ fail |" in summary.read_text()


def test_no_driver_is_exit_3_in_one_line(tmp_path):
    proc = smoke(tmp_path, GPUCI_FAKE_NVML="no-library")
    assert proc.returncode == 3
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("gpu-smoke: infrastructure error: NVML library not found")
    assert "require-gpu" not in proc.stdout  # gpu-setup's input; gpu-smoke has none
    assert "--dry-run" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    body = json.loads(smoke(tmp_path, "--json", GPUCI_FAKE_NVML="no-driver").stdout)
    assert body["exit_code"] == 3 and body["outputs"]["passed"] == "false"
    report = json.loads(Path(body["outputs"]["report"]).read_text())
    assert report["passed"] is False and report["error"]["type"] == "NvmlUnavailable"
    zero = smoke(tmp_path, GPUCI_FAKE_NVML="none")
    assert zero.returncode == 3
    assert "no NVIDIA GPU found: NVML reports 0 devices" in zero.stdout


def test_dry_run_plans_and_writes_nothing(tmp_path):
    proc = smoke(tmp_path, "--dry-run", "--json", "--framework", "none", GPUCI_FAKE_NVML="h200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    plan = {p["check"]: p for p in body["report"]["plan"]}
    assert plan["health"]["would_run"] is True
    assert plan["memory"]["reason"] == "framework none: health only"
    assert plan["memory"]["params"]["memory_fraction"] == 0.9
    assert body["report"]["minimums"]["0"]["mem_bw_gbs"] == 2532
    assert not list(tmp_path.iterdir())  # no report, no journal


def test_dry_run_without_a_gpu_still_plans(tmp_path):
    proc = smoke(tmp_path, "--dry-run", "--checks", "gemm,memory", GPUCI_FAKE_NVML="no-driver")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no GPU here (NVML driver not loaded" in proc.stdout
    assert "a real run here would fail (exit 3)" in proc.stdout
    assert "| gemm |" in proc.stdout and "| membw |" not in proc.stdout
    body = json.loads(
        smoke(tmp_path, "--dry-run", "--json", GPUCI_FAKE_NVML="no-driver").stdout
    )  # nothing could run here, so the plan must not claim a pass
    assert body["outputs"]["passed"] == "false" and body["report"]["verdict"] == "fail"
    with_gpu = json.loads(smoke(tmp_path, "--dry-run", "--json", GPUCI_FAKE_NVML="h200").stdout)
    assert with_gpu["outputs"]["passed"] == "true" and with_gpu["report"]["verdict"] == "plan"


def test_bad_inputs_are_exit_2(tmp_path):
    proc = smoke(tmp_path, "--checks", "gemm,burn", GPUCI_FAKE_NVML="h200")
    assert proc.returncode == 2
    assert "unknown check(s) in checks: burn" in proc.stdout
    proc = smoke(tmp_path, "--checks", "dcgm", GPUCI_FAKE_NVML="h200")
    assert proc.returncode == 2 and "dcgm-level is 0" in proc.stdout


def test_wrong_typed_inputs_exit_2_in_one_line_before_any_gpu_is_read(tmp_path):
    """Parsed once at the edge into SmokeInputs: a bad type never reaches the run."""
    cases = [
        (("--budget-seconds", "soon"), {}, "input 'budget-seconds' (flag --budget-seconds)"),
        (("--dcgm-level", "3"), {}, "input 'dcgm-level' (flag --dcgm-level) is '3', not one of"),
        ((), {"INPUT_MEMORY-FRACTION": "lots"}, "input 'memory-fraction' (env INPUT_MEMORY"),
        (("--min-gemm-tflops", "-5"), {}, "below the minimum 0"),
        (("--memory-fraction", "1.5"), {}, "a fraction of free memory"),
    ]
    for args, env, said in cases:
        proc = smoke(tmp_path, *args, GPUCI_FAKE_NVML="h200", **env)
        assert proc.returncode == 2, (args, proc.stdout)
        first, *rest = proc.stdout.splitlines()
        assert first.startswith("gpu-smoke: bad input: ") and said in first, (args, proc.stdout)
        assert not any("input" in line for line in rest)  # the cause and the fix: one line
        assert "passed: false" in proc.stdout  # a boolean output is never empty
        assert "Traceback" not in proc.stdout + proc.stderr
        assert not (tmp_path / "gpuci-smoke-report.json").exists()


def test_runs_without_boto3_tenacity_httpx_or_yaml(tmp_path):
    env = clean_env(GPUCI_FAKE_NVML="h200", GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    args = ["gpu-smoke", "--framework", "none", "--report", str(tmp_path / "r.json")]
    proc = run_python("-c", BLOCKER, *args, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LOADED \n" in proc.stderr or proc.stderr.rstrip().endswith("LOADED")
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is True


def test_dry_run_in_process_names_skips_and_estimates(tmp_path):
    from smoke_helpers import run

    from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend

    result = run(tmp_path, "l4", NumpyBackend(), dry_run=True)
    plan = {p["check"]: p for p in result.report["plan"]}
    assert plan["nccl"]["reason"] == "needs 2 or more GPUs, 1 here"
    assert plan["gemm"]["would_run"] and plan["gemm"]["estimate_s"] > 0
    summary = "\n".join(result.summary)
    # an L4 has no measured sustained figure: copy and GEMM reported, not judged
    assert "least device copy bandwidth not judged, least FP16 GEMM not judged" in summary
    assert "device-to-host 15.8 GB/s" in summary  # a margin below host-to-device's 18.9
    assert not (tmp_path / "smoke.json").exists()
    reads = plan["health"]["params"]
    assert set(reads) == {"when", "ecc", "memory_repair", "pcie_replays", "xid_events",
                          "clock_events", "throttle_counters", "power_and_clocks", "nvlink",
                          "unreadable"}  # fmt: skip
    assert "max-throttle-percent" in reads["throttle_counters"] and "down" in reads["nvlink"]
    assert "retired pages" in reads["memory_repair"] and "remapped rows" in reads["memory_repair"]
    assert "rate" in reads["pcie_replays"] and "consecutive" in reads["clock_events"]
    assert "ecc=volatile uncorrected ECC errors" in summary


def test_auto_framework_on_fake_nvml_runs_health_only(tmp_path):
    proc = smoke(tmp_path, "--json", GPUCI_FAKE_NVML="l4")  # even where torch is installed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["report"]["framework"] == "none"
    skipped = {c["reason"] for c in body["report"]["checks"] if c["status"] == "skip"}
    assert skipped == {"fake NVML (GPUCI_FAKE_NVML): no real GPU to load; health checks only"}


HUNG_GEMM = """
import os, sys, threading
from functools import partial
from gpuci.gpu._smoke import command, schedule, smoke
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend, NumpyDevice
class HungGemm(NumpyDevice):
    def matmul(self, a, b):
        threading.Event().wait()  # the kernel never completes
backend = NumpyBackend()
backend.device_class = HungGemm
command.smoke = partial(smoke, backend=backend)
schedule.GRACE_SECONDS = 0.0  # the deadline is the budget itself: the test need not wait
from gpuci.cli import main
sys.exit(main(sys.argv[1:]))
"""


HUNG_START = """
import sys, threading
from functools import partial
from gpuci.gpu._smoke import command, schedule, smoke
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend
class HungInit(NumpyBackend):
    def device_count(self):
        threading.Event().wait()  # cuInit (or the import) never returns
command.smoke = partial(smoke, backend=HungInit())
schedule.GRACE_SECONDS = schedule.START_SECONDS = 0.0
from gpuci.cli import main
sys.exit(main(sys.argv[1:]))
"""

HUNG_HEALTH = """
import sys, threading
from functools import partial
from gpuci.gpu._nvml_abi import VIOLATION_POLICIES
from gpuci.gpu._smoke import command, schedule, smoke
from gpuci.gpu.fake.nvml import FakeNvml
class StuckAfterTheLoad(FakeNvml):
    reads = 0
    def nvmlDeviceGetViolationStatus(self, handle, policy):
        StuckAfterTheLoad.reads += 1
        if StuckAfterTheLoad.reads > len(VIOLATION_POLICIES):  # the read after the load
            threading.Event().wait()  # the GPU fell off under the load: NVML never answers
        return super().nvmlDeviceGetViolationStatus(handle, policy)
command.smoke = partial(smoke, nvml=StuckAfterTheLoad(["h200"]))
schedule.GRACE_SECONDS = 0.0
from gpuci.cli import main
sys.exit(main(sys.argv[1:]))
"""


HUNG_XID_SET_UP = HUNG_HEALTH.replace(
    "def nvmlDeviceGetViolationStatus(self, handle, policy):",
    "def nvmlDeviceRegisterEvents(self, handle, types, event_set):\n"
    "        threading.Event().wait()  # the driver never answers\n"
    "    def nvmlDeviceGetViolationStatus(self, handle, policy):",
)

HUNG_XID_FREE = HUNG_HEALTH.replace(
    "def nvmlDeviceGetViolationStatus(self, handle, policy):",
    "def nvmlEventSetFree(self, event_set):\n"
    "        threading.Event().wait()  # the driver stuck as the load ended\n"
    "    def nvmlDeviceGetViolationStatus(self, handle, policy):",
)

SLOW_START = (
    HUNG_START.replace(
        "threading.Event().wait()  # cuInit (or the import) never returns",
        "time.sleep(4)  # a cold import and CUDA's init: slow, past budget and grace, not hung\n"
        "        return super().device_count()",
    )
    .replace("import sys, threading", "import sys, threading, time")
    .replace(
        "schedule.GRACE_SECONDS = schedule.START_SECONDS = 0.0", "schedule.GRACE_SECONDS = 2.0"
    )
)
HUNG_HOLDING_THE_GIL = (
    HUNG_START.replace(
        "threading.Event().wait()  # cuInit (or the import) never returns",
        "ctypes.PyDLL(None).sleep(3600)  # cuInit in a C call that never lets the GIL go",
    )
    .replace("import sys, threading", "import ctypes, sys, threading")
    .replace(
        "schedule.START_SECONDS = 0.0",
        "schedule.START_SECONDS = 0.0\nschedule.BACKSTOP_SECONDS = 1.0",
    )
)


def hung_smoke(
    tmp_path: Path, *more: str, script: str = HUNG_GEMM, checks: str = "context,gemm,memory,health"
) -> tuple[int, dict]:
    """gpu-smoke (the CLI) on one GPU whose GEMM (or ``script``'s hang) never returns: exit
    code, --json body."""
    environ = clean_env(GPUCI_FAKE_NVML="h200", GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    args = ["gpu-smoke", "--json", "--checks", checks,
            "--budget-seconds", "5", "--report", str(tmp_path / "r.json"), *more]  # fmt: skip
    # timeout: a guard only; the watchdog ends the process at the deadline
    proc = run_python("-c", script, *args, env=environ, cwd=tmp_path, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_check_that_never_returns_ends_the_smoke_as_failed_naming_it(tmp_path):
    """A hung kernel runs in this process and cannot be interrupted: the watchdog reports it
    as a failed check, outputs and report written, and ends the process with exit 1."""
    code, body = hung_smoke(tmp_path)
    assert code == 1, body
    assert body["outputs"]["passed"] == "false"
    assert body["outputs"]["failed-checks"] == "gpu0:gemm"
    assert body["outputs"]["skipped-checks"] == "gpu0:memory"
    assert body["headline"].startswith(
        "1 check(s) failed: gpu0:gemm (did not return within 0s past the 5s budget: hung in "
        "the GPU or its driver"
    )
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["passed"] is False and on_disk["failed_checks"] == ["gpu0:gemm"]
    assert [c["status"] for c in on_disk["checks"] if c["name"] == "context"] == ["pass"]
    said = [a["message"] for a in body["annotations"]]
    assert "a check hung: the smoke ended there, health after the load not read" in said


def test_a_hang_is_recorded_in_the_health_store_before_the_process_ends(tmp_path):
    """gpu-smoke's steps after a verdict (the health record, quarantine) run on a hang too:
    the watchdog ends the process, so the command hands them to the smoke."""
    store = tmp_path / "health"
    code, body = hung_smoke(tmp_path, "--health-store", store.as_uri())
    assert code == 1 and body["outputs"]["failed-checks"] == "gpu0:gemm"
    (verdict,) = [json.loads(p.read_text()) for p in store.rglob("*.json")]
    assert verdict["passed"] is False, verdict


def test_an_nvml_read_that_never_returns_after_the_load_ends_the_smoke_naming_it(tmp_path):
    """Health after the load reads NVML on the run's own thread: a GPU lost under the load
    held that read, and the step, past its budget for ever (the watchdog watched only the
    load). Now the read is watched too: the health check fails as hung, exit 1."""
    code, body = hung_smoke(tmp_path, script=HUNG_HEALTH, checks="health")
    assert code == 1, body
    assert body["outputs"]["failed-checks"] == "gpu0:health"
    assert "did not return within 0s" in body["headline"]
    assert "NVML read that never completes" in body["headline"]


def test_a_framework_that_never_finishes_starting_ends_the_smoke_by_its_budget(tmp_path):
    """The framework's import, CUDA's init and the device query ran before the watchdog: a
    stuck cuInit held the step past its budget for ever, saying nothing. Now it fails
    ``context`` at the deadline, as the environment's fault (no quarantine: an import from a
    stuck filesystem hangs the same way)."""
    code, body = hung_smoke(tmp_path, "--on-failure", "quarantine", script=HUNG_START)
    assert code == 1, body
    assert body["outputs"]["failed-checks"] == "context"
    assert "numpy never finished starting" in body["headline"]
    said = " ".join(a["message"] for a in body["annotations"])
    assert "runner not quarantined" in said and "quarantined:" not in said.replace(
        "not quarantined:", ""
    )


def test_a_framework_start_slower_than_the_budget_is_not_called_hung(tmp_path):
    """A cold ``import torch`` and CUDA's init can outlast the budget (30 s by default) plus
    the 20 s grace on a healthy node: the start was failed as hung at that deadline, exit 1.
    It gets START_SECONDS from its start; once started, checks past the budget are skipped."""
    code, body = hung_smoke(tmp_path, "--budget-seconds", "1", script=SLOW_START)
    assert "never finished starting" not in json.dumps(body), body
    assert "context" not in body["outputs"]["failed-checks"], body
    assert code == 0, body


def test_an_xid_event_set_up_that_never_returns_ends_the_smoke_naming_health(tmp_path):
    """The XID event set is made on the run's own thread before the load: a driver that
    never answers held the step there past its budget. Now it is watched: health fails."""
    code, body = hung_smoke(tmp_path, script=HUNG_XID_SET_UP, checks="health")
    assert code == 1, body
    assert body["outputs"]["failed-checks"] == "health"
    assert "hung in the GPU or its driver" in body["headline"]


def test_an_xid_event_set_free_that_never_returns_ends_the_smoke_naming_health(tmp_path):
    """The XID listener's thread ended in time, but the set's last drain and its free run on
    the run's own thread before health is read, unwatched: a driver stuck as the load ended
    held the step there past its budget. Now they are watched: health fails as hung."""
    code, body = hung_smoke(tmp_path, script=HUNG_XID_FREE, checks="health")
    assert code == 1, body
    assert body["outputs"]["failed-checks"] == "health"
    assert "hung in the GPU or its driver" in body["headline"]


def test_a_framework_start_hung_holding_the_gil_still_ends_the_step(tmp_path):
    """torch's device query calls cuInit holding Python's GIL: stuck there, the watchdog's
    thread never ran and the step hung past its budget for ever. faulthandler's C thread
    ends it past the deadline instead: exit 1, the stuck call's stack on stderr."""
    environ = clean_env(GPUCI_FAKE_NVML="h200", GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    args = ["gpu-smoke", "--json", "--checks", "context,gemm,memory,health",
            "--budget-seconds", "1", "--report", str(tmp_path / "r.json")]  # fmt: skip
    proc = run_python("-c", HUNG_HOLDING_THE_GIL, *args, env=environ, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Timeout" in proc.stderr and "in device_count" in proc.stderr
