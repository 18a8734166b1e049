"""The real pynvml ctypes path, against a tiny C ``libnvidia-ml.so.1`` built here with gcc."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STUB = r"""
#include <string.h>
/* nvml.h return codes */
#define NVML_SUCCESS 0
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#ifndef INIT_RESULT
#define INIT_RESULT NVML_ERROR_DRIVER_NOT_LOADED
#endif
int nvmlInitWithFlags(unsigned int flags) { return INIT_RESULT; }
int nvmlInit_v2(void) { return INIT_RESULT; }
int nvmlInit(void) { return INIT_RESULT; }
int nvmlShutdown(void) { return NVML_SUCCESS; }
const char *nvmlErrorString(int r) { return r == 9 ? "Driver Not Loaded" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 0; return NVML_SUCCESS; }
int nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    strncpy(v, "550.54.15", len); return NVML_SUCCESS; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return NVML_SUCCESS; }
"""


def build(tmp_path: Path, name: str, code: str, *flags: str) -> Path:
    """``code`` built with gcc (and ``flags``) as ``tmp_path/name/libnvidia-ml.so.1``."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not installed: cannot build the stub libnvidia-ml.so.1")
    folder = tmp_path / name
    folder.mkdir()
    source = folder / "stub.c"
    source.write_text(code)
    subprocess.run(
        [gcc, "-shared", "-fPIC", *flags, "-o", str(folder / "libnvidia-ml.so.1"), str(source)],
        check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    return folder


def test_driver_not_loaded_through_real_bindings(cli, tmp_path: Path) -> None:
    lib = build(tmp_path, "noload", STUB, "-DINIT_RESULT=9")
    proc = cli(LD_LIBRARY_PATH=str(lib))
    assert proc.returncode == 3
    assert proc.stdout.startswith("gpu-setup: infrastructure error: NVML driver not loaded")
    assert proc.stdout.count("\n") == 1 and "Traceback" not in proc.stdout + proc.stderr
    relaxed = cli("--json", "--require-gpu", "false", LD_LIBRARY_PATH=str(lib))
    assert relaxed.returncode == 0


def test_driver_without_gpus_through_real_bindings(cli, cli_json, tmp_path: Path) -> None:
    lib = build(tmp_path, "empty", STUB, "-DINIT_RESULT=0")
    proc = cli("--json", LD_LIBRARY_PATH=str(lib))
    body = cli_json(proc)
    assert proc.returncode == 1 and body["headline"].startswith("2 check(s) failed: require-gpu")
    assert body["outputs"]["driver-version"] == "550.54.15"
    assert body["outputs"]["cuda-version"] == "12.4"
    cpu = cli_json(cli("--json", "--require-gpu", "false", LD_LIBRARY_PATH=str(lib)))
    assert cpu["exit_code"] == 0 and cpu["report"]["nvml"]["source"] == "nvml"


ONE_GPU = r"""
#include <string.h>
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } mem_v2;
typedef struct { unsigned long long total, free, used; } mem_v1;
static int dev;
int nvmlInitWithFlags(unsigned int flags) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "Unknown Error"; }
int nvmlSystemGetDriverVersion(char *v, unsigned int n) { strncpy(v, "560.35.03", n); return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12060; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) { *h = &dev; return i ? 2 : 0; }
int nvmlDeviceGetName(void *h, char *s, unsigned int n) {
    strncpy(s, "NVIDIA Stub H100", n); return 0; }
int nvmlDeviceGetUUID(void *h, char *s, unsigned int n) {
    strncpy(s, "GPU-0a1b2c3d-0000-1111-2222-333344445555", n); return 0; }
int nvmlDeviceGetMemoryInfo_v2(void *h, mem_v2 *m) {
    if (m->version != 0x02000028) return 25;
    m->total = 85520809984ULL; m->reserved = 577765376ULL; m->used = 5ULL << 20;
    m->free = m->total - m->reserved - m->used; return 0; }
int nvmlDeviceGetCudaComputeCapability(void *h, int *a, int *b) { *a = 9; *b = 0; return 0; }
int nvmlDeviceGetArchitecture(void *h, unsigned int *a) { *a = 9; return 0; }
int nvmlDeviceGetMigMode(void *h, unsigned int *c, unsigned int *p) { *c = 0; *p = 0; return 0; }
int nvmlDeviceGetEccMode(void *h, int *c, int *p) { *c = 1; *p = 1; return 0; }
int nvmlDeviceGetTotalEccErrors(void *h, int t, int c, unsigned long long *n) {
    *n = t == 1 ? 3 : 0; return 0; }
int nvmlDeviceGetRemappedRows(void *h, unsigned *c, unsigned *u, unsigned *p, unsigned *f) {
    *c = 0; *u = 1; *p = 1; *f = 0; return 0; }
int nvmlDeviceGetRetiredPagesPendingStatus(void *h, int *p) { return 3; /* NotSupported */ }
int nvmlDeviceGetPcieReplayCounter(void *h, unsigned int *n) { return 3; }
int nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned int *g) { *g = 5; return 0; }
int nvmlDeviceGetPowerManagementLimit(void *h, unsigned int *mw) { *mw = 700000; return 0; }
int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r) {
    *r = 0x48; return 0; }
int nvmlDeviceGetIndex(void *h, unsigned int *i) { *i = 0; return 0; }
int nvmlDeviceGetSupportedEventTypes(void *h, unsigned long long *t) { *t = 0x8; return 0; }
int nvmlEventSetCreate(void **s) { *s = &dev; return 0; }
int nvmlDeviceRegisterEvents(void *h, unsigned long long t, void *s) { return 0; }
typedef struct { void *device; unsigned long long type, data; unsigned int gi, ci; } event;
static int waits;
int nvmlEventSetWait_v2(void *s, event *e, unsigned int ms) {
    if (waits++) return 10; /* Timeout */
    e->device = &dev; e->type = 0x8; e->data = 79; e->gi = e->ci = 0xFFFFFFFF; return 0; }
int nvmlEventSetFree(void *s) { return 0; }
"""

XID_PROBE = """
from gpuci.gpu._nvml import open_nvml
with open_nvml({}) as nvml, nvml.watch_xid() as xids:
    print(xids.watched, xids.wait(0.1), xids.wait(0.01))
"""


@pytest.fixture
def one_gpu_lib(tmp_path: Path) -> Path:
    return build(tmp_path, "onegpu", ONE_GPU)


def test_one_gpu_snapshot_through_real_bindings(cli, cli_json, one_gpu_lib: Path) -> None:
    """Structs, out-pointers, NotSupported and missing symbols, all through real ctypes."""
    folder = one_gpu_lib
    proc = cli("--json", "--min-memory-gb", "80", "--min-cuda", "12.4", LD_LIBRARY_PATH=str(folder))
    body = cli_json(proc)
    assert proc.returncode == 1, body["headline"]
    assert body["headline"] == (
        "1 check(s) failed: fail-on-ecc-errors (GPU 0: 3 volatile uncorrected ECC errors, "
        "row remapping pending (reset the GPU)) "
        "(fix: reset the GPU or take this node out of the runner pool)"
    )
    assert body["outputs"]["visible-devices"] == "GPU-0a1b2c3d-0000-1111-2222-333344445555"
    assert body["outputs"]["memory-gb"] == "85.5" and body["outputs"]["cuda-version"] == "12.6"
    (gpu,) = body["report"]["nvml"]["gpus"]
    assert gpu["name"] == "NVIDIA Stub H100" and gpu["architecture"] == "Hopper"
    assert gpu["compute_capability"] == "9.0" and gpu["mig_enabled"] is False
    assert gpu["memory_free"] == 85520809984 - 577765376 - (5 << 20)
    assert gpu["pcie_gen_current"] == 5 and gpu["pcie_gen_max"] is None  # symbol missing
    assert gpu["power_limit_w"] == 700
    health = gpu["health"]
    assert health["pcie_replay_counter"] is None and health["retired_pages_pending"] is None
    assert health["remapped_rows_uncorrectable"] == 1 and health["remapped_rows_pending"] is True
    assert health["clock_events"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert gpu["notes"] == [] and body["annotations"][0]["level"] == "error"


def test_xid_wait_through_real_bindings(one_gpu_lib: Path, gpu_env, tmp_path: Path) -> None:
    env = gpu_env(tmp_path, LD_LIBRARY_PATH=str(one_gpu_lib))
    proc = subprocess.run(
        [sys.executable, "-c", XID_PROBE], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "[0] XidEvent(gpu_index=0, uuid='GPU-0a1b2c3d-0000-1111-2222-333344445555', xid=79, "
        "gpu_instance_id=None) None"
    )
