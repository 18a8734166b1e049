"""The GPUs :class:`~gpuci.gpu.fake.nvml.FakeNvml` can be: recorded profiles as plain data.

Values as real GPUs report them (``nvidia-smi -q`` on those boards and NVIDIA's spec sheets);
the fake's behaviour lives in :mod:`gpuci.gpu.fake.nvml` and :mod:`gpuci.gpu.fake._devices`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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

PROFILES: dict[str, Profile] = {
    # nvidia-smi on an H200 SXM: 143771 MiB FB (141 GB HBM3e), 700 W, PCIe Gen5 x16.
    "h200": Profile(
        name="NVIDIA H200",
        memory_mib=143771,
        reserved_mib=579,
        cc=(9, 0),
        arch=9,
        driver="550.90.07",
        cuda=12040,
        power_limit_mw=700000,
        pcie_gen=(5, 5),
        temperature_c=31,
        remapped_rows=NO_REMAPS,
        mig=[],
        nvlinks=18,
        mem_clocks=(3201, 3201, 3201, 3201),
        serial_prefix="165242100",
    ),
    # H100 SXM5 80GB: 81559 MiB FB, 700 W, driver 535 / CUDA 12.2.
    "h100-sxm": Profile(
        name="NVIDIA H100 80GB HBM3",
        memory_mib=81559,
        reserved_mib=551,
        cc=(9, 0),
        arch=9,
        driver="535.129.03",
        cuda=12020,
        power_limit_mw=700000,
        pcie_gen=(5, 5),
        temperature_c=29,
        remapped_rows=NO_REMAPS,
        mig=[],
        nvlinks=18,
        serial_prefix="165232100",
    ),
    # A100 SXM4 40GB in MIG mode with two 3g.20gb GPU instances (19968 MiB each).
    "a100-mig": Profile(
        name="NVIDIA A100-SXM4-40GB",
        memory_mib=40960,
        cc=(8, 0),
        arch=7,
        driver="525.85.12",
        cuda=12000,
        power_limit_mw=400000,
        pcie_gen=(4, 4),
        temperature_c=27,
        remapped_rows=NO_REMAPS,
        mig=[MigProfile("3g.20gb", 19968, 1), MigProfile("3g.20gb", 19968, 2)],
        serial_prefix="132102200",
    ),
    # L4: 23034 MiB GDDR6, 72 W, PCIe Gen4 x16, Ada (cc 8.9).
    "l4": Profile(
        name="NVIDIA L4",
        memory_mib=23034,
        reserved_mib=428,
        cc=(8, 9),
        arch=8,
        driver="535.104.05",
        cuda=12020,
        power_limit_mw=72000,
        pcie_gen=(4, 4),
        temperature_c=38,
        remapped_rows=NO_REMAPS,
        mig=None,
        serial_prefix="132432300",
    ),
    # T4: 15360 MiB GDDR6, 70 W, PCIe Gen3 x16, Turing (cc 7.5): retired pages, no remapping.
    "t4": Profile(
        name="Tesla T4",
        memory_mib=15360,
        cc=(7, 5),
        arch=6,
        driver="535.104.05",
        cuda=12020,
        power_limit_mw=70000,
        pcie_gen=(1, 3),  # idles at Gen1 to save power, as nvidia-smi shows
        temperature_c=41,
        retired_pages_pending=False,
        mig=None,
        # T4's default applications clock is 585 MHz (boost to 1590 is automatic): not lowered
        sm_clocks=(300, 585, 585, 1590),
        mem_clocks=(405, 5001, 5001, 5001),
        serial_prefix="132352000",
    ),
    # An A100 80GB with 2 volatile uncorrected ECC errors and a row remap pending a reset.
    "ecc-bad": Profile(
        name="NVIDIA A100-SXM4-80GB",
        memory_mib=81920,
        cc=(8, 0),
        arch=7,
        driver="535.129.03",
        cuda=12020,
        power_limit_mw=400000,
        pcie_gen=(4, 4),
        temperature_c=35,
        ecc_volatile_uncorrected=2,
        remapped_rows=(0, 1, True, False),
        pcie_replay=3,
        mig=[],
        serial_prefix="132102300",
    ),
    # V100 on driver 470 (CUDA 11.4): no nvmlDeviceGetMemoryInfo_v2, retired pages only.
    "old-driver": Profile(
        name="Tesla V100-SXM2-16GB",
        memory_mib=16160,
        cc=(7, 0),
        arch=5,
        driver="470.57.02",
        cuda=11040,
        power_limit_mw=300000,
        pcie_gen=(3, 3),
        temperature_c=36,
        retired_pages_pending=False,
        mig=None,
        memory_v2=False,
        serial_prefix="032371800",
    ),
}

# Whole-machine states, not GPUs: selectable alone through GPUCI_FAKE_NVML.
MACHINE_STATES = {
    "no-library": abi.ERROR_LIBRARY_NOT_FOUND,
    "no-driver": abi.ERROR_DRIVER_NOT_LOADED,
    "none": None,  # driver loaded, zero GPUs
}
