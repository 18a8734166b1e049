"""The framework backends' identity and choice, with stand-in torch and cupy modules.

No GPU here: these stand-ins answer what torch and cupy answer on one (a MIG device's UUID,
an older torch without ``uuid``, cupy's C-string UUID cut at a zero byte), so the matching to
NVML is tested end to end through :func:`match_targets`.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from smoke_helpers import backend_reducing_with, matched, outcome, run

from gpuci.gpu import _smoke as smoke
from gpuci.gpu._smoke import allreduce, backends
from gpuci.gpu._smoke.backends import BackendUnavailable, resolve_framework
from gpuci.gpu._smoke.backends import torch_backend as tb
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend
from gpuci.gpu._smoke.checks import OWN_ERROR_REASON, about_the_gpu
from gpuci.gpu.fake.nvml import FakeNvml


def stand_in_torch(props: list[SimpleNamespace]) -> SimpleNamespace:
    cuda = SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: len(props),
        get_device_properties=lambda i: props[i],
    )
    return SimpleNamespace(__version__="2.1.0", cuda=cuda, version=SimpleNamespace(cuda="12.1"))


def test_torch_mig_uuid_is_not_turned_into_a_gpu_uuid(monkeypatch):
    fake = FakeNvml(["a100-mig"])
    mig = fake.devices[0].migs[0].uuid
    props = [SimpleNamespace(uuid=mig.removeprefix("MIG-"), pci_bus_id=0x18)]
    monkeypatch.setattr(tb, "_torch", lambda: stand_in_torch(props))
    backend = tb.TorchBackend()
    assert backend.device_uuid(0) == mig.removeprefix("MIG-")  # no "GPU-" glued on
    (target,), notes = matched(backend, fake)
    assert target.name == "NVIDIA A100-SXM4-40GB MIG 3g.20gb" and notes == []


def test_older_torch_without_uuid_matches_by_pci_bus_id(monkeypatch):
    fake = FakeNvml(["h100-sxm", "h100-sxm", "h100-sxm"])
    # CUDA_VISIBLE_DEVICES=2: one device, on bus 0x3a; torch 1.x has no ``uuid``
    props = [SimpleNamespace(pci_bus_id=0x3A, pci_device_id=0, pci_domain_id=0)]
    monkeypatch.setattr(tb, "_torch", lambda: stand_in_torch(props))
    backend = tb.TorchBackend()
    assert backend.device_uuid(0) is None
    assert backend.device_pci_bus_id(0) == "0000:3a:00.0"
    (target,), notes = matched(backend, fake)
    assert target.nvml_index == 2 and notes == []


def test_cupy_uuid_cut_at_a_zero_byte_matches_by_pci_bus_id(monkeypatch):
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    whole = bytes.fromhex(fake.devices[1].uuid.removeprefix("GPU-").replace("-", ""))
    cut = whole[:3] + b"\0" + whole[4:]  # what the GPU's UUID looks like with a zero byte
    runtime = SimpleNamespace(
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {"uuid": cut.split(b"\0")[0], "name": b"H100"},
        deviceGetPCIBusId=lambda i: "0000:2A:00.0",
        CUDARuntimeError=RuntimeError,
    )
    cupy = SimpleNamespace(__version__="13.0.0", cuda=SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    from gpuci.gpu._smoke.backends.cupy_backend import CupyBackend

    backend = CupyBackend()
    assert backend.device_uuid(0) is None  # three bytes are nobody's UUID
    (target,), notes = matched(backend, fake)
    assert target.nvml_index == 1 and notes == []
    runtime.getDeviceProperties = lambda i: {"uuid": whole}
    assert backend.device_uuid(0) == fake.devices[1].uuid.removeprefix("GPU-")


def test_auto_prefers_a_working_cupy_over_a_cpu_only_torch():
    both = {"torch", "cupy"}.__contains__
    assert resolve_framework("auto", both, cpu_only_torch=lambda: True) == "cupy"
    assert resolve_framework("auto", both, cpu_only_torch=lambda: False) == "torch"
    only_torch = {"torch"}.__contains__
    assert resolve_framework("auto", only_torch, cpu_only_torch=lambda: True) == "torch"


def test_cpu_only_torch_is_read_from_its_version_file(tmp_path, monkeypatch):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    spec = SimpleNamespace(submodule_search_locations=[str(pkg)])
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: spec)
    (pkg / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert backends.torch_is_cpu_only() is True
    (pkg / "version.py").write_text("__version__ = '2.13.0'\ncuda: Optional[str] = '12.8'\n")
    assert backends.torch_is_cpu_only() is False


def test_auto_falls_back_to_cupy_when_torch_cannot_start_cuda(monkeypatch):
    def load(name):
        if name == "torch":
            raise BackendUnavailable("torch 2.13.0+cpu is a CPU-only build")
        return NumpyBackend()

    monkeypatch.setattr(backends, "load_backend", load)
    monkeypatch.setattr(smoke, "installed", lambda name: name == "cupy")
    backend, framework = smoke._load_backend("torch", "auto")
    assert framework == "cupy" and isinstance(backend, NumpyBackend)
    with pytest.raises(BackendUnavailable, match="CPU-only"):
        smoke._load_backend("torch", "torch")  # asked for torch by name: no substitute


def test_an_all_reduce_that_cannot_start_fails_with_its_reason():
    answer = allreduce.run_child("no_such_module_here:reduce", [0, 1], 8, timeout_s=30)
    assert answer.error == "ModuleNotFoundError: No module named 'no_such_module_here'"
    assert not answer.hung and answer.result is None
    answer = allreduce.run_child("smoke_helpers:wrong_sum", [0, 1], 8, timeout_s=30)
    assert answer.result == [(2.0, 2.0), (1.0, 2.0)]


def test_an_all_reduce_logging_megabytes_is_held_to_its_tail():
    """Before: every byte the child printed was kept (stdout and stderr); now the last
    MAX_OUTPUT bytes, where the answer line is."""
    import tracemalloc

    tracemalloc.start()
    try:
        answer = allreduce.run_child("smoke_helpers:loud_sum", [0, 1], 8, timeout_s=120)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert answer.result == [(3.0, 3.0)] and answer.error is None
    assert peak < 5 * allreduce.MAX_OUTPUT, peak  # the tail, its text and its lines


@pytest.mark.parametrize(
    "line",
    [
        '{"result": ' + "[" * 100_000 + "]" * 100_000 + "}",  # was a RecursionError
        '{"result": [[1, 2, 3]]}',  # was a ValueError from unpacking
        '{"result": 7}',  # was a TypeError
        '{"result": [[' + "9" * 400 + ", 1]]}",  # was an OverflowError
        '{"error": "' + "x" * 100_000 + '"}',  # a 100 kB failure line
        '{"error": {"nested": true}}',
    ],
)
def test_a_hostile_all_reduce_answer_is_an_error_in_one_short_line(monkeypatch, tmp_path, line):
    (tmp_path / "line").write_text(line, encoding="utf-8")  # past an env var's 128 KiB
    monkeypatch.setenv("SMOKE_HOSTILE_FILE", str(tmp_path / "line"))
    answer = allreduce.run_child("smoke_helpers:hostile_stdout", [0, 1], 8, timeout_s=60)
    assert answer.result is None and not answer.hung
    assert answer.error is None or len(answer.error) < 300
    if '"error"' not in line:  # an answer gpu-ci cannot read is its own error, not the GPU's
        assert answer.error is None and answer.own_error is not None
        assert answer.own_error.startswith("all-reduce answer unreadable (")
        assert len(answer.own_error) < 300


def test_a_log_line_after_the_all_reduce_answer_does_not_replace_it():
    """Before: the last line starting with '{' (stdout and stderr) was the answer, so a JSON
    log line at exit left no result: 'answered for 0 of 2 GPUs', a finding about the GPU."""
    answer = allreduce.run_child("smoke_helpers:chatty_sum", [0, 1], 8, timeout_s=60)
    assert answer.result == [(2.0, 2.0), (2.0, 2.0)], answer
    assert answer.error is None and answer.own_error is None


def test_an_unreadable_all_reduce_answer_is_gpu_cis_own_error(tmp_path):
    answer = allreduce.run_child("smoke_helpers:unreadable_answer", [0, 1], 8, timeout_s=60)
    assert answer.result is None and answer.error is None
    assert answer.own_error and answer.own_error.startswith("all-reduce answer unreadable (")
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    result = run(tmp_path, fake, backend_reducing_with("unreadable_answer"), checks=["nccl"])
    nccl = outcome(result, "nccl")
    assert nccl["status"] == "fail" and nccl["reason"].startswith(OWN_ERROR_REASON), nccl
    assert not about_the_gpu(nccl["reason"])  # quarantine never acts on it


def test_a_child_exiting_0_without_its_answer_is_gpu_cis_own_error(monkeypatch, tmp_path):
    (tmp_path / "line").write_text("{}", encoding="utf-8")
    monkeypatch.setenv("SMOKE_HOSTILE_FILE", str(tmp_path / "line"))
    answer = allreduce.run_child("smoke_helpers:silent_exit", [0, 1], 8, timeout_s=60)
    assert answer.error is None and answer.result is None
    assert answer.own_error and "exited 0 without its answer line" in answer.own_error


def test_the_all_reduce_child_never_imports_from_the_current_folder(monkeypatch, tmp_path):
    """The smoke runs in the job's checkout: ``-m`` put it first on the child's sys.path (and
    the parent's sys.path, cwd included, went into the child's PYTHONPATH), so its gpuci/ or
    numpy.py ran in the child."""
    forged = "raise SystemExit('PR CODE RAN')\n"
    (tmp_path / "gpuci").mkdir()
    (tmp_path / "gpuci" / "__init__.py").write_text(forged)
    (tmp_path / "numpy.py").write_text(forged)
    (tmp_path / "smoke_helpers.py").write_text(forged)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", str(tmp_path), *sys.path])
    answer = allreduce.run_child("smoke_helpers:chatty_sum", [0, 1], 8, timeout_s=60)
    assert answer.result == [(2.0, 2.0), (2.0, 2.0)], answer
