"""The one NVML seam: every read of GPU state in gpu-ci goes through :class:`NvmlSession`.

This is the only module that imports ``pynvml`` (package nvidia-ml-py). The session takes an
injectable NVML object with the surface listed in :data:`SEAM` (the real ``pynvml`` module or
:class:`gpuci.gpu.fake_nvml.FakeNvml`), so tests, the action harness and ``gpu-smoke`` run the
same code on machines without a GPU. ``GPUCI_FAKE_NVML=h100-sxm,h100-sxm`` selects the fake
across process boundaries.

Rule: a field the GPU or driver does not report (NotSupported, FunctionNotFound, NoPermission)
becomes ``None`` ("unsupported"), never an error. Only a missing library or driver, a lost GPU
or unreadable identity (name, UUID) stops a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuci.errors import NvmlUnavailable

FAKE_ENV = "GPUCI_FAKE_NVML"

# NVML ABI constants (nvml.h); stable, so the fake does not need pynvml to speak them.
SUCCESS = 0
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_NO_DATA = 21
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_DEPRECATED = 26
MEMORY_ERROR_TYPE_UNCORRECTED = 1
VOLATILE_ECC = 0
TEMPERATURE_GPU = 0
FEATURE_ENABLED = 1
MEMORY_V2 = 0x02000028  # nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24
EVENT_XID_CRITICAL_ERROR = 0x8

# Codes that mean "this GPU/driver does not report that": the field is unsupported, not broken.
UNSUPPORTED_CODES = frozenset(
    {
        ERROR_NOT_SUPPORTED,
        ERROR_NO_PERMISSION,
        ERROR_NOT_FOUND,
        ERROR_FUNCTION_NOT_FOUND,
        ERROR_NO_DATA,
        ERROR_ARGUMENT_VERSION_MISMATCH,
        ERROR_DEPRECATED,
        ERROR_INVALID_ARGUMENT,
    }
)

# The NVML surface the session calls: pynvml has all of these, and so must any fake.
SEAM: tuple[str, ...] = (
    "NVMLError",
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)

ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}

CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the hardware is protecting itself, as opposed to idling or policy.
HARMFUL_CLOCK_EVENTS = frozenset(
    {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def clock_event_names(mask: int | None) -> tuple[str, ...]:
    if not mask:
        return ()
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"other_0x{unknown:x}")
    return tuple(names)


@dataclass(frozen=True)
class Health:
    """Counters that say a GPU is degrading; read twice to see what a workload changed."""

    ecc_enabled: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    pcie_replay_counter: int | None = None
    clock_event_reasons: int | None = None
    temperature_c: int | None = None

    @property
    def clock_events(self) -> tuple[str, ...]:
        return clock_event_names(self.clock_event_reasons)

    def memory_problems(self) -> list[str]:
        """ECC and row-remapping findings that make a GPU untrustworthy for a job."""
        found = []
        if self.ecc_volatile_uncorrected:
            found.append(f"{self.ecc_volatile_uncorrected} volatile uncorrected ECC errors")
        if self.retired_pages_pending:
            found.append("retired pages pending (reset the GPU)")
        if self.remapped_rows_pending:
            found.append("row remapping pending (reset the GPU)")
        if self.remapped_rows_failure:
            found.append("row remapping failed (replace the GPU)")
        return found

    def memory_counters_supported(self) -> bool:
        return any(
            v is not None
            for v in (
                self.ecc_volatile_uncorrected,
                self.retired_pages_pending,
                self.remapped_rows_pending,
                self.remapped_rows_failure,
            )
        )

    def increased(self, later: Health) -> dict[str, tuple[int, int]]:
        """Counters that grew between this read and ``later``: ``{name: (before, after)}``."""
        grown: dict[str, tuple[int, int]] = {}
        for name in (
            "ecc_volatile_uncorrected",
            "remapped_rows_uncorrectable",
            "pcie_replay_counter",
        ):
            before, after = getattr(self, name), getattr(later, name)
            if before is not None and after is not None and after > before:
                grown[name] = (before, after)
        for name in ("retired_pages_pending", "remapped_rows_pending", "remapped_rows_failure"):
            if not getattr(self, name) and getattr(later, name):
                grown[name] = (0, 1)
        return grown

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "clock_events": list(self.clock_events)}


@dataclass(frozen=True)
class MigDevice:
    index: int
    uuid: str
    name: str | None
    memory_total: int | None
    memory_free: int | None
    gpu_instance_id: int | None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory: int | None


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML saw it; ``None`` means the GPU or driver does not report it."""

    index: int
    name: str
    uuid: str
    memory_total: int | None
    memory_free: int | None
    compute_capability: tuple[int, int] | None
    architecture: str | None
    mig_enabled: bool | None
    mig_devices: tuple[MigDevice, ...]
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    power_limit_w: float | None
    health: Health
    processes: tuple[GpuProcess, ...] | None
    notes: tuple[str, ...] = ()  # unexpected NVML errors on optional fields, kept for the report

    @property
    def cc_text(self) -> str | None:
        return None if self.compute_capability is None else "{}.{}".format(*self.compute_capability)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["compute_capability"] = self.cc_text
        data["health"] = self.health.to_dict()
        data["mig_devices"] = [asdict(m) for m in self.mig_devices]
        data["processes"] = None if self.processes is None else [asdict(p) for p in self.processes]
        data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True)
