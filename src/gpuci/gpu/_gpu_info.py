"""What NVML saw, as plain frozen data: GPUs, MIG devices, health counters, XID events.

Kept apart from the session that reads them (:mod:`gpuci.gpu._nvml`) so code that only looks
at a snapshot (checks, summaries, smoke) reads one small module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuci.gpu._nvml_abi import clock_event_names

# Every value the after-load health read takes, and how a finding names it. One rule covers
# them all (:meth:`Health.unreadable_since`): a read that answered before the load and errors
# after it (RESET_REQUIRED, UNKNOWN, GPU_IS_LOST) is a GPU the load broke, not "unsupported".
# Keyed reads (a tuple of ``(key..., value)`` rows) are compared key by key; the format names
# one missing key, the label the whole read.
_READS: dict[str, tuple[str, str | None]] = {
    "ecc_enabled": ("ECC mode", None),
    "ecc_volatile_uncorrected": ("volatile uncorrected ECC errors", None),
    "retired_pages_pending": ("retired pages pending", None),
    "remapped_rows_pending": ("remapped rows", None),
    "pcie_replay_counter": ("PCIe replay counter", None),
    "clock_event_reasons": ("clock-event reasons", None),
    "temperature_c": ("temperature", None),
    "power_limit_w": ("power limit", None),
    "app_clocks_mhz": ("applications clocks", "{0} applications clock"),
    "throttle_ns": ("throttle (violation) counters", "{0} throttle counter"),
    "nvlink_states": ("NVLink states", "NVLink {0} state"),
    "nvlink_errors": ("NVLink error counters", "NVLink {0} {1} counter"),
}
_MAX_NAMED = 4  # missing keys named one by one in a finding; the rest are counted


@dataclass(frozen=True)
class Health:
    """Counters that say a GPU is degrading; read twice to see what a workload changed."""

    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None  # the ECC mode after the next reset (differs: a change waits)
    ecc_volatile_uncorrected: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    pcie_replay_counter: int | None = None
    clock_event_reasons: int | None = None
    temperature_c: int | None = None
    # Cumulative ns clocks were held down, per violation policy / clock-event reason (names in
    # nvml_abi.VIOLATION_POLICIES and CLOCK_EVENT_FIELDS); None: the GPU reports none of them.
    throttle_ns: tuple[tuple[str, int], ...] | None = None
    # NVLink error counters of the active links: (link, counter name, value); None: none read.
    nvlink_errors: tuple[tuple[int, str, int], ...] | None = None
    # (link, up) for each NVLink whose state NVML answered; None: no link answered (no NVLink).
    nvlink_states: tuple[tuple[int, bool], ...] | None = None
    power_limit_w: float | None = None  # the enforced limit now (a reset may change it)
    app_clocks_mhz: tuple[tuple[str, int], ...] | None = None  # ("sm"|"mem", applications MHz)
    errors: tuple[str, ...] = ()  # NVML errors other than "unsupported" met in this read

    def unreadable_since(self, before: Health) -> list[str]:
        """Reads ``before`` answered that this read could not: a GPU broken by the load.

        RESET_REQUIRED, UNKNOWN or GPU_IS_LOST after a clean baseline is not "unsupported":
        the same call answered minutes ago on the same GPU. Applied to every value in
        ``_READS``; an NVLink that went down is judged as down, so its error counters (read on
        links that are up) are not also called unreadable.
        """
        lost = []
        for name, (label, each) in _READS.items():
            was, now = getattr(before, name), getattr(self, name)
            if was is None:
                continue  # never readable here: unsupported, not a finding
            if now is None or each is None:
                lost += [label] if now is None else []
                continue
            keys = [row[:-1] for row in now]
            if name == "nvlink_errors":
                up = set(self.nvlink_active or ())
                keys += [row[:-1] for row in was if row[0] not in up]
            missing = [row[:-1] for row in was if row[:-1] not in keys]
            named = [each.format(*key) for key in missing[:_MAX_NAMED]]
            if len(missing) > _MAX_NAMED:
                named.append(f"{len(missing) - _MAX_NAMED} more {label}")
            lost += named
        return lost

    @property
    def nvlink_active(self) -> tuple[int, ...] | None:
        """The NVLinks up in this read; None when no link state was readable."""
        if self.nvlink_states is None:
            return None
        return tuple(link for link, up in self.nvlink_states if up)

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
    pci_bus_id: str | None = None  # "00000000:18:00.0": matches a CUDA device without a UUID
    numa_node: int | None = None  # the host NUMA node the GPU hangs off (newer drivers)
    persistence_mode: bool | None = None  # Linux only; off: settings may reset when idle
    power_default_w: float | None = None  # the board's default power limit
    nvlink_active: tuple[int, ...] | None = None  # NVLink ids up; None: no NVLink reported
    # ("sm" or "mem", current, applications, default applications, max clock) in MHz; a None
    # inside: that value is unsupported.
    clocks_mhz: tuple[tuple[str, int | None, int | None, int | None, int | None], ...] = ()
    # The board's serial number (nvmlDeviceGetSerial: the one on the label, which follows the
    # board to the RMA desk; a UUID does not). None: not reported (GeForce and most consumer
    # boards answer NotSupported).
    serial: str | None = None

    def mode_findings(self) -> list[str]:
        """ECC off or changing, persistence off: reported, never failed (the owner's choice)."""
        found = []
        h = self.health
        if h.ecc_enabled is False:
            found.append(
                "ECC is off: uncorrected memory errors go unreported (nvidia-smi -e 1, then "
                "reset the GPU, to turn it on)"
            )
        changing = h.ecc_enabled is not None and h.ecc_pending is not None
        if changing and h.ecc_pending != h.ecc_enabled:
            after = "on" if h.ecc_pending else "off"
            found.append(f"an ECC mode change (to {after}) is pending until the GPU resets")
        limit, default = self.power_limit_w, self.power_default_w
        if limit and default and limit < 0.95 * default:
            found.append(
                f"power limit lowered to {limit:g} W of the default {default:g} W: GEMM and "
                "bandwidth run slower than the model table expects (nvidia-smi -pl to restore)"
            )
        for clock, _now, app, default, top in self.clocks_mhz:
            floor = default or top  # a lowered default would be the vendor's: compare to it
            if app and floor and app < floor:
                of = f"the default {default}" if default else f"the max {top}"
                found.append(
                    f"{clock.upper()} applications clock set to {app} MHz, below {of} MHz (max "
                    f"{top if top is not None else '?'}): the GPU runs slower than the model "
                    "table expects (nvidia-smi -rac to reset)"
                )
        if self.persistence_mode is False:
            found.append(
                "persistence mode is off: each process pays driver start-up and clocks or "
                "limits may reset when idle (run nvidia-persistenced)"
            )
        return found

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
class SkippedGpu:
    """A GPU NVML counts but this process cannot open (NoPermission under a device cgroup)."""

    index: int
    reason: str
    code: int | None = None


@dataclass(frozen=True)
class Snapshot:
    source: str  # "nvml" or "fake:<profiles>"
    driver_version: str | None
    cuda_version: tuple[int, int] | None  # highest CUDA the driver supports
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)
    skipped: tuple[SkippedGpu, ...] = ()  # counted by NVML, not openable here: not judged

    @property
    def cuda_text(self) -> str | None:
        return None if self.cuda_version is None else "{}.{}".format(*self.cuda_version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_text,
            "gpus": [g.to_dict() for g in self.gpus],
            "skipped": [asdict(s) for s in self.skipped],
        }


@dataclass(frozen=True)
class XidEvent:
    gpu_index: int | None
    uuid: str | None
    xid: int
    gpu_instance_id: int | None = None  # the MIG GPU instance it came from; None: whole GPU
