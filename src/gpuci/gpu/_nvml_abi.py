"""NVML's ABI as data: return codes, constants and clock-event bits from ``nvml.h``.

One floor below both :mod:`gpuci.gpu._nvml` (the session) and :mod:`gpuci.gpu.fake.nvml` (the
fake), so neither imports the other for a constant. Stable across drivers, so the fake speaks
them without pynvml.
"""

from __future__ import annotations

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
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_NO_DATA = 21
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_DEPRECATED = 26
ERROR_UNKNOWN = 999
NO_INSTANCE = 0xFFFFFFFF  # an event's gpuInstanceId when it is not from one MIG instance
MEMORY_ERROR_TYPE_UNCORRECTED = 1
VOLATILE_ECC = 0
TEMPERATURE_GPU = 0
FEATURE_ENABLED = 1
MEMORY_V2 = 0x02000028  # nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24
EVENT_XID_CRITICAL_ERROR = 0x8
# How many MIG slots one GPU is asked for at most: 7 on every MIG GPU so far; a driver that
# answers 4 billion (garbage) would otherwise be asked 4 billion times.
MIG_MAX_SLOTS = 64
# How many GPUs NVML may count: no machine has more; past it the count is garbage, not GPUs.
MAX_DEVICES = 1024
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS (Hopper: 18 links per GPU)
CLOCK_SM = 1  # NVML_CLOCK_SM
CLOCK_MEM = 2  # NVML_CLOCK_MEM
# nvmlDeviceGetViolationStatus policies (NVML_PERF_POLICY_*): cumulative ns clocks were held
# below what was asked, since the driver loaded.
VIOLATION_POLICIES = {
    0: "power",
    1: "thermal",
    2: "sync_boost",
    3: "board_limit",
    4: "low_util",
    5: "reliability",
}
# Field values (NVML_FI_DEV_CLOCKS_EVENT_REASON_*, R535+): cumulative ns per slowdown reason.
CLOCK_EVENT_FIELDS = {
    269: "sw_thermal_slowdown",
    270: "hw_thermal_slowdown",
    271: "hw_power_brake_slowdown",
}
# The cumulative counters that mean the hardware protected itself (judged); the rest (power
# cap, sync boost, board limit, low utilisation, reliability voltage) are policy: reported.
HARMFUL_THROTTLE = frozenset(
    {"thermal", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)
# nvmlDeviceGetNvLinkErrorCounter counters (NVML_NVLINK_ERROR_DL_*).
NVLINK_ERRORS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
CPU_AFFINITY_WORDS = 16  # 64-bit words of CPU mask asked of nvmlDeviceGetCpuAffinity: 1024 CPUs

# Codes that mean "this GPU/driver does not report that": the field is unsupported, not broken.
# ERROR_INVALID_ARGUMENT is deliberately absent: it means the call was wrong, which we want to see.
UNSUPPORTED_CODES = frozenset(
    {
        ERROR_NOT_SUPPORTED,
        ERROR_NO_PERMISSION,
        ERROR_NOT_FOUND,
        ERROR_FUNCTION_NOT_FOUND,
        ERROR_NO_DATA,
        ERROR_ARGUMENT_VERSION_MISMATCH,
        ERROR_DEPRECATED,
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
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetViolationStatus",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetApplicationsClock",
    "nvmlDeviceGetDefaultApplicationsClock",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetPowerManagementDefaultLimit",
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