class Snapshot:
    source: str  # "nvml" or "fake:<profiles>"
    driver_version: str | None
    cuda_version: tuple[int, int] | None  # highest CUDA the driver supports
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)

    @property
    def cuda_text(self) -> str | None:
        return None if self.cuda_version is None else "{}.{}".format(*self.cuda_version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_text,
            "gpus": [g.to_dict() for g in self.gpus],
        }


@dataclass(frozen=True)
class XidEvent:
    gpu_index: int | None
    uuid: str | None
    xid: int


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


class NvmlSession:
    """An initialised NVML: snapshots, health reads and XID waits. Use as a context manager."""

    def __init__(self, nvml: Any, source: str = "nvml") -> None:
        self._nvml = nvml
        self.source = source
        self._open = False
        self._handles: list[Any] = []
        errors = [getattr(nvml, "NVMLError", None), getattr(nvml, "NVMLLibraryMismatchError", None)]
        self._errors: tuple[type[BaseException], ...] = tuple(e for e in errors if e)

    # ----- lifecycle ---------------------------------------------------------------------
    def open(self) -> NvmlSession:
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
        self._handles = [self._required("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        return self

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._errors:
                pass  # shutting down a broken NVML must not mask the real error

    def __enter__(self) -> NvmlSession:
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

    def _optional(self, name: str, *args: Any, notes: list[str] | None = None) -> Any:
        """A field that may be unsupported: ``None`` instead of an error."""
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
            if code is not None and code not in UNSUPPORTED_CODES and notes is not None:
                notes.append(f"{name}: {exc}")
            return None

    def _lost(self, args: tuple[Any, ...]) -> NvmlUnavailable:
        index = self._handles.index(args[0]) if args and args[0] in self._handles else "?"
        return NvmlUnavailable(
            f"GPU {index} has fallen off the bus (NVML: GPU is lost)",
            "drain this node: the GPU needs a reset or a reboot (see dmesg for Xid 79)",
        )

    # ----- reads -------------------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return len(self._handles)

    def driver_version(self) -> str | None:
        return self._optional("nvmlSystemGetDriverVersion")

    def cuda_version(self) -> tuple[int, int] | None:
        raw = self._optional("nvmlSystemGetCudaDriverVersion_v2")
        if raw is None:
            raw = self._optional("nvmlSystemGetCudaDriverVersion")
        if not raw:
            return None
        return raw // 1000, (raw % 1000) // 10

    def _memory(self, handle: Any, notes: list[str] | None) -> tuple[int | None, int | None]:
        info = None
        try:
            info = self._optional("nvmlDeviceGetMemoryInfo", handle, MEMORY_V2, notes=notes)
        except TypeError:
            pass  # bindings without the version argument
        if info is None:
            info = self._optional("nvmlDeviceGetMemoryInfo", handle, notes=notes)
        if info is None:
            return None, None
        return int(info.total), int(info.free)

    def health(self, index: int) -> Health:
        """The degradation counters of GPU ``index``, read now."""
        return self._health(self._handles[index], None)

    def _health(self, h: Any, notes: list[str] | None) -> Health:
        opt = self._optional
        ecc_mode = opt("nvmlDeviceGetEccMode", h, notes=notes)
        retired = opt("nvmlDeviceGetRetiredPagesPendingStatus", h, notes=notes)
        remapped = opt("nvmlDeviceGetRemappedRows", h, notes=notes)
        reasons = opt("nvmlDeviceGetCurrentClocksEventReasons", h, notes=notes)
        if reasons is None:
            reasons = opt("nvmlDeviceGetCurrentClocksThrottleReasons", h, notes=notes)
        return Health(
            ecc_enabled=None if ecc_mode is None else bool(ecc_mode[0]),
            ecc_volatile_uncorrected=opt(
                "nvmlDeviceGetTotalEccErrors",
                h,
                MEMORY_ERROR_TYPE_UNCORRECTED,
                VOLATILE_ECC,
                notes=notes,
            ),
            retired_pages_pending=None if retired is None else retired == FEATURE_ENABLED,
            remapped_rows_uncorrectable=None if remapped is None else int(remapped[1]),
            remapped_rows_pending=None if remapped is None else bool(remapped[2]),
            remapped_rows_failure=None if remapped is None else bool(remapped[3]),
            pcie_replay_counter=opt("nvmlDeviceGetPcieReplayCounter", h, notes=notes),
            clock_event_reasons=reasons,
            temperature_c=opt("nvmlDeviceGetTemperature", h, TEMPERATURE_GPU, notes=notes),
        )

    def _mig_devices(self, h: Any, notes: list[str]) -> tuple[MigDevice, ...]:
        slots = self._optional("nvmlDeviceGetMaxMigDeviceCount", h, notes=notes) or 0
        found = []
        for slot in range(slots):
            mig = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", h, slot)
            if mig is None:
                continue  # an empty slot: NVML says NotFound
            uuid = self._optional("nvmlDeviceGetUUID", mig, notes=notes)
            if not uuid:
                continue
            total, free = self._memory(mig, notes)
            found.append(
                MigDevice(
                    index=slot,
                    uuid=uuid,
                    name=self._optional("nvmlDeviceGetName", mig, notes=notes),
                    memory_total=total,
                    memory_free=free,
                    gpu_instance_id=self._optional("nvmlDeviceGetGpuInstanceId", mig, notes=notes),
                )
            )
        return tuple(found)

    def gpu(self, index: int) -> GpuInfo:
        h = self._handles[index]
        notes: list[str] = []
        opt = self._optional
        total, free = self._memory(h, notes)
        mig_mode = opt("nvmlDeviceGetMigMode", h, notes=notes)
        mig_enabled = None if mig_mode is None else bool(mig_mode[0])
        arch = opt("nvmlDeviceGetArchitecture", h, notes=notes)
        cc = opt("nvmlDeviceGetCudaComputeCapability", h, notes=notes)
        power_mw = opt("nvmlDeviceGetPowerManagementLimit", h, notes=notes)
        procs = opt("nvmlDeviceGetComputeRunningProcesses", h, notes=notes)
        return GpuInfo(
            index=index,
            name=self._required("nvmlDeviceGetName", h),
            uuid=self._required("nvmlDeviceGetUUID", h),
            memory_total=total,
            memory_free=free,
            compute_capability=None if cc is None else (int(cc[0]), int(cc[1])),
            architecture=None if arch is None else ARCHITECTURES.get(arch, f"unknown({arch})"),
            mig_enabled=mig_enabled,
            mig_devices=self._mig_devices(h, notes) if mig_enabled else (),
            pcie_gen_current=opt("nvmlDeviceGetCurrPcieLinkGeneration", h, notes=notes),
            pcie_gen_max=opt("nvmlDeviceGetMaxPcieLinkGeneration", h, notes=notes),
            pcie_width_current=opt("nvmlDeviceGetCurrPcieLinkWidth", h, notes=notes),
            pcie_width_max=opt("nvmlDeviceGetMaxPcieLinkWidth", h, notes=notes),
            power_limit_w=None if power_mw is None else power_mw / 1000,
            health=self._health(h, notes),
            processes=None
            if procs is None
            else tuple(GpuProcess(int(p.pid), getattr(p, "usedGpuMemory", None)) for p in procs),
            notes=tuple(notes),
        )

    def snapshot(self) -> Snapshot:
        return Snapshot(
            source=self.source,
            driver_version=self.driver_version(),
            cuda_version=self.cuda_version(),
            gpus=tuple(self.gpu(i) for i in range(self.device_count)),
        )

    def watch_xid(self, indices: Iterable[int] | None = None) -> XidWatch:
        """Start listening for XID critical errors (register before the workload runs)."""
        return XidWatch(self, list(range(self.device_count)) if indices is None else indices)


class XidWatch:
    """An NVML event set registered for XID critical errors on some GPUs."""

    def __init__(self, session: NvmlSession, indices: Iterable[int]) -> None:
        self._s = session
        nvml = session._nvml
        self.unsupported: list[int] = []  # GPUs that cannot report XIDs (e.g. MIG, vGPU)
        self.watched: list[int] = []
        self._set = session._required("nvmlEventSetCreate")
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
        return XidEvent(gpu_index=index, uuid=uuid, xid=int(data.eventData))

    def close(self) -> None:
        self._s._optional("nvmlEventSetFree", self._set)

    def __enter__(self) -> XidWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable(
            "NVML library not found: the Python bindings (nvidia-ml-py) are not installed",
            "pip install nvidia-ml-py (gpu-ci's requirements include it)",
        ) from None
    return pynvml


def open_nvml(environ: Mapping[str, str], nvml: Any = None) -> NvmlSession:
    """An open session on ``nvml``; else the fake named by ``GPUCI_FAKE_NVML``; else pynvml."""
    if nvml is not None:
        return NvmlSession(nvml, getattr(nvml, "source", "injected")).open()
    spec = environ.get(FAKE_ENV, "").strip()
    if spec:
        from gpuci.gpu.fake_nvml import FakeNvml

        fake = FakeNvml.from_spec(spec)
        return NvmlSession(fake, fake.source).open()
    return NvmlSession(load_pynvml(), "nvml").open()
