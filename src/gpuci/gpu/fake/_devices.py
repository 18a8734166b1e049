"""The fake NVML's state: the error it raises, and each fake GPU (and MIG slice) with the drift
a test or a ``GPUCI_FAKE_NVML`` modifier gives it between two reads."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field, replace

from gpuci.gpu import _nvml_abi as abi
from gpuci.gpu.fake._profiles import HGX_BUSES, MigProfile, Profile

_NS = uuidlib.UUID("6f1c8e52-6a3e-4c8e-9b1e-6a1a0c9e7d11")


class NVMLError(Exception):
    """Same contract as ``pynvml.NVMLError``: the NVML return code in ``.value``."""

    _TEXT = {
        abi.ERROR_INVALID_ARGUMENT: "Invalid Argument",
        abi.ERROR_NOT_SUPPORTED: "Not Supported",
        abi.ERROR_NOT_FOUND: "Not Found",
        abi.ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        abi.ERROR_TIMEOUT: "Timeout",
        abi.ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        abi.ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        abi.ERROR_GPU_IS_LOST: "GPU is lost",
        abi.ERROR_NO_PERMISSION: "Insufficient Permissions",
        abi.ERROR_RESET_REQUIRED: "GPU requires restart",
        abi.ERROR_UNKNOWN: "Unknown Error",
    }

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._TEXT.get(self.value, f"NVML Error with code {self.value}")


def _uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuidlib.uuid5(_NS, '/'.join(map(str, parts)))}"


@dataclass
class _Drift:
    ecc: int = 0
    replay: int = 0
    clock_events: int | None = None
    nvlink_down: tuple[int, ...] = ()  # links that go down from the second health read on
    throttle_ns: dict[str, int] = field(default_factory=dict)  # added from the second read on
    nvlink_errors: dict[tuple[int, str], int] = field(default_factory=dict)  # (link, name) +N


class FakeDevice:
    def __init__(self, profile_name: str, profile: Profile, index: int) -> None:
        self.profile_name = profile_name
        self.p = replace(profile)
        self.index = index
        self.uuid = _uuid("GPU", profile_name, index)
        self.migs = [
            FakeMig(self, slot, m) for slot, m in enumerate(self.p.mig or []) if self.p.mig
        ]
        self.drift = _Drift()
        self.reads = 0  # health reads, so drift shows from the second read on
        bus = HGX_BUSES[index] if index < len(HGX_BUSES) else 0x10 + index
        self.bus_id = f"00000000:{bus:02X}:00.0"
        # A dual-socket host: GPUs 0-3 on NUMA node 0, 4-7 on node 1, two CPUs per node (so the
        # affinity is applicable on a small CI machine too).
        self.numa_node = index // 4
        self.cpus = (2 * self.numa_node, 2 * self.numa_node + 1)


class FakeMig:
    def __init__(self, parent: FakeDevice, slot: int, profile: MigProfile) -> None:
        self.parent = parent
        self.slot = slot
        self.p = profile
        self.uuid = _uuid("MIG", parent.uuid, slot)


class EventSet:
    def __init__(self) -> None:
        self.devices: set[int] = set()


# The clock-event bits behind each cumulative counter (nvml.h documents each pair).
_COUNTER_BITS = {
    "power": 0x4,
    "sync_boost": 0x10,
    "thermal": 0x20 | 0x40,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}


# The reads a bare ``readerr=CODE`` breaks after the load: the memory and PCIe counters.
MEMORY_READS = ("TotalEccErrors", "RemappedRows", "PcieReplayCounter")


def clock_event_names_for_counter(name: str) -> int:
    return _COUNTER_BITS.get(name, 0)
