"""The NVML session against the fake: fields, unsupported values, health drift, XID events."""

from __future__ import annotations

import threading
from operator import attrgetter

import pynvml
import pytest

from gpuci.errors import NvmlUnavailable
from gpuci.gpu import _gpu_info as gpu_info
from gpuci.gpu import _nvml_abi as abi
from gpuci.gpu._nvml import NvmlSession, cpu_list, open_nvml, pci_address
from gpuci.gpu.fake.nvml import FakeNvml

GiB = 1024**3


def snap(*profiles: str) -> gpu_info.Snapshot:
    with open_nvml({}, FakeNvml(list(profiles))) as session:
        return session.snapshot()


def test_seam_names_exist_in_pynvml_and_the_fake() -> None:
    """The fake must stay a drop-in for pynvml: same names for everything the session calls."""
    missing_real = [name for name in abi.SEAM if not hasattr(pynvml, name)]
    missing_fake = [name for name in abi.SEAM if not hasattr(FakeNvml, name)]
    assert missing_real == [] and missing_fake == []


def test_constants_match_pynvml() -> None:
    assert abi.ERROR_DRIVER_NOT_LOADED == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert abi.ERROR_LIBRARY_NOT_FOUND == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert abi.ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert abi.ERROR_GPU_IS_LOST == pynvml.NVML_ERROR_GPU_IS_LOST
    assert pynvml.nvmlMemory_v2 == abi.MEMORY_V2
    assert pynvml.nvmlEventTypeXidCriticalError == abi.EVENT_XID_CRITICAL_ERROR
    assert abi.MEMORY_ERROR_TYPE_UNCORRECTED == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert pynvml.nvmlClocksEventReasonHwSlowdown == 0x8


def test_h200_snapshot_fields() -> None:
    s = snap("h200")
    assert (s.driver_version, s.cuda_version, s.source) == ("550.90.07", (12, 4), "fake:h200")
    (g,) = s.gpus
    assert g.name == "NVIDIA H200" and g.uuid.startswith("GPU-") and g.index == 0
    assert g.memory_total == 143771 * 1024 * 1024 and 140 < g.memory_total / GiB < 141
    assert g.memory_free is not None and g.memory_free < g.memory_total
    assert g.compute_capability == (9, 0) and g.architecture == "Hopper"
    assert g.mig_enabled is False and g.mig_devices == ()
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current) == (5, 5, 16)
    assert g.power_limit_w == 700
    h = g.health
    assert h.ecc_enabled is True and h.ecc_volatile_uncorrected == 0
    assert h.retired_pages_pending is None  # Hopper retired pages -> row remapping
    assert h.remapped_rows_pending is False and h.remapped_rows_failure is False
    assert h.pcie_replay_counter == 0 and h.clock_events == ("gpu_idle",)
    assert h.temperature_c == 31 and g.processes == () and g.notes == ()
    assert g.to_dict()["compute_capability"] == "9.0"


def test_mig_devices_are_listed_with_uuids_and_memory() -> None:
    (g,) = snap("a100-mig").gpus
    assert g.mig_enabled is True and len(g.mig_devices) == 2
    assert all(m.uuid.startswith("MIG-") for m in g.mig_devices)
    assert len({m.uuid for m in g.mig_devices}) == 2
    assert [m.gpu_instance_id for m in g.mig_devices] == [1, 2]
    assert all(m.memory_total == 19968 * 1024 * 1024 for m in g.mig_devices)
    assert g.mig_devices[0].name == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"


def test_unsupported_fields_are_none_not_errors() -> None:
    (t4,) = snap("t4").gpus
    assert t4.health.pcie_replay_counter == 0  # NVML has it from Kepler on: T4s report it
    assert t4.health.remapped_rows_pending is None  # Turing has no row remapping
    assert t4.health.retired_pages_pending is False
    assert t4.mig_enabled is None and t4.notes == ()
    (l4,) = snap("l4").gpus
    assert l4.compute_capability == (8, 9) and l4.architecture == "Ada"


def test_old_driver_falls_back_to_memory_info_v1() -> None:
    s = snap("old-driver")
    assert s.cuda_version == (11, 4) and s.driver_version == "470.57.02"
    assert s.gpus[0].memory_total == 16160 * 1024 * 1024


@pytest.mark.parametrize(
    ("call", "code", "note", "unread"),
    [
        ("PcieReplayCounter", abi.ERROR_UNKNOWN, "Unknown Error", "health.pcie_replay_counter"),
        ("PowerManagementLimit", abi.ERROR_INVALID_ARGUMENT, "Invalid Argument", "power_limit_w"),
    ],
)
def test_unexpected_errors_on_optional_fields_become_notes(call, code, note, unread) -> None:
    """INVALID_ARGUMENT too is a note, not unsupported: it means the call was wrong, and hiding
    it as "unsupported" would hide our bug."""
    fake = FakeNvml(["l4"])

    def broken(handle: object) -> int:
        raise fake.NVMLError(code)

    setattr(fake, f"nvmlDeviceGet{call}", broken)
    with open_nvml({}, fake) as session:
        (g,) = session.snapshot().gpus
    assert attrgetter(unread)(g) is None
    assert g.notes == (f"nvmlDeviceGet{call}: {note}",)


