"""A driver that never answers: gpu-setup and gpu-smoke end by GPUCI_NVML_TIMEOUT, one line.

A GPU that fell off the bus, or a driver mid-reset, holds nvmlInit or a query in the kernel
(nvidia-smi hangs the same way). Before, both commands waited with it until the CI platform's
own timeout, and said nothing. The fake here waits until the test ends (at most 30 s, so a
test of the old code fails rather than hangs).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpuci.errors import NvmlUnavailable
from gpuci.gpu._setup.operation import read_snapshot
from gpuci.gpu._smoke import smoke
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci.runtime import Runtime
from smoke.smoke_helpers import values

FAST = {"GPUCI_NVML_TIMEOUT": "0.05"}


class _Stuck(FakeNvml):
    """``stuck_in`` waits on ``released`` (the driver that never answers); counts shutdowns."""

    def __init__(self, stuck_in: str, released: threading.Event) -> None:
        super().__init__(["h100-sxm"])
        self.stuck_in, self.released, self.shutdowns = stuck_in, released, 0

    def _wait(self, name: str) -> None:
        if name == self.stuck_in:
            self.released.wait(30)

    def nvmlInit(self) -> None:
        self._wait("nvmlInit")
        super().nvmlInit()

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._wait("nvmlDeviceGetName")
        return super().nvmlDeviceGetName(handle)

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        self._wait("nvmlEventSetWait_v2")
        return super().nvmlEventSetWait_v2(event_set, timeout_ms)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
        super().nvmlShutdown()


@pytest.fixture
def released() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # the stuck thread ends with the test


@pytest.mark.parametrize("stuck_in", ["nvmlInit", "nvmlDeviceGetName"])
def test_gpu_setup_reads_nvml_by_the_deadline(released, stuck_in):
    snapshot, error = read_snapshot(FAST, _Stuck(stuck_in, released))
    assert snapshot is None and isinstance(error, NvmlUnavailable)
    assert "NVML did not answer within 0.05s" in error.one_line()
    assert "GPUCI_NVML_TIMEOUT" in error.one_line()


@pytest.mark.parametrize("stuck_in", ["nvmlInit", "nvmlDeviceGetName"])
def test_gpu_smoke_reads_nvml_by_the_deadline(released, tmp_path, stuck_in):
    fake = _Stuck(stuck_in, released)
    rt = Runtime({**FAST, "GPUCI_JOURNAL": str(tmp_path / "j.jsonl")}, stdout=io.StringIO())
    result = smoke(values(tmp_path), rt, nvml=fake)
    assert int(result.exit_code) == 3
    assert "NVML did not answer within 0.05s" in result.headline
    assert fake.shutdowns == 0  # never closed behind the stuck call: that would wait too


def test_a_timeout_that_is_no_number_is_bad_input(released):
    from gpuci.errors import InputError

    with pytest.raises(InputError, match="GPUCI_NVML_TIMEOUT"):
        read_snapshot({"GPUCI_NVML_TIMEOUT": "soon"}, _Stuck("nvmlInit", released))


def test_an_xid_wait_stuck_in_the_driver_is_left_behind_not_waited_on(released, tmp_path):
    """The XID listener's thread stuck in NVML's event wait: stopping it then drained the
    event set from the run's own thread (the same stuck wait) and freed it, and the step hung
    past its budget saying nothing. Now the stuck wait is left to the process's end (the
    session is never shut down behind it), and one warning says XIDs were not heard."""
    fake = _Stuck("nvmlEventSetWait_v2", released)
    rt = Runtime({**FAST, "GPUCI_JOURNAL": str(tmp_path / "j.jsonl")}, stdout=io.StringIO())
    result = smoke(values(tmp_path, checks=["health"]), rt, nvml=fake)
    assert not released.is_set()  # returned while the wait was still stuck
    said = " ".join(a.message for a in result.annotations)
    assert "NVML's XID event wait did not return" in said, said
    assert fake.shutdowns == 0


class _StuckSampling(_Stuck):
    """NVML's clock read stuck on the clock sampler's thread only; ``stuck`` set once it is."""

    stuck = threading.Event()

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        if threading.current_thread().name == "gpuci-sampler":
            self.stuck.set()
            self.released.wait(30)
        return super().nvmlDeviceGetCurrentClocksEventReasons(handle)


def test_a_clock_sample_stuck_in_the_driver_is_left_behind_not_shut_down_behind(released, tmp_path):
    """The clock sampler's read stuck in NVML: stopping it then read once more on the run's
    own thread and the session was shut down behind the stuck call (with a real driver, both
    wait with it). Now the stuck read is left to the process's end, with one warning."""
    from gpuci.gpu._smoke.backends.numpy_backend import NumpyDevice
    from gpuci.gpu._smoke.load import Sizes
    from smoke.smoke_helpers import backend_with

    fake = _StuckSampling("none", released)
    fake.stuck.clear()

    def tiny_kernel(self: Any, n: int) -> float:  # the load lasts until the sampler is stuck
        fake.stuck.wait(10)
        return NumpyDevice.tiny_kernel(self, n)

    backend = backend_with(NumpyDevice, tiny_kernel=tiny_kernel)
    rt = Runtime({**FAST, "GPUCI_JOURNAL": str(tmp_path / "j.jsonl")}, stdout=io.StringIO())
    inp = values(tmp_path, checks=["context", "health"])
    result = smoke(inp, rt, nvml=fake, backend=backend, sizes=Sizes.tiny())
    assert not released.is_set()  # returned while the read was still stuck
    said = " ".join(a.message for a in result.annotations)
    assert "clock sampling stuck in an NVML read" in said, said
    assert fake.shutdowns == 0
