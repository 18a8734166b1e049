"""The real pynvml ctypes path, against a tiny C ``libnvidia-ml.so.1`` built here with gcc."""

from __future__ import annotations

import shutil
import subprocess
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


def build(tmp_path: Path, name: str, init_result: int) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not installed: cannot build the stub libnvidia-ml.so.1")
    folder = tmp_path / name
    folder.mkdir()
    source = folder / "stub.c"
    source.write_text(STUB)
    subprocess.run(
        [gcc, "-shared", "-fPIC", f"-DINIT_RESULT={init_result}", "-o",
         str(folder / "libnvidia-ml.so.1"), str(source)],
        check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    return folder


def test_driver_not_loaded_through_real_bindings(cli, tmp_path: Path) -> None:
    lib = build(tmp_path, "noload", 9)
    proc = cli(LD_LIBRARY_PATH=str(lib))
    assert proc.returncode == 3
    assert proc.stdout.startswith("gpu-setup: infrastructure error: NVML driver not loaded")
    assert proc.stdout.count("\n") == 1 and "Traceback" not in proc.stdout + proc.stderr
    relaxed = cli("--json", "--require-gpu", "false", LD_LIBRARY_PATH=str(lib))
    assert relaxed.returncode == 0


def test_driver_without_gpus_through_real_bindings(cli, cli_json, tmp_path: Path) -> None:
    lib = build(tmp_path, "empty", 0)
    proc = cli("--json", LD_LIBRARY_PATH=str(lib))
    body = cli_json(proc)
    assert proc.returncode == 1 and body["headline"].startswith("2 check(s) failed: require-gpu")
    assert body["outputs"]["driver-version"] == "550.54.15"
    assert body["outputs"]["cuda-version"] == "12.4"
    cpu = cli_json(cli("--json", "--require-gpu", "false", LD_LIBRARY_PATH=str(lib)))
    assert cpu["exit_code"] == 0 and cpu["report"]["nvml"]["source"] == "nvml"
