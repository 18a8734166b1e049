"""CuPy on CUDA: the same checks for images that ship cupy rather than torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuci.errors import BackendUnavailable


class CupyDevice:
    pattern_reads = 2  # min(), then max()

    def __init__(self, cp: Any, index: int) -> None:
        self._cp = cp
        self.index = index
        self._dev = cp.cuda.Device(index)
        self._dev.use()
        props = cp.cuda.runtime.getDeviceProperties(index)
        name = props.get("name", b"")
        self.name = name.decode() if isinstance(name, bytes) else str(name)

    def _use(self) -> None:
        self._dev.use()

    def mem_info(self) -> tuple[int, int]:
        self._use()
        free, total = self._cp.cuda.runtime.memGetInfo()
        return int(free), int(total)

    def tiny_kernel(self, n: int) -> float:
        self._use()
        return float(self._cp.arange(n, dtype=self._cp.float64).sum().item())

    def empty(self, nbytes: int) -> Any:
        self._use()
        return self._cp.empty(nbytes, dtype=self._cp.uint8)

    def fill(self, buf: Any, byte: int) -> None:
        self._use()
        # a memset: a uint8 fill() writes a byte a thread, 5x slower (docs/gpu-smoke.md)
        buf.data.memset_async(byte, buf.nbytes)

    def pattern_errors(self, buf: Any, byte: int) -> int:
        self._use()
        cp = self._cp
        if buf.size % 8 == 0:
            word = int.from_bytes(bytes([byte]) * 8, "little", signed=True)
            words = buf.view(cp.int64)
            if int(words.min().item()) == word and int(words.max().item()) == word:
                return 0
        return int(cp.count_nonzero(buf != byte).item())

    def randint(self, shape: tuple[int, int], low: int, high: int, seed: int) -> Any:
        self._use()
        rs = self._cp.random.RandomState(seed)
        return rs.randint(low, high, size=shape, dtype=self._cp.int32).astype(self._cp.float16)

    def matmul(self, a: Any, b: Any) -> Any:
        self._use()
        return self._cp.matmul(a, b)

    def rows(self, x: Any, index: list[int]) -> Any:
        self._use()
        return x[self._cp.asarray(index)]

    def col_sums(self, x: Any) -> Any:
        self._use()
        cp = self._cp
        return cp.asnumpy(x.astype(cp.float32).sum(axis=0)).astype("float64")

    def max_abs_diff(self, a: Any, b: Any) -> float:
        self._use()
        cp = self._cp
        return float(cp.abs(a.astype(cp.float32) - b.astype(cp.float32)).max().item())

    def to_host(self, x: Any) -> Any:
        self._use()
        return self._cp.asnumpy(x.astype(self._cp.float32))

    def copy(self, dst: Any, src: Any) -> None:
        self._use()
        self._cp.copyto(dst, src)

    def synchronize(self) -> None:
        self._dev.synchronize()

    def pinned(self, nbytes: int) -> Any:
        import cupyx

        return cupyx.empty_pinned((nbytes,), dtype="uint8")

    def h2d(self, dst: Any, host: Any) -> None:
        self._use()
        dst.set(host)

    def d2h(self, host: Any, src: Any) -> None:
        self._use()
        src.get(out=host)

    def release(self) -> None:
        self._dev.synchronize()
        self._cp.get_default_memory_pool().free_all_blocks()
        self._cp.get_default_pinned_memory_pool().free_all_blocks()

    def time_calls(self, fn: Callable[[], Any], repeats: int) -> float:
        """CUDA events around the calls on this device's current stream."""
        cp = self._cp
        with self._dev:
            begin, end = cp.cuda.Event(), cp.cuda.Event()
            begin.record()
            for _ in range(repeats):
                fn()
            end.record()
            end.synchronize()
            return cp.cuda.get_elapsed_time(begin, end) / 1000  # milliseconds


def _uuid_text(raw: Any) -> str | None:
    """The 16 UUID bytes as text; ``None`` for anything else.

    cupy hands ``cudaDeviceProp.uuid`` over as a C string, cut at the first 0x00 byte (about
    one GPU in 16 has one): a shorter value is not this GPU's UUID, and guessing the missing
    bytes would match the wrong GPU. The caller then matches by PCI bus id.
    """
    if isinstance(raw, bytes | bytearray) and len(raw) == 16:
        h = bytes(raw).hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return None


def all_reduce_ones(indices: list[int], n: int) -> list[tuple[float, float]]:
    """NCCL all-reduce of ones over ``indices`` (run in a child process by the nccl check)."""
    import cupy as cp

    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        raise BackendUnavailable(f"cupy {cp.__version__} has no NCCL: {exc}") from None
    if not getattr(nccl, "available", True):
        raise BackendUnavailable(f"cupy {cp.__version__} was built without NCCL")
    bufs = []
    for i in indices:  # the contexts, before NCCL: start-up, not the collective
        with cp.cuda.Device(i):
            bufs.append(cp.ones(n, dtype=cp.float32))
    from gpuci.gpu._smoke.allreduce import phase, report_timing, time_runs

    # NCCL's communicator set-up counts as the collective: a hang there (broken P2P, NVLink)
    # is a finding about the node, as a hang in the all-reduce is.
    phase("collective")
    comms = nccl.NcclCommunicator.initAll(indices)

    def step() -> None:
        nccl.groupStart()
        for comm, buf, i in zip(comms, bufs, indices, strict=True):
            with cp.cuda.Device(i):
                ptr = buf.data.ptr
                comm.allReduce(ptr, ptr, n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)
        nccl.groupEnd()

    def sync() -> None:
        for i in indices:
            cp.cuda.Device(i).synchronize()

    step()
    sync()
    out = []
    for buf, i in zip(bufs, indices, strict=True):
        with cp.cuda.Device(i):
            out.append((float(buf.min().item()), float(buf.max().item())))
    report_timing(4 * n, time_runs(step, sync))  # the same buffers: bus bandwidth
    return out


def _built_cuda(cupy: Any) -> str | None:
    """The CUDA runtime cupy was built against ("12.4"), from cupy.cuda.runtime."""
    try:
        raw = int(cupy.cuda.runtime.runtimeGetVersion())
    except Exception:
        return None
    return f"{raw // 1000}.{raw % 1000 // 10}"


class CupyBackend:
    name = "cupy"
    is_gpu = True
    reducer = "gpuci.gpu._smoke.backends.cupy_backend:all_reduce_ones"

    def __init__(self) -> None:
        import cupy

        self._cp = cupy
        self.version = cupy.__version__
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError as exc:
            why = f"cupy {cupy.__version__} cannot initialise CUDA: {exc}"
            raise BackendUnavailable(why, built_cuda=_built_cuda(cupy)) from None
        if count == 0:
            raise BackendUnavailable(f"cupy {cupy.__version__} sees no CUDA device")

    def device_count(self) -> int:
        return int(self._cp.cuda.runtime.getDeviceCount())

    def device_uuid(self, index: int) -> str | None:
        return _uuid_text(self._cp.cuda.runtime.getDeviceProperties(index).get("uuid"))

    def device_pci_bus_id(self, index: int) -> str | None:
        try:
            return str(self._cp.cuda.runtime.deviceGetPCIBusId(index))
        except Exception:  # an older cupy without the call: match by UUID only
            return None

    def open(self, index: int) -> CupyDevice:
        return CupyDevice(self._cp, index)
