"""How gpu-ci calls NVML: the session's lifecycle, its error plumbing (a lost GPU, a field the
driver does not report), and the XID event watch. :mod:`gpuci.gpu._nvml` builds the readings on
top and stays the only module that imports ``pynvml``; this one calls the injected object only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from gpuci.errors import NvmlUnavailable
from gpuci.gpu._gpu_info import SkippedGpu, XidEvent
from gpuci.gpu._nvml_abi import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_LIB_RM_VERSION_MISMATCH,
    ERROR_LIBRARY_NOT_FOUND,
    ERROR_NO_PERMISSION,
    ERROR_TIMEOUT,
    EVENT_XID_CRITICAL_ERROR,
    MAX_DEVICES,
    NO_INSTANCE,
    UNSUPPORTED_CODES,
)

_Calls = TypeVar("_Calls", bound="NvmlCalls")


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


_INIT_ERRORS: dict[int, tuple[str, str]] = {
    ERROR_LIBRARY_NOT_FOUND: (
        "NVML library not found: libnvidia-ml.so.1 could not be loaded (no NVIDIA driver here)",
        "run on a GPU runner with the NVIDIA driver installed (containers need the NVIDIA "
        "container toolkit, e.g. --gpus all), or set require-gpu: false for a CPU-only report",
    ),
    ERROR_DRIVER_NOT_LOADED: (
        "NVML driver not loaded: libnvidia-ml is present but the NVIDIA kernel driver is not "
        "running",
        "load the driver (modprobe nvidia; check nvidia-smi and dmesg), or set "
        "require-gpu: false for a CPU-only report",
    ),
    ERROR_NO_PERMISSION: (
        "NVML permission denied: this user may not open /dev/nvidia*",
        "run as a user in the video group or give the container the NVIDIA devices",
    ),
    ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVML driver/library version mismatch: libnvidia-ml does not match the loaded kernel "
        "driver",
        "reboot the machine (or reload the nvidia module) after the driver upgrade",
    ),
}


# pynvml decodes every string NVML answers as UTF-8, strictly: a board's garbled InfoROM (its
# serial, its name) raised UnicodeDecodeError out of the session, an internal error.
NOT_TEXT = "answered bytes that are not UTF-8 text"
NOT_TEXT_HINT = "check nvidia-smi -q on this machine: the board's InfoROM may be corrupt"

# nvmlDeviceGetNvLinkState on a link number the board does not have
NO_SUCH_LINK = frozenset({ERROR_INVALID_ARGUMENT})


class GpuLost(NvmlUnavailable):
    """GPU_IS_LOST: the GPU fell off the bus. Before a run, infrastructure (exit 3); after a
    load, a finding about that GPU (see :func:`gpuci.gpu._smoke.health.read_after`)."""


def lost_gpu(index: int | str) -> GpuLost:
    return GpuLost(
        f"GPU {index} has fallen off the bus (NVML: GPU is lost)",
        "drain this node: the GPU needs a reset or a reboot (see dmesg for Xid 79)",
    )


class NvmlCalls:
    """An initialised NVML and the calls into it (:class:`~gpuci.gpu._nvml.NvmlSession` reads
    GPUs through them). Use as a context manager."""

    def __init__(self, nvml: Any, source: str = "nvml") -> None:
        self._nvml = nvml
        self.source = source
        self._open = False
        self._handles: dict[int, Any] = {}  # NVML index -> handle, for the GPUs that opened
        self.skipped: list[SkippedGpu] = []  # GPUs NVML counts but this process cannot open
        errors = [getattr(nvml, "NVMLError", None), getattr(nvml, "NVMLLibraryMismatchError", None)]
        self._errors: tuple[type[BaseException], ...] = tuple(e for e in errors if e)

    # ----- lifecycle ---------------------------------------------------------------------
    def open(self: _Calls) -> _Calls:
        try:
            self._nvml.nvmlInit()
        except self._errors as exc:
            message, hint = _INIT_ERRORS.get(
                _code(exc) or -1,
                (f"NVML failed to initialise: {exc}", "check nvidia-smi and dmesg on this machine"),
            )
            raise NvmlUnavailable(message, hint) from None
        self._open = True
        count = self._required("nvmlDeviceGetCount")
        if not 0 <= count <= MAX_DEVICES:  # garbage: each "GPU" would be asked for a handle
            self.close()
            raise NvmlUnavailable(
                f"NVML counts {count} GPUs, more than any machine has (at most {MAX_DEVICES})",
                "check nvidia-smi and dmesg on this machine; the driver may need a reset",
            )
        for i in range(count):
            try:
                self._handles[i] = self._nvml.nvmlDeviceGetHandleByIndex(i)
            except self._errors as exc:
                if _code(exc) == ERROR_GPU_IS_LOST:
                    raise lost_gpu(i) from None
                # NoPermission (Slurm ConstrainDevices, a cgroup that hides /dev/nvidiaN) or
                # another per-device refusal: skip and list it, as nvidia-smi does. CUDA cannot
                # open it either, so it is not one of this job's devices.
                self.skipped.append(SkippedGpu(i, str(exc), _code(exc)))
        return self

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._errors:
                pass  # shutting down a broken NVML must not mask the real error

    def abandon(self) -> None:
        """Never shut down: a call of this session is stuck in the driver (see
        :class:`gpuci.gpu._nvml.NvmlStuck`), and closing would wait behind it."""
        self._open = False

    def __enter__(self: _Calls) -> _Calls:
        return self if self._open else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- calls -------------------------------------------------------------------------
    def _required(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, name)(*args)
        except self._errors as exc:
            if _code(exc) == ERROR_GPU_IS_LOST:
                raise self._lost(args) from None
            raise NvmlUnavailable(
                f"NVML call {name} failed: {exc}",
                "check nvidia-smi and dmesg on this machine; the driver may need a reset",
            ) from None
        except UnicodeDecodeError:
            raise NvmlUnavailable(f"NVML call {name} {NOT_TEXT}", NOT_TEXT_HINT) from None

    def _optional(
        self,
        name: str,
        *args: Any,
        notes: list[str] | None = None,
        expected: frozenset[int] = frozenset(),
    ) -> Any:
        """A field that may be unsupported: ``None`` instead of an error.

        ``expected``: further codes that mean "not here" for this call, so not noted.
        """
        func = getattr(self._nvml, name, None)
        if func is None:
            return None  # bindings older than the call: unsupported, like an old driver
        try:
            return func(*args)
        except self._errors as exc:
            code = _code(exc)
            if code == ERROR_GPU_IS_LOST:
                raise self._lost(args) from None
            # No code: pynvml's NVMLLibraryMismatchError, i.e. the library lacks the call.
            quiet = UNSUPPORTED_CODES | expected
            if code is not None and code not in quiet and notes is not None:
                notes.append(f"{name}: {exc}")
            return None
        except UnicodeDecodeError:  # unreadable, as a field the driver does not report
            if notes is not None:
                notes.append(f"{name} {NOT_TEXT}")
            return None

    def _lost(self, args: tuple[Any, ...]) -> NvmlUnavailable:
        found = [i for i, h in self._handles.items() if args and args[0] is h]
        return lost_gpu(found[0] if found else "?")

    # ----- GPUs opened ------------------------------------------------------------------
    @property
    def device_count(self) -> int:
        """GPUs this process could open (NVML may count more: see :attr:`skipped`)."""
        return len(self._handles)

    @property
    def indices(self) -> list[int]:
        """NVML indices of the GPUs that opened, in NVML's order."""
        return sorted(self._handles)


