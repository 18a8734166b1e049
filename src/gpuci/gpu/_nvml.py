"""The one NVML seam: every read of GPU state in gpu-ci goes through :class:`NvmlSession`.

This is the only module that imports ``pynvml`` (package nvidia-ml-py). The session takes an
injectable NVML object with the surface listed in :data:`gpuci.gpu._nvml_abi.SEAM` (``pynvml`` or
:class:`gpuci.gpu.fake.nvml.FakeNvml`), so tests, the action harness and ``gpu-smoke`` run the
same code on machines without a GPU. ``GPUCI_FAKE_NVML=h100-sxm,h100-sxm`` selects the fake
across process boundaries.

Rule: a field the GPU or driver does not report (NotSupported, FunctionNotFound, NoPermission)
becomes ``None`` ("unsupported"), never an error. InvalidArgument is *not* "unsupported": it
means the call was made wrongly, so it becomes ``None`` plus a note that shows in the report.
Only a missing library or driver, a lost GPU or unreadable identity (name, UUID) stops a
snapshot.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from gpuci import settings
from gpuci.errors import NvmlUnavailable
from gpuci.gpu._gpu_info import (
    GpuInfo,
    GpuProcess,
    Health,
    MigDevice,
    SkippedGpu,
    Snapshot,
    XidEvent,
)
from gpuci.gpu._nvml_abi import (
    ARCHITECTURES,
    CLOCK_EVENT_FIELDS,
    CLOCK_MEM,
    CLOCK_SM,
    CPU_AFFINITY_WORDS,
    FEATURE_ENABLED,
    MEMORY_ERROR_TYPE_UNCORRECTED,
    MEMORY_V2,
    MIG_MAX_SLOTS,
    NVLINK_ERRORS,
    NVLINK_MAX_LINKS,
    SUCCESS,
    TEMPERATURE_GPU,
    VIOLATION_POLICIES,
    VOLATILE_ECC,
)
from gpuci.gpu._nvml_calls import (
    NO_SUCH_LINK,
    GpuLost,
    NvmlCalls,
    XidWatch,
)

__all__ = [
    "GpuInfo",
    "GpuLost",
    "GpuProcess",
    "Health",
    "MigDevice",
    "NvmlSession",
    "NvmlStuck",
    "SkippedGpu",
    "Snapshot",
    "XidEvent",
    "XidWatch",
    "cpu_list",
    "open_nvml",
    "pci_address",
    "within_deadline",
]


class NvmlSession(NvmlCalls):
    """An initialised NVML: snapshots, health reads and XID waits. Use as a context manager."""

    # ----- reads -------------------------------------------------------------------------
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

    def health(self, index: int, counters: bool = True) -> Health:
        """The degradation counters of GPU ``index``, read now, with any NVML errors met.

        ``counters=False`` skips the cumulative throttle and NVLink error counters (~100
        calls): for the sampler, which only needs the clock-event reasons, many times a second.
        """
        notes: list[str] = []
        health = self._health(self._handles[index], notes, counters)
        return replace(health, errors=tuple(notes)) if notes else health

    def _throttle(self, h: Any, notes: list[str] | None) -> tuple[tuple[str, int], ...] | None:
        """Cumulative throttle time (ns) per violation policy and slowdown field value."""
        found: dict[str, int] = {}
        for policy, name in VIOLATION_POLICIES.items():
            status = self._optional("nvmlDeviceGetViolationStatus", h, policy, notes=notes)
            if status is not None:
                found[name] = int(status.violationTime)
        values = self._optional(
            "nvmlDeviceGetFieldValues", h, list(CLOCK_EVENT_FIELDS), notes=notes
        )
        for value in values or ():
            field = CLOCK_EVENT_FIELDS.get(int(value.fieldId))
            if field and int(value.nvmlReturn) == SUCCESS:  # per field: NotSupported is skipped
                found[field] = int(value.value.ullVal)
        return tuple(sorted(found.items())) or None

    def _nvlink_errors(
        self, h: Any, links: Iterable[int], notes: list[str] | None
    ) -> tuple[tuple[int, str, int], ...] | None:
        """Error counters of ``links`` (those up); None when no link or no counter reads."""
        found = []
        for link in links:
            for counter, name in NVLINK_ERRORS.items():
                value = self._optional(
                    "nvmlDeviceGetNvLinkErrorCounter", h, link, counter, notes=notes
                )
                if value is not None:
                    found.append((link, name, int(value)))
        return tuple(found) or None

    def _app_clocks(self, h: Any, notes: list[str] | None) -> tuple[tuple[str, int], ...] | None:
        found = []
        for name, clock in (("sm", CLOCK_SM), ("mem", CLOCK_MEM)):
            value = self._optional("nvmlDeviceGetApplicationsClock", h, clock, notes=notes)
            if value is not None:
                found.append((name, int(value)))
        return tuple(found) or None

    def _clocks(self, h: Any, notes: list[str]) -> tuple[tuple[Any, ...], ...]:
        found = []
        for name, clock in (("sm", CLOCK_SM), ("mem", CLOCK_MEM)):
            row = tuple(
                self._optional(call, h, clock, notes=notes)
                for call in (
                    "nvmlDeviceGetClockInfo",
                    "nvmlDeviceGetApplicationsClock",
                    "nvmlDeviceGetDefaultApplicationsClock",
                    "nvmlDeviceGetMaxClockInfo",
                )
            )
            if any(v is not None for v in row):
                found.append((name, *row))
        return tuple(found)

    def _health(self, h: Any, notes: list[str] | None, counters: bool = True) -> Health:
        opt = self._optional
        ecc_mode = opt("nvmlDeviceGetEccMode", h, notes=notes)
        retired = opt("nvmlDeviceGetRetiredPagesPendingStatus", h, notes=notes)
        remapped = opt("nvmlDeviceGetRemappedRows", h, notes=notes)
        reasons = opt("nvmlDeviceGetCurrentClocksEventReasons", h, notes=notes)
        if reasons is None:
            reasons = opt("nvmlDeviceGetCurrentClocksThrottleReasons", h, notes=notes)
        health = Health(
            ecc_enabled=None if ecc_mode is None else bool(ecc_mode[0]),
            ecc_pending=None if ecc_mode is None else bool(ecc_mode[1]),
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
        if not counters:  # the sampler: clock-event reasons many times a second, nothing more
            return health
        power_mw = opt("nvmlDeviceGetPowerManagementLimit", h, notes=notes)
        states = self._nvlink_states(h, notes)
        up = [link for link, on in states or () if on]
        return replace(
            health,
            throttle_ns=self._throttle(h, notes),
            nvlink_states=states,
            nvlink_errors=self._nvlink_errors(h, up, notes),
            power_limit_w=None if power_mw is None else power_mw / 1000,
            app_clocks_mhz=self._app_clocks(h, notes),
        )

    def _mig_devices(self, h: Any, notes: list[str]) -> tuple[MigDevice, ...]:
        slots = self._optional("nvmlDeviceGetMaxMigDeviceCount", h, notes=notes) or 0
        found = []
        for slot in range(min(int(slots), MIG_MAX_SLOTS)):
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

    def pci_bus_id(self, h: Any, notes: list[str] | None = None) -> str | None:
        """The GPU's PCI address as NVML writes it (``00000000:18:00.0``), or None."""
        info = self._optional("nvmlDeviceGetPciInfo_v3", h, notes=notes)
        if info is None:
            info = self._optional("nvmlDeviceGetPciInfo", h, notes=notes)
        raw = getattr(info, "busId", None)
        if isinstance(raw, bytes | bytearray):
            raw = bytes(raw).split(b"\0")[0].decode("ascii", "replace")
        return raw or None

    def pcie_link(self, index: int) -> tuple[int | None, int | None]:
        """Current PCIe generation and width of GPU ``index``: two calls, cheap to poll."""
        h = self._handles[index]
        return (
            self._optional("nvmlDeviceGetCurrPcieLinkGeneration", h),
            self._optional("nvmlDeviceGetCurrPcieLinkWidth", h),
        )

    def nvlink_active(self, index: int) -> tuple[int, ...] | None:
        """The NVLinks of GPU ``index`` that are up; None when it reports no NVLink at all."""
        return Health(nvlink_states=self._nvlink_states(self._handles[index])).nvlink_active

    def _nvlink_states(
        self, h: Any, notes: list[str] | None = None
    ) -> tuple[tuple[int, bool], ...] | None:
        """``(link, up)`` for each link whose state reads; None when none does.

        A link the GPU does not have answers NotSupported or InvalidArgument: not listed, and
        not noted; any other error is noted (it names the cause when a state goes unreadable).
        """
        states = []
        for link in range(NVLINK_MAX_LINKS):
            state = self._optional(
                "nvmlDeviceGetNvLinkState", h, link, notes=notes, expected=NO_SUCH_LINK
            )
            if state is not None:
                states.append((link, state == FEATURE_ENABLED))
        return tuple(states) or None

    def cpu_affinity(self, index: int) -> tuple[int, ...] | None:
        """CPUs local to GPU ``index`` (its NUMA node), from NVML's ideal-affinity mask."""
        words = self._optional("nvmlDeviceGetCpuAffinity", self._handles[index], CPU_AFFINITY_WORDS)
        if words is None:
            return None
        cpus = [
            w * 64 + bit
            for w, word in enumerate(words)
            for bit in range(64)
            if int(word) >> bit & 1
        ]
        return tuple(cpus) or None

    def gpu(self, index: int) -> GpuInfo:
        h = self._handles[index]
        notes: list[str] = []
        opt = self._optional
        total, free = self._memory(h, notes)
        mig_mode = opt("nvmlDeviceGetMigMode", h, notes=notes)
        mig_enabled = None if mig_mode is None else bool(mig_mode[0])
        arch = opt("nvmlDeviceGetArchitecture", h, notes=notes)
        cc = opt("nvmlDeviceGetCudaComputeCapability", h, notes=notes)
        default_mw = opt("nvmlDeviceGetPowerManagementDefaultLimit", h, notes=notes)
        procs = opt("nvmlDeviceGetComputeRunningProcesses", h, notes=notes)
        health = self._health(h, notes)
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
            power_limit_w=health.power_limit_w,
            health=health,
            processes=None
            if procs is None
            else tuple(GpuProcess(int(p.pid), getattr(p, "usedGpuMemory", None)) for p in procs),
            pci_bus_id=self.pci_bus_id(h, notes),
            numa_node=opt("nvmlDeviceGetNumaNodeId", h),
            power_default_w=None if default_mw is None else default_mw / 1000,
            nvlink_active=health.nvlink_active,
            clocks_mhz=self._clocks(h, notes),
            persistence_mode=_enabled(opt("nvmlDeviceGetPersistenceMode", h, notes=notes)),
            serial=_serial(opt("nvmlDeviceGetSerial", h, notes=notes)),
            notes=tuple(notes),
        )

    def snapshot(self) -> Snapshot:
        return Snapshot(
            source=self.source,
            driver_version=self.driver_version(),
            cuda_version=self.cuda_version(),
            gpus=tuple(self.gpu(i) for i in self.indices),
            skipped=tuple(self.skipped),
        )

    def watch_xid(self, indices: Iterable[int] | None = None) -> XidWatch:
        """Start listening for XID critical errors (register before the workload runs)."""
        return XidWatch(self, self.indices if indices is None else indices)


