"""Helpers for the gpu-smoke tests: input values, an in-process run, fault-injecting devices."""

from __future__ import annotations

import dataclasses
import io
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpuci.gpu._nvml import open_nvml
from gpuci.gpu._smoke import smoke
from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend, NumpyDevice
from gpuci.gpu._smoke.checks import Outcome
from gpuci.gpu._smoke.load import Sizes, Target
from gpuci.gpu._smoke.targets import match_targets
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci.gpu.options import SmokeInputs
from gpuci.inputs import build
from gpuci.runtime import Result, Runtime


def values(tmp: Path, **overrides: Any) -> SmokeInputs:
    """gpu-smoke's inputs for an in-process run: half the free memory, the report in ``tmp``."""
    base: dict[str, Any] = {
        "memory-fraction": 0.5,
        "report": str(tmp / "smoke.json"),
    }
    base.update({k.replace("_", "-"): v for k, v in overrides.items()})
    unknown = set(base) - {f.name.replace("_", "-") for f in dataclasses.fields(SmokeInputs)}
    assert not unknown, f"no such gpu-smoke input: {unknown}"
    return build(SmokeInputs, base)


def run(
    tmp: Path,
    fake: FakeNvml | str,
    backend: Any = None,
    *,
    sizes: Sizes | None = None,
    clock: Callable[[], float] | None = None,
    visible: str | None = None,
    dry_run: bool = False,
    **overrides: Any,
) -> Result:
    """gpu-smoke in-process on ``fake`` (a FakeNvml or a ``GPUCI_FAKE_NVML`` spec), with
    ``visible`` as CUDA_VISIBLE_DEVICES when given, and ``overrides`` as its inputs."""
    nvml = FakeNvml.from_spec(fake) if isinstance(fake, str) else fake
    environ = {"GPUCI_JOURNAL": str(tmp / "journal.jsonl")}
    if visible is not None:
        environ["CUDA_VISIBLE_DEVICES"] = visible
    rt = Runtime(environ=environ, dry_run=dry_run, stdout=io.StringIO())
    kwargs: dict[str, Any] = {"nvml": nvml, "backend": backend, "sizes": sizes}
    if clock is not None:
        kwargs["clock"] = clock
    return smoke(values(tmp, **overrides), rt, **kwargs)


def outcome(result: Result, label: str) -> dict[str, Any]:
    """The report entry for ``gpu0:memory`` / ``nccl``."""
    for entry in result.report["checks"]:
        o = Outcome(entry["name"], entry["gpu"], entry["status"])
        if o.label == label:
            return entry
    raise AssertionError(f"no outcome {label} in {[c['name'] for c in result.report['checks']]}")


def backend_with(device_class: type[NumpyDevice], devices: int = 1, **attrs: Any) -> NumpyBackend:
    """A numpy backend whose devices are ``device_class`` (with ``attrs`` set on the class)."""
    cls = type(device_class.__name__, (device_class,), dict(attrs))
    backend = NumpyBackend(devices=devices)
    backend.device_class = cls
    return backend


class FlipsBit(NumpyDevice):
    """Memory with one cell stuck: after writing 0xAA, byte 1000 of each chunk reads 0xAB."""

    def fill(self, buf: Any, byte: int) -> None:
        super().fill(buf, byte)
        if byte == 0xAA and buf.size > 1000:
            buf[1000] = 0xAB


class WrongGemm(NumpyDevice):
    """A GEMM unit that gets one element (in row ``row``) wrong."""

    row = 3

    def matmul(self, a: Any, b: Any) -> Any:
        c = super().matmul(a, b)
        c[self.row, 5] += 4
        return c


class DriftingGemm(NumpyDevice):
    """Right the first time, then off by one: an unstable GPU."""

    calls = 0

    def matmul(self, a: Any, b: Any) -> Any:
        c = super().matmul(a, b)
        type(self).calls += 1
        if type(self).calls > 1:
            c = c.copy()
            c[0, 0] += np.float16(1)
        return c


# ----- all-reduce stand-ins, run by the nccl check in a child process ---------------------
PIDFILE_ENV = "GPUCI_TEST_REDUCER_PIDFILE"


def wrong_sum(indices: list[int], n: int) -> list[tuple[float, float]]:
    return [(2.0, 2.0), (1.0, 2.0)]