def test_pci_bus_id_cpu_affinity_and_numa_node() -> None:
    fake = FakeNvml(["h100-sxm"] * 6)
    with open_nvml({}, fake) as session:
        gpus = session.snapshot().gpus
        assert session.cpu_affinity(0) == (0, 1) and session.cpu_affinity(5) == (2, 3)
    assert gpus[0].pci_bus_id == "00000000:18:00.0" and gpus[5].pci_bus_id == "00000000:AB:00.0"
    assert (gpus[0].numa_node, gpus[5].numa_node) == (0, 1)
    assert pci_address("00000000:AB:00.0") == pci_address("0000:ab:00.0") == (0, 0xAB, 0)
    assert pci_address("garbage") is None and pci_address(None) is None
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_event_set_failure_leaves_xids_unwatched_not_fatal() -> None:
    fake = FakeNvml.from_spec("h200:events=fail,h200")
    with open_nvml({}, fake) as session, session.watch_xid() as watch:
        assert watch.watched == [] and watch.unsupported == [0, 1]
        assert watch.error == "nvmlEventSetCreate failed: Unknown Error"
        assert watch.wait(0) is None


def test_gpu_lost_is_an_infra_error() -> None:
    fake = FakeNvml(["h100-sxm", "h100-sxm"])

    def lost(handle: object) -> int:
        raise fake.NVMLError(abi.ERROR_GPU_IS_LOST)

    fake.nvmlDeviceGetTemperature = lambda handle, sensor: lost(handle)  # type: ignore[method-assign]
    session = open_nvml({}, fake)
    with pytest.raises(NvmlUnavailable, match="GPU 0 has fallen off the bus"):
        session.snapshot()
    session.close()


@pytest.mark.parametrize(
    ("state", "message"),
    [("no-driver", "NVML driver not loaded"), ("no-library", "NVML library not found")],
)
def test_machine_states_via_env(state: str, message: str) -> None:
    with pytest.raises(NvmlUnavailable) as info:
        open_nvml({"GPUCI_FAKE_NVML": state})
    assert info.value.message.startswith(message)
    assert info.value.hint and "require-gpu: false" in info.value.hint
    assert "\n" not in info.value.one_line()


def test_fake_profiles_from_the_environment_through_the_cli(cli, cli_json) -> None:
    """GPUCI_FAKE_NVML as docs/gpu-setup.md tells a user to set it, through ``gpu-setup``: a
    list (spaces allowed) gives those GPUs in order; "none" a machine without one; an unknown
    profile or modifier is bad input, one line naming it and the fix."""
    ready = cli_json(cli("--json", fake="l4, t4"))
    assert ready["exit_code"] == 0, ready["headline"]
    assert ready["outputs"]["gpu-names"] == "NVIDIA L4,Tesla T4"
    assert ready["outputs"]["gpu-count"] == "2"
    empty = cli_json(cli("--json", fake="none"))
    assert empty["exit_code"] == 1 and "require-gpu (no GPU found)" in empty["headline"]
    for fake, says in (
        ("b200", "unknown fake NVML profile 'b200' (fix: use one of: h200,"),
        ("h200:boom", "GPUCI_FAKE_NVML modifier 'boom' is not understood (fix: use xid=N"),
    ):
        bad = cli(fake=fake)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert bad.stdout.count("\n") == 1 and says in bad.stdout, bad.stdout
        assert "Traceback" not in bad.stdout + bad.stderr


def test_session_shuts_nvml_down() -> None:
    fake = FakeNvml(["t4"])
    with open_nvml({}, fake):
        assert fake.initialised == 1
    assert fake.initialised == 0


def test_counters_change_between_two_reads_in_process() -> None:
    fake = FakeNvml(["h100-sxm"])
    with open_nvml({}, fake) as session:
        before = session.health(0)
        fake.set(0, pcie_replay=12, remapped_rows=(0, 1, True, False), clock_events=0x48)
        after = session.health(0)
    assert before.increased(after) == {
        "remapped_rows_uncorrectable": (0, 1),
        "pcie_replay_counter": (0, 12),
        "remapped_rows_pending": (0, 1),
    }
    assert after.clock_events == ("hw_slowdown", "hw_thermal_slowdown")
    assert after.clock_events and set(after.clock_events) <= abi.HARMFUL_CLOCK_EVENTS


def test_counter_drift_across_processes_via_env_modifiers() -> None:
    env = {"GPUCI_FAKE_NVML": "h200:ecc+=2:replay+=40:clocks=0x8,h200"}
    with open_nvml(env) as session:
        first = session.health(0)
        second = session.health(0)
        other = session.health(1), session.health(1)
    assert first.increased(second) == {
        "ecc_volatile_uncorrected": (0, 2),
        "pcie_replay_counter": (0, 40),
    }
    assert second.clock_events == ("hw_slowdown",)
    assert other[0].increased(other[1]) == {}