_SERIAL = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _serial(raw: Any) -> str | None:
    """A board serial as NVML gives it (str, or bytes from older bindings), or None when it is
    not a plain token: it names the board in records and reports, so nothing else gets in."""
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).split(b"\0")[0].decode("ascii", "replace")
    text = raw.strip() if isinstance(raw, str) else ""
    return text if _SERIAL.fullmatch(text) else None


def _enabled(value: Any) -> bool | None:
    return None if value is None else int(value) == FEATURE_ENABLED


def pci_address(bus_id: str | None) -> tuple[int, int, int] | None:
    """``(domain, bus, device)`` of a PCI bus id in NVML's or CUDA's spelling, for matching.

    NVML writes ``00000000:18:00.0``, CUDA ``0000:18:00.0``; both name the same GPU.
    """
    if not bus_id:
        return None
    try:
        domain, bus, rest = bus_id.strip().lower().split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


def cpu_list(cpus: Iterable[int]) -> str:
    """``0-55,112-167``: a CPU set as Linux lists it, for the report."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)


def load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable(
            "NVML library not found: the Python bindings (nvidia-ml-py) are not installed",
            "pip install nvidia-ml-py (gpu-ci's requirements include it)",
        ) from None
    return pynvml


_T = TypeVar("_T")


class NvmlStuck(NvmlUnavailable):
    """NVML did not answer by the deadline: its call still waits on another thread, so the
    session must not be closed (``nvmlShutdown`` would wait on the same lock)."""


def within_deadline(
    environ: Mapping[str, str], work: Callable[[], _T], what: str, at_most: float | None = None
) -> _T:
    """``work()`` (NVML calls), given ``GPUCI_NVML_TIMEOUT`` seconds.

    A GPU that fell off the bus, or a driver mid-reset, can hold ``nvmlInit`` or a query in
    the kernel for ever (nvidia-smi hangs the same way), and the job with it until the CI
    platform's own timeout. So ``work`` runs on a daemon thread: past the deadline the step
    fails with one line (:class:`NvmlUnavailable`, exit 3) and the stuck thread is left to
    the process's end. Its errors are raised here as they are. ``at_most``: fewer seconds,
    for a read that is only a courtesy.
    """
    seconds = settings.NVML_TIMEOUT.number(environ, minimum=0.001)
    seconds = seconds if at_most is None else min(seconds, at_most)
    done: list[_T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as exc:  # raised again on the caller's thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="gpuci-nvml", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise NvmlStuck(
            f"NVML did not answer within {seconds:g}s ({what}): a GPU or the driver is stuck",
            "drain this node and check nvidia-smi and dmesg (Xid errors); "
            f"{settings.NVML_TIMEOUT.name} sets the wait",
        )
    if failed:
        raise failed[0]
    return done[0]


def open_nvml(environ: Mapping[str, str], nvml: Any = None) -> NvmlSession:
    """An open session on ``nvml``; else the fake named by ``GPUCI_FAKE_NVML``; else pynvml."""
    if nvml is not None:
        return NvmlSession(nvml, getattr(nvml, "source", "injected")).open()
    spec = settings.FAKE_NVML.value(environ)
    if spec:
        from gpuci.gpu.fake.nvml import FakeNvml

        fake = FakeNvml.from_spec(spec)
        return NvmlSession(fake, fake.source).open()
    return NvmlSession(load_pynvml(), "nvml").open()