def loud_sum(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A reducer whose framework logs 40 MB (NCCL_DEBUG=TRACE, say) before its answer."""
    for _ in range(40):
        os.write(2, b"NCCL INFO " + b"x" * (1 << 20) + b"\n")
    return [(3.0, 3.0)]


def hangs(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A collective that never returns; writes its pid so a test can see it was killed."""
    from gpuci.gpu._smoke.allreduce import phase

    Path(os.environ[PIDFILE_ENV]).write_text(str(os.getpid()))
    phase("collective")
    while True:
        time.sleep(1)


def slow_start(indices: list[int], n: int) -> list[tuple[float, float]]:
    """Contexts that take longer than the timeout: the collective is never reached."""
    while True:
        time.sleep(1)


def no_nccl(indices: list[int], n: int) -> list[tuple[float, float]]:
    from gpuci.gpu._smoke.backends import BackendUnavailable

    raise BackendUnavailable("torch 2.13.0 was built without NCCL")


def backend_reducing_with(reducer: str, devices: int = 2) -> NumpyBackend:
    """A numpy backend whose all-reduce is ``smoke_helpers.<reducer>``."""
    backend = NumpyBackend(devices=devices)
    backend.reducer = f"smoke_helpers:{reducer}"
    return backend


class GpuLike(NumpyBackend):
    """The CPU stand-in claiming to be a GPU, with the identity a framework would report."""

    is_gpu = True

    def __init__(self, uuids: list[str | None], buses: list[str | None] | None = None) -> None:
        super().__init__(devices=len(uuids))
        self.uuids = uuids
        self.buses = buses or [None] * len(uuids)

    def device_uuid(self, index: int) -> str | None:
        return self.uuids[index]

    def device_pci_bus_id(self, index: int) -> str | None:
        return self.buses[index]


class RatedDevice(NumpyDevice):
    """A CPU stand-in GPU that reports the GEMM and copy speeds a test gives it.

    The numpy device does the real arithmetic (so every correctness check runs), but
    ``time_calls`` answers with the seconds a GPU of ``tflops`` / ``gbs`` would take for the
    work just timed, so a test can put a fake T4 at its real sustained 24 TFLOP/s, or a fake
    H200 at a copy rate of its choosing, and see how the model table judges it.
    """

    tflops = 1.0  # FP16 GEMM rate to report
    gbs = 1.0  # device copy rate to report (read + written bytes)

    def __init__(self, index: int, mem_bytes: int) -> None:
        super().__init__(index, mem_bytes)
        self._work: tuple[str, float] = ("", 0.0)

    def matmul(self, a: Any, b: Any) -> Any:
        self._work = ("gemm", 2.0 * a.shape[0] * a.shape[1] * b.shape[1])
        return super().matmul(a, b)

    def copy(self, dst: Any, src: Any) -> None:
        self._work = ("copy", 2.0 * src.nbytes)
        super().copy(dst, src)

    def time_calls(self, fn: Callable[[], Any], repeats: int) -> float:
        super().time_calls(fn, repeats)
        kind, amount = self._work
        rate = self.tflops * 1e12 if kind == "gemm" else self.gbs * 1e9
        return amount * repeats / rate


class RatedGpus(GpuLike):
    """CPU stand-ins that claim to be the NVML GPUs with ``uuids``, at the given rates."""

    def __init__(self, uuids: list[str | None], *, tflops: float = 1.0, gbs: float = 1.0) -> None:
        super().__init__(uuids)
        self.device_class = type("Rated", (RatedDevice,), {"tflops": tflops, "gbs": gbs})


def matched(backend: NumpyBackend, fake: FakeNvml) -> tuple[list[Target], list[str]]:
    """``match_targets`` for ``backend`` on every GPU of ``fake``, in a session of its own."""
    with open_nvml({}, fake) as session:
        return match_targets(backend, session, list(session.snapshot().gpus))


BUS_BYTES = 128 * 1024 * 1024  # the nccl check's buffer: 32 Mi float32
BUS_SECONDS = 0.002  # one all-reduce of it: 67.1 GB/s algbw


def timed_bus(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A correct all-reduce whose timed runs take ``BUS_SECONDS`` per all-reduce (busbw from
    nccl-tests' formula: 67.1 GB/s x 2(n-1)/n)."""
    from gpuci.gpu._smoke.allreduce import PER_RUN, RUNS, report_timing

    report_timing(BUS_BYTES, [BUS_SECONDS * PER_RUN] * RUNS)
    return [(float(len(indices)), float(len(indices)))] * len(indices)


def untimed_bus(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A correct all-reduce that reports no timing (a reducer from before busbw)."""
    return [(float(len(indices)), float(len(indices)))] * len(indices)


def hostile_stdout(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A child whose answer line holds the text in ``$SMOKE_HOSTILE_FILE`` instead of gpu-ci's
    answer (a broken child): the parent reads it as an input."""
    from gpuci.gpu._smoke.allreduce import ANSWER

    with open(os.environ["SMOKE_HOSTILE_FILE"], encoding="utf-8") as handle:
        print(ANSWER + handle.read(), flush=True)
    os._exit(0)


def chatty_sum(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A correct all-reduce whose framework logs a JSON line at exit, after the answer (a
    structured logger's atexit hook, a process group's teardown on stderr)."""
    import atexit

    line = '{"level": "info", "msg": "process group destroyed"}'
    atexit.register(lambda: print(line, file=sys.stderr, flush=True))
    atexit.register(lambda: print("{not json at all", flush=True))
    return [(float(len(indices)), float(len(indices)))] * len(indices)


def unreadable_answer(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A child whose answer line is there but broken (gpu-ci's own bug, say)."""
    from gpuci.gpu._smoke.allreduce import ANSWER

    print(ANSWER + '{"result": [[2, 2], [2', flush=True)
    os._exit(0)


def silent_exit(indices: list[int], n: int) -> list[tuple[float, float]]:
    """A child that prints a '{' line of its own and exits 0 before answering."""
    print('{"result": [[2, 2], [2, 2]]}', flush=True)  # not the answer: no ANSWER prefix
    os._exit(0)
