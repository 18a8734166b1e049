"""A fake NVML with the surface of ``pynvml`` that :class:`~gpuci.gpu._nvml.NvmlSession` calls.

Profiles carry values as real GPUs report them (``nvidia-smi -q`` on those boards and NVIDIA's
spec sheets): memory in MiB as the framebuffer reports it, driver and CUDA pairs that shipped
together, which counters each generation supports (row remapping from Ampere on, retired pages
before it). Select in-process with ``FakeNvml(["h200"])`` or across processes with
``GPUCI_FAKE_NVML=h100-sxm,h100-sxm``. A profile may carry modifiers after ``:``, e.g.
``h100-sxm:xid=79:ecc+=2:replay+=40`` (an XID 79 queued for the first event wait; the ECC and
PCIe replay counters grow by that much from the second read on), so a workload-time change can
be simulated across a process boundary; ``events=fail`` makes ``nvmlEventSetCreate`` fail (as on
some vGPU and container setups), so XIDs cannot be watched. In-process,
:meth:`FakeNvml.inject_xid` and :meth:`FakeNvml.set` change a GPU between two reads.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from gpuci.errors import InputError
from gpuci.gpu import _nvml_abi as abi
from gpuci.gpu.fake._devices import (
    MEMORY_READS,
    EventSet,
    FakeDevice,
    FakeMig,
    NVMLError,
    clock_event_names_for_counter,
)
from gpuci.gpu.fake._profiles import (
    MACHINE_STATES,
    PROFILES,
    UNSUPPORTED,
    MiB,
    MigProfile,
    Profile,
)

__all__ = [
    "MACHINE_STATES",
    "MEMORY_READS",
    "PROFILES",
    "UNSUPPORTED",
    "FakeDevice",
    "FakeMig",
    "FakeNvml",
    "MiB",
    "MigProfile",
    "NVMLError",
    "Profile",
    "clock_event_names_for_counter",
]


class FakeNvml:
    """Fake ``pynvml``: the functions named in :data:`gpuci.gpu._nvml_abi.SEAM`, no hardware."""

    NVMLError = NVMLError

    def __init__(
        self,
        profiles: list[str] | None = None,
        *,
        init_error: int | None = None,
        source: str | None = None,
    ) -> None:
        self.devices: list[FakeDevice] = []
        for index, name in enumerate(profiles or []):
            if name not in PROFILES:
                raise InputError(
                    f"unknown fake NVML profile '{name}'",
                    hint="use one of: " + ", ".join([*PROFILES, *MACHINE_STATES]),
                )
            self.devices.append(FakeDevice(name, PROFILES[name], index))
        self.init_error = init_error
        self.source = source or "fake:" + ",".join(profiles or ["none"])
        self.initialised = 0
        self._cond = threading.Condition()
        # (device index, xid, GPU instance id or None), delivered in order
        self._xids: list[tuple[int, int, int | None]] = []
        self.event_set_error: int | None = None  # nvmlEventSetCreate fails with this code

    # ----- construction from GPUCI_FAKE_NVML ----------------------------------------------
    @classmethod
    def from_spec(cls, spec: str) -> FakeNvml:
        """``h100-sxm,h100-sxm``, ``a100-mig``, ``no-driver``, ``h200:xid=79:ecc+=1``."""
        items = [s.strip() for s in spec.split(",") if s.strip()]
        if len(items) == 1 and items[0] in MACHINE_STATES:
            return cls([], init_error=MACHINE_STATES[items[0]], source=f"fake:{items[0]}")
        names = [item.split(":")[0] for item in items]
        fake = cls(names, source=f"fake:{spec.strip()}")
        for dev, item in zip(fake.devices, items, strict=True):
            for mod in item.split(":")[1:]:
                fake._apply_modifier(dev, mod.strip())
        return fake

    def _apply_modifier(self, dev: FakeDevice, mod: str) -> None:
        try:
            if mod.startswith("xid="):  # xid=79, or xid=31@2: from GPU instance 2 (MIG)
                xid, _, gi = mod[4:].partition("@")
                self._xids.append((dev.index, int(xid), int(gi) if gi else None))
            elif mod.startswith("ecc+="):
                dev.drift.ecc = int(mod[5:])
            elif mod.startswith("replay+="):
                dev.drift.replay = int(mod[8:])
            elif mod.startswith("clocks="):
                dev.drift.clock_events = int(mod[7:], 0)
            elif mod.startswith("nvdown="):  # nvdown=3: NVLink 3 goes down under the load
                dev.drift.nvlink_down += (int(mod[7:]),)
            elif mod.startswith("throttle="):  # throttle=hw_thermal_slowdown+12: 12 s more
                name, _, seconds = mod[9:].partition("+")
                if name not in {*abi.VIOLATION_POLICIES.values(), *abi.CLOCK_EVENT_FIELDS.values()}:
                    raise ValueError(mod)
                dev.drift.throttle_ns[name] = int(float(seconds) * 1e9)
            elif mod.startswith("nverr="):  # nverr=crc_flit@3+12: 12 more CRC errors on link 3
                name, _, rest = mod[6:].partition("@")
                link, _, count = rest.partition("+")
                if name not in abi.NVLINK_ERRORS.values():
                    raise ValueError(mod)
                dev.drift.nvlink_errors[(int(link), name)] = int(count)
            elif mod.startswith("appclock="):  # appclock=1200: SM applications clock lowered
                cur, _, default, top = dev.p.sm_clocks or (0, 0, 0, 0)
                dev.p = replace(dev.p, sm_clocks=(cur, int(mod[9:]), default, top))
            elif mod.startswith("open="):
                dev.p = replace(dev.p, open_error=int(mod[5:]))
            elif mod.startswith("readerr="):  # readerr=16, or readerr=999@ViolationStatus
                code, _, calls = mod[8:].partition("@")
                named = tuple(c for c in calls.split("+") if c)
                if any(not hasattr(self, f"nvmlDeviceGet{c}") for c in named):
                    raise ValueError(mod)
                dev.p = replace(dev.p, read_error=int(code), read_error_calls=named)
            elif mod == "events=fail":
                self.event_set_error = 999  # NVML_ERROR_UNKNOWN
            else:
                raise ValueError(mod)
        except ValueError:
            raise InputError(
                f"GPUCI_FAKE_NVML modifier '{mod}' is not understood",
                hint="use xid=N[@GI], ecc+=N, replay+=N, clocks=0xMASK, nvdown=LINK, "
                "throttle=REASON+SECONDS, nverr=COUNTER@LINK+N, appclock=MHZ, open=CODE, "
                "readerr=CODE[@CALL+CALL] or events=fail",
            ) from None

    # ----- test controls -----------------------------------------------------------------
    def inject_xid(self, index: int, xid: int, gpu_instance_id: int | None = None) -> None:
        """Deliver an XID on GPU ``index`` (from MIG GPU instance ``gpu_instance_id``)."""
        with self._cond:
            self._xids.append((index, xid, gpu_instance_id))
            self._cond.notify_all()

    def set(self, index: int, **fields: Any) -> None:
        """Change profile values of GPU ``index`` now, e.g. ``set(0, pcie_replay=12)``."""
        dev = self.devices[index]
        dev.p = replace(dev.p, **fields)

    # ----- helpers -----------------------------------------------------------------------
    def _check(self) -> None:
        if not self.initialised:
            raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED

    @staticmethod
    def _value(value: Any) -> Any:
        if value is None:
            raise NVMLError(abi.ERROR_NOT_SUPPORTED)
        return value

    def _dev(self, handle: Any) -> FakeDevice:
        self._check()
        if not isinstance(handle, FakeDevice):
            raise NVMLError(abi.ERROR_NOT_SUPPORTED)  # MIG handles lack most device queries
        return handle

    # ----- system ------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.devices[0].p.driver if self.devices else "550.90.07"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._check()
        return self.devices[0].p.cuda if self.devices else 12040

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        self._check()
        if not 0 <= index < len(self.devices):
            raise NVMLError(abi.ERROR_INVALID_ARGUMENT)
        open_error = self.devices[index].p.open_error
        if open_error is not None:
            raise NVMLError(open_error)
        return self.devices[index]

    # ----- identity and memory -----------------------------------------------------------
    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._check()
        if isinstance(handle, FakeMig):
            return f"{handle.parent.p.name} MIG {handle.p.name}"
        return self._dev(handle).p.name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._check()
        return handle.uuid

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        dev = self._dev(handle)
        return f"{self._value(dev.p.serial_prefix)}{dev.index:04d}"

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._dev(handle).index

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> SimpleNamespace:
        dev = self._dev(handle)
        bus = int(dev.bus_id.split(":")[1], 16)
        return SimpleNamespace(busId=dev.bus_id.encode(), domain=0, bus=bus, device=0)

    def nvmlDeviceGetCpuAffinity(self, handle: Any, words: int) -> list[int]:
        dev = self._dev(handle)
        mask = [0] * words
        for cpu in dev.cpus:
            mask[cpu // 64] |= 1 << (cpu % 64)
        return mask

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        return self._dev(handle).numa_node

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> SimpleNamespace:
        self._check()
        if isinstance(handle, FakeMig):
            total, reserved, v2 = handle.p.memory_mib * MiB, 0, handle.parent.p.memory_v2
        else:
            dev = self._dev(handle)
            total, reserved, v2 = dev.p.memory_mib * MiB, dev.p.reserved_mib * MiB, dev.p.memory_v2
        if version and not v2:
            raise NVMLError(abi.ERROR_FUNCTION_NOT_FOUND)
        used = 5 * MiB  # a driver context's worth, as an idle GPU shows
        if version:
            return SimpleNamespace(
                version=version, total=total, reserved=reserved, free=total - reserved - used,
                used=used,
            )  # fmt: skip
        return SimpleNamespace(total=total, free=total - reserved - used, used=reserved + used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._dev(handle).p.cc

    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:
        return self._dev(handle).p.arch

    # ----- MIG ---------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        mig = self._value(self._dev(handle).p.mig)
        return [int(bool(mig)), int(bool(mig))]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        dev = self._dev(handle)
        self._value(dev.p.mig)
        return 7 if dev.p.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> FakeMig:
        dev = self._dev(handle)
        if not dev.p.mig:
            raise NVMLError(abi.ERROR_INVALID_ARGUMENT)
        if index >= len(dev.migs):
            raise NVMLError(abi.ERROR_NOT_FOUND)
        return dev.migs[index]

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        self._check()
        if not isinstance(handle, FakeMig):
            raise NVMLError(abi.ERROR_INVALID_ARGUMENT)
        return handle.p.gpu_instance_id

    # ----- health ------------------------------------------------------------------------
    def _read(self, dev: FakeDevice, call: str) -> bool:
        """True from the second health read on, when ``:ecc+=``-style drift applies; raises
        the profile's ``read_error`` then, for the reads it names."""
        broken = dev.p.read_error is not None and call in (dev.p.read_error_calls or MEMORY_READS)
        if dev.reads >= 2 and broken:
            raise NVMLError(dev.p.read_error)  # type: ignore[arg-type]
        return dev.reads >= 2

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        dev = self._dev(handle)
        dev.reads += 1  # the session reads ECC mode first in every health read
        enabled = int(bool(self._value(dev.p.ecc_enabled)))
        pending = enabled if dev.p.ecc_pending is None else int(dev.p.ecc_pending)
        return [enabled, pending]

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return int(bool(self._value(self._dev(handle).p.persistence)))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int:
        dev = self._dev(handle)
        if not dev.p.ecc_enabled:
            raise NVMLError(abi.ERROR_NOT_SUPPORTED)
        later = self._read(dev, "TotalEccErrors")
        base = self._value(dev.p.ecc_volatile_uncorrected)
        if error_type != abi.MEMORY_ERROR_TYPE_UNCORRECTED:
            return 0
        return base + (dev.drift.ecc if later else 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return int(self._value(self._dev(handle).p.retired_pages_pending))

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        self._read(self._dev(handle), "RemappedRows")
        corr, unc, pending, failure = self._value(self._dev(handle).p.remapped_rows)
        return corr, unc, int(pending), int(failure)

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        dev = self._dev(handle)
        later = self._read(dev, "PcieReplayCounter")
        return self._value(dev.p.pcie_replay) + (dev.drift.replay if later else 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        dev = self._dev(handle)
        if self._read(dev, "CurrentClocksEventReasons") and dev.drift.clock_events is not None:
            return dev.drift.clock_events
        return self._value(dev.p.clock_events)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        dev = self._dev(handle)
        self._read(dev, "Temperature")
        return self._value(dev.p.temperature_c)

    # ----- PCIe, power, processes --------------------------------------------------------
    def _pcie(self, handle: Any, attr: str, which: int) -> int:
        return self._value(getattr(self._dev(handle).p, attr))[which]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, "pcie_gen", 0)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, "pcie_gen", 1)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, "pcie_width", 0)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, "pcie_width", 1)

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        dev = self._dev(handle)
        self._read(dev, "PowerManagementLimit")
        return self._value(dev.p.power_limit_mw)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        p = self._dev(handle).p
        return self._value(p.power_limit_mw if p.power_default_mw is None else p.power_default_mw)

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        dev = self._dev(handle)
        if link >= dev.p.nvlinks:
            raise NVMLError(
                abi.ERROR_NOT_SUPPORTED if not dev.p.nvlinks else abi.ERROR_INVALID_ARGUMENT
            )
        self._read(dev, "NvLinkState")
        down = dev.p.nvlinks_down + (dev.drift.nvlink_down if dev.reads >= 2 else ())
        return 0 if link in down else abi.FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        dev = self._dev(handle)
        if not dev.p.nvlink_counters or link >= dev.p.nvlinks:
            raise NVMLError(abi.ERROR_NOT_SUPPORTED)
        self._read(dev, "NvLinkErrorCounter")
        name = abi.NVLINK_ERRORS.get(counter)
        if name is None:
            raise NVMLError(abi.ERROR_INVALID_ARGUMENT)
        return dev.drift.nvlink_errors.get((link, name), 0) if dev.reads >= 2 else 0

    def _throttle(self, dev: FakeDevice, name: str) -> int:
        base = self._value(dev.p.throttle_ns)
        if name not in base:
            raise NVMLError(abi.ERROR_NOT_SUPPORTED)
        if dev.reads < 2:
            return base[name]
        # A reason held by ``clocks=`` drift accrues 2 s per health read (the fake's clock), so
        # the cumulative counters agree with the sampled bits, as on a real GPU.
        held = clock_event_names_for_counter(name) & (dev.drift.clock_events or 0)
        return (
            base[name] + dev.drift.throttle_ns.get(name, 0) + (2 * dev.reads if held else 0) * 10**9
        )

    def nvmlDeviceGetViolationStatus(self, handle: Any, policy: int) -> SimpleNamespace:
        dev = self._dev(handle)
        self._read(dev, "ViolationStatus")
        name = abi.VIOLATION_POLICIES.get(policy)
        if name is None:
            raise NVMLError(abi.ERROR_INVALID_ARGUMENT)
        # referenceTime: microseconds since the epoch, as the driver stamps it
        return SimpleNamespace(
            referenceTime=1_764_600_000_000_000, violationTime=self._throttle(dev, name)
        )

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> list[SimpleNamespace]:
        """R535+ answers the slowdown fields; an older driver answers NotSupported per field."""
        dev = self._dev(handle)
        self._read(dev, "FieldValues")
        self._value(dev.p.throttle_ns)
        new = int(dev.p.driver.split(".")[0]) >= 535
        values = []
        for fid in field_ids:
            name = abi.CLOCK_EVENT_FIELDS.get(fid)
            try:
                if name is None or not new:
                    raise NVMLError(abi.ERROR_NOT_SUPPORTED)
                value, ret = self._throttle(dev, name), abi.SUCCESS
            except NVMLError as exc:
                value, ret = 0, exc.value
            values.append(
                SimpleNamespace(fieldId=fid, nvmlReturn=ret, value=SimpleNamespace(ullVal=value))
            )
        return values

    def _clock(self, handle: Any, clock: int, which: int) -> int:
        p = self._dev(handle).p
        row = (
            p.sm_clocks if clock == abi.CLOCK_SM else p.mem_clocks if clock == abi.CLOCK_MEM else 0
        )
        if row == 0:
            raise NVMLError(abi.ERROR_INVALID_ARGUMENT)
        return self._value(row)[which]

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return self._clock(handle, clock, 0)

    def nvmlDeviceGetApplicationsClock(self, handle: Any, clock: int) -> int:
        self._read(self._dev(handle), "ApplicationsClock")
        return self._clock(handle, clock, 1)

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: Any, clock: int) -> int:
        return self._clock(handle, clock, 2)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: int) -> int:
        return self._clock(handle, clock, 3)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        dev = self._dev(handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in dev.p.processes]

    # ----- events ------------------------------------------------------------------------
    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        dev = self._dev(handle)
        return abi.EVENT_XID_CRITICAL_ERROR | 0x1 if dev.p.xid_supported else 0x1

    def nvmlEventSetCreate(self) -> EventSet:
        self._check()
        if self.event_set_error is not None:
            raise NVMLError(self.event_set_error)
        return EventSet()

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: EventSet) -> None:
        dev = self._dev(handle)
        if types & abi.EVENT_XID_CRITICAL_ERROR and not dev.p.xid_supported:
            raise NVMLError(abi.ERROR_NOT_SUPPORTED)
        event_set.devices.add(dev.index)

    def nvmlEventSetWait_v2(self, event_set: EventSet, timeout_ms: int) -> SimpleNamespace:
        self._check()

        def pending() -> int | None:
            for i, (index, _, _) in enumerate(self._xids):
                if index in event_set.devices:
                    return i
            return None

        with self._cond:
            if not self._cond.wait_for(lambda: pending() is not None, timeout_ms / 1000):
                raise NVMLError(abi.ERROR_TIMEOUT)
            index, xid, gi = self._xids.pop(pending())  # type: ignore[arg-type]
        return SimpleNamespace(
            device=self.devices[index],
            eventType=abi.EVENT_XID_CRITICAL_ERROR,
            eventData=xid,
            gpuInstanceId=abi.NO_INSTANCE if gi is None else gi,
            computeInstanceId=abi.NO_INSTANCE,
        )

    def nvmlEventSetFree(self, event_set: EventSet) -> None:
        self._check()
        event_set.devices.clear()