def test_xid_event_wait_returns_injected_event_and_times_out_quietly() -> None:
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    with open_nvml({}, fake) as session, session.watch_xid() as watch:
        assert watch.watched == [0, 1] and watch.unsupported == []
        assert watch.wait(0.01) is None
        timer = threading.Timer(0.05, fake.inject_xid, args=(1, 79))
        timer.start()
        event = watch.wait(60)  # returns once the timer has injected it
        timer.join()
    assert event is not None and (event.gpu_index, event.xid) == (1, 79)
    assert event.uuid == fake.devices[1].uuid


def test_xid_from_env_and_unsupported_devices() -> None:
    fake = FakeNvml.from_spec("l4:xid=48,t4")
    fake.set(1, xid_supported=False)
    with NvmlSession(fake).open() as session, session.watch_xid() as watch:
        assert (watch.watched, watch.unsupported) == ([0], [1])
        event = watch.wait(1)
        assert event is not None and (event.gpu_index, event.xid) == (0, 48)
        assert watch.wait(0) is None


def test_the_board_serial_is_read_and_consumer_boards_have_none() -> None:
    """nvmlDeviceGetSerial: the label's serial on datacenter boards; NotSupported on GeForce."""
    fake = FakeNvml(["h200", "t4"])
    fake.set(1, serial_prefix=None)  # a board that answers NotSupported, as GeForce does
    with NvmlSession(fake).open() as session:
        snap = session.snapshot()
    assert snap.gpus[0].serial == "1652421000000"
    assert snap.gpus[1].serial is None and snap.gpus[1].notes == ()
    assert snap.to_dict()["gpus"][0]["serial"] == "1652421000000"


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (b"1321021038295\x00junk", "1321021038295"),  # older bindings: a C string
        (" 1321021038295 ", "1321021038295"),
        ("N/A\n::error::x", None),  # not a plain token: never printed or recorded
        ("", None),
        ("9" * 65, None),
        (None, None),
    ],
)
def test_a_serial_is_a_plain_token_or_none(raw, want) -> None:
    from gpuci.gpu._nvml import _serial

    assert _serial(raw) == want


class _GarbageCounts(FakeNvml):
    """A driver answering 2**32 - 1 for a count; each call past a sane loop's is refused so
    a test of the old code fails instead of looping 4 billion times."""

    calls = 0

    def _counted(self) -> None:
        type(self).calls += 1
        if type(self).calls > 1000:
            raise AssertionError("asked NVML past any real count")

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        super().nvmlDeviceGetMaxMigDeviceCount(handle)
        return 2**32 - 1

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        self._counted()
        return super().nvmlDeviceGetMigDeviceHandleByIndex(handle, index)


def test_a_garbage_mig_slot_count_asks_a_bounded_number_of_slots() -> None:
    _GarbageCounts.calls = 0
    with open_nvml({}, _GarbageCounts(["a100-mig"])) as session:
        (g,) = session.snapshot().gpus
    assert len(g.mig_devices) == 2 and _GarbageCounts.calls <= abi.MIG_MAX_SLOTS


def test_a_garbage_gpu_count_is_one_clear_error() -> None:
    class _Counted(_GarbageCounts):
        def nvmlDeviceGetCount(self):
            return 2**32 - 1

        def nvmlDeviceGetHandleByIndex(self, index):
            self._counted()
            return super().nvmlDeviceGetHandleByIndex(index)

    _GarbageCounts.calls = 0
    with pytest.raises(NvmlUnavailable, match="NVML counts 4294967295 GPUs"):
        open_nvml({}, _Counted(["h100-sxm"]))


class _Garbled(FakeNvml):
    """pynvml decodes NVML's strings as UTF-8, strictly: a garbled InfoROM's bytes raise."""

    garbled = ("nvmlDeviceGetSerial",)

    def __getattribute__(self, name: str):
        if name in type(self).garbled:

            def undecodable(*_args):
                return b"\xff\xfe serial".decode()

            return undecodable
        return super().__getattribute__(name)


def test_a_field_that_is_not_utf8_is_unreadable_and_noted() -> None:
    """Before: UnicodeDecodeError out of the snapshot, an internal error of gpu-setup."""
    with open_nvml({}, _Garbled(["h100-sxm"])) as session:
        (g,) = session.snapshot().gpus
    assert g.serial is None
    assert any("nvmlDeviceGetSerial answered bytes that are not UTF-8" in n for n in g.notes)


def test_a_name_that_is_not_utf8_is_one_clear_error() -> None:
    class _GarbledName(_Garbled):
        garbled = ("nvmlDeviceGetName",)

    session = open_nvml({}, _GarbledName(["h100-sxm"]))
    with pytest.raises(NvmlUnavailable, match="nvmlDeviceGetName answered bytes that are not"):
        session.snapshot()
    session.close()