class XidWatch:
    """An NVML event set registered for XID critical errors on some GPUs."""

    def __init__(self, session: NvmlCalls, indices: Iterable[int]) -> None:
        self._s = session
        nvml = session._nvml
        self.unsupported: list[int] = []  # GPUs that cannot report XIDs (e.g. vGPU)
        self.watched: list[int] = []
        self.error: str | None = None  # why nothing is watched (the event set failed)
        try:
            self._set = session._nvml.nvmlEventSetCreate()
        except session._errors as exc:
            if _code(exc) == ERROR_GPU_IS_LOST:
                raise session._lost(()) from None
            # Without an event set no XID can be heard; the rest of the run still means something.
            self._set = None
            self.error = f"nvmlEventSetCreate failed: {exc}"
            self.unsupported = list(indices)
            return
        for index in indices:
            h = session._handles[index]
            types = session._optional("nvmlDeviceGetSupportedEventTypes", h) or 0
            if not types & EVENT_XID_CRITICAL_ERROR:
                self.unsupported.append(index)
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(h, EVENT_XID_CRITICAL_ERROR, self._set)
                self.watched.append(index)
            except session._errors:
                self.unsupported.append(index)

    def wait(self, timeout_s: float) -> XidEvent | None:
        """The next XID on a watched GPU, or ``None`` when ``timeout_s`` passes quietly."""
        if self._set is None:
            return None
        try:
            data = self._s._nvml.nvmlEventSetWait_v2(self._set, max(0, int(timeout_s * 1000)))
        except self._s._errors as exc:
            if _code(exc) == ERROR_TIMEOUT:
                return None
            raise NvmlUnavailable(
                f"NVML event wait failed: {exc}", "check nvidia-smi and dmesg on this machine"
            ) from None
        index = self._s._optional("nvmlDeviceGetIndex", data.device)
        uuid = self._s._optional("nvmlDeviceGetUUID", data.device)
        gi = getattr(data, "gpuInstanceId", None)  # nvmlEventData_t, R450 and later
        return XidEvent(
            gpu_index=index,
            uuid=uuid,
            xid=int(data.eventData),
            gpu_instance_id=None if gi is None or int(gi) == NO_INSTANCE else int(gi),
        )

    def close(self) -> None:
        if self._set is not None:
            self._s._optional("nvmlEventSetFree", self._set)

    def __enter__(self) -> XidWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
