"""The GPUs :class:`~gpuci.gpu.fake.nvml.FakeNvml` can be: recorded profiles as plain data.

Values as real GPUs report them (``nvidia-smi -q`` on those boards and NVIDIA's spec sheets);
the fake's behaviour lives in :mod:`gpuci.gpu.fake.nvml` and :mod:`gpuci.gpu.fake._devices`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuci.gpu import _nvml_abi as abi

MiB = 1024 * 1024

UNSUPPORTED = None  # a profile field set to this makes the call raise NotSupported


@dataclass
class MigProfile:
    name: str  # e.g. "3g.20gb"
    memory_mib: int
    gpu_instance_id: int


@dataclass
class Profile:
    """One GPU as NVML reports it. ``None`` fields raise NVML_ERROR_NOT_SUPPORTED."""

    name: str
    memory_mib: int
    cc: tuple[int, int]
    arch: int
    driver: str
    cuda: int  # nvmlSystemGetCudaDriverVersion_v2 form: 12040 = 12.4
    power_limit_mw: int | None
    pcie_gen: tuple[int, int] | None  # (current, max)
    pcie_width: tuple[int, int] | None = (16, 16)
    reserved_mib: int = 0  # FB the driver keeps for itself
    temperature_c: int | None = 33
    ecc_enabled: bool | None = True
    ecc_pending: bool | None = None  # the mode after the next reset; None: same as now
    persistence: bool | None = True  # nvmlDeviceGetPersistenceMode (Linux)
    power_default_mw: int | None = None  # the board's default limit; None: power_limit_mw
    nvlinks: int = 0  # NVLinks the board has (0: none, every link call says NotSupported)
    nvlinks_down: tuple[int, ...] = ()  # of those, links that are inactive
    ecc_volatile_uncorrected: int | None = 0
    retired_pages_pending: bool | None = None  # pre-Ampere only
    remapped_rows: tuple[int, int, bool, bool] | None = None  # corr, unc, pending, failure
    pcie_replay: int | None = 0
    clock_events: int | None = 0x1  # GPU idle
    mig: list[MigProfile] | None = None  # None: MIG unsupported; []: supported, off
    memory_v2: bool = True  # nvmlDeviceGetMemoryInfo_v2 exists (R510+)
    processes: list[tuple[int, int]] = field(default_factory=list)
    xid_supported: bool = True
    open_error: int | None = None  # nvmlDeviceGetHandleByIndex fails so (NoPermission: 4)
    # From the second health read on, reads fail with this NVML code (RESET_REQUIRED 16,
    # UNKNOWN 999, GPU_IS_LOST 15): a GPU that broke under the load. Which reads: the calls in
    # ``read_error_calls`` (``nvmlDeviceGet`` left off: "ViolationStatus", "NvLinkState"), or
    # the memory and PCIe counters (``MEMORY_READS``) when it is empty.
    read_error: int | None = None
    read_error_calls: tuple[str, ...] = ()
    # Cumulative throttle ns since the driver loaded, per violation policy and (R535+) slowdown
    # field value, as a healthy node some days up shows them: power-capped for a while under
    # earlier jobs, idle most of the time, never thermally slowed. None: NotSupported (vGPU).
    throttle_ns: dict[str, int] | None = field(
        default_factory=lambda: {
            "power": 41_250_000_000,
            "thermal": 0,
            "sync_boost": 0,
            "board_limit": 0,
            "low_util": 9_100_000_000_000,
            "reliability": 0,
            "sw_thermal_slowdown": 0,
            "hw_thermal_slowdown": 0,
            "hw_power_brake_slowdown": 0,
        }
    )
    nvlink_counters: bool = True  # nvmlDeviceGetNvLinkErrorCounter answers on the links up
    # (current, applications, default applications, max) MHz; None: NotSupported
    sm_clocks: tuple[int, int, int, int] | None = (1410, 1980, 1980, 1980)
    mem_clocks: tuple[int, int, int, int] | None = (2619, 2619, 2619, 2619)
    # nvmlDeviceGetSerial: NVIDIA's 13-digit board serial (made up here, in that form: these
    # first 9 digits, then the GPU's index in 4); None: NotSupported, as on GeForce boards.
    serial_prefix: str | None = "132102100"


NO_REMAPS = (0, 0, False, False)  # row remapping (Ampere and later) with nothing remapped
# PCI buses of the eight GPUs in an HGX H100 board, as nvidia-smi shows them.
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

# NVML's architecture number of each compute capability below (nvml.h's NVML_DEVICE_ARCH_*).
_ARCH = {(7, 0): 5, (7, 5): 6, (8, 0): 7, (8, 9): 8, (9, 0): 9}  # Volta Turing Ampere Ada Hopper


def _board(
    name: str,
    memory_mib: int,
    cc: tuple[int, int],
    driver: str,
    cuda: int,
    power_w: int,
    pcie_gen: tuple[int, int],
    temperature_c: int,
    serial_prefix: str,
    **more: Any,
) -> Profile:
    """One recorded board. Its NVML architecture follows from ``cc``, and so does the memory
    counter its generation has: row remapping from Ampere on, retired pages before it."""
    counter = {"remapped_rows": NO_REMAPS} if cc >= (8, 0) else {"retired_pages_pending": False}
    fields = {"temperature_c": temperature_c, "serial_prefix": serial_prefix, **counter, **more}
    return Profile(
        name, memory_mib, cc, _ARCH[cc], driver, cuda, power_w * 1000, pcie_gen, **fields
    )


# Each row: _board(name, memory MiB, compute capability, driver, CUDA, power limit W,
# PCIe (current, max) generation, temperature C, serial prefix, then what differs).
# fmt: off
PROFILES: dict[str, Profile] = {
    # nvidia-smi on an H200 SXM: 143771 MiB FB (141 GB HBM3e), 700 W, PCIe Gen5 x16.
    "h200": _board(
        "NVIDIA H200", 143771, (9, 0), "550.90.07", 12040, 700, (5, 5), 31, "165242100",
        reserved_mib=579, mig=[], nvlinks=18, mem_clocks=(3201, 3201, 3201, 3201),
    ),
    # H100 SXM5 80GB: 81559 MiB FB, 700 W, driver 535 / CUDA 12.2.
    "h100-sxm": _board(
        "NVIDIA H100 80GB HBM3", 81559, (9, 0), "535.129.03", 12020, 700, (5, 5), 29, "165232100",
        reserved_mib=551, mig=[], nvlinks=18,
    ),
    # A100 SXM4 40GB in MIG mode with two 3g.20gb GPU instances (19968 MiB each).
    "a100-mig": _board(
        "NVIDIA A100-SXM4-40GB", 40960, (8, 0), "525.85.12", 12000, 400, (4, 4), 27, "132102200",
        mig=[MigProfile("3g.20gb", 19968, 1), MigProfile("3g.20gb", 19968, 2)],
    ),
    # L4: 23034 MiB GDDR6, 72 W, PCIe Gen4 x16, Ada (cc 8.9).
    "l4": _board(
        "NVIDIA L4", 23034, (8, 9), "535.104.05", 12020, 72, (4, 4), 38, "132432300",
        reserved_mib=428, mig=None,
    ),
    # T4: 15360 MiB GDDR6, 70 W, PCIe Gen3 x16, Turing (cc 7.5): retired pages, no remapping.
    # It idles at PCIe Gen1 to save power, as nvidia-smi shows. Its default applications clock
    # is 585 MHz (boost to 1590 is automatic): not lowered.
    "t4": _board(
        "Tesla T4", 15360, (7, 5), "535.104.05", 12020, 70, (1, 3), 41, "132352000",
        mig=None, sm_clocks=(300, 585, 585, 1590), mem_clocks=(405, 5001, 5001, 5001),
    ),
    # An A100 80GB with 2 volatile uncorrected ECC errors and a row remap pending a reset.
    "ecc-bad": _board(
        "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "535.129.03", 12020, 400, (4, 4), 35, "132102300",
        ecc_volatile_uncorrected=2, remapped_rows=(0, 1, True, False), pcie_replay=3, mig=[],
    ),
    # V100 on driver 470 (CUDA 11.4): no nvmlDeviceGetMemoryInfo_v2, retired pages only.
    "old-driver": _board(
        "Tesla V100-SXM2-16GB", 16160, (7, 0), "470.57.02", 11040, 300, (3, 3), 36, "032371800",
        mig=None, memory_v2=False,
    ),
}
# fmt: on

# Whole-machine states, not GPUs: selectable alone through GPUCI_FAKE_NVML.
MACHINE_STATES = {
    "no-library": abi.ERROR_LIBRARY_NOT_FOUND,
    "no-driver": abi.ERROR_DRIVER_NOT_LOADED,
    "none": None,  # driver loaded, zero GPUs
}
