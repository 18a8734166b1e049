"""CUDA_VISIBLE_DEVICES: gpu-setup and gpu-smoke judge, count and export only the job's GPUs.

A 4-GPU host whose GPU 0 has uncorrected ECC errors: a job given GPUs 2 and 3 must pass, count
2, and export 2. Unopenable GPUs (NVML NoPermission under a device cgroup) are skipped and listed.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpuci.gpu._nvml import open_nvml
from gpuci.gpu._visible import resolve
from gpuci.gpu.fake.nvml import FakeNvml
from gpuci.gpu.options import SmokeInputs
from gpuci.inputs import build
from gpuci.runtime import Result, Runtime

HOST = ["ecc-bad", "h100-sxm", "h100-sxm", "h100-sxm"]  # GPU 0 is another tenant's, and sick


def uuids(fake: FakeNvml, *indices: int) -> str:
    return ",".join(fake.devices[i].uuid for i in indices)


@pytest.mark.parametrize("by", ["index", "uuid", "abbreviated-uuid"])
def test_only_the_visible_gpus_are_judged_counted_and_exported(setup_run, by: str) -> None:
    fake = FakeNvml(HOST)
    visible = {
        "index": "2,3",
        "uuid": uuids(fake, 2, 3),
        "abbreviated-uuid": ",".join(fake.devices[i].uuid[:12] for i in (2, 3)),
    }[by]
    result = setup_run(fake, visible=visible, export_visible_devices="true")
    assert result.exit_code == 0, result.headline  # GPU 0's ECC errors are not this job's
    assert result.outputs["gpu-count"] == 2
    assert result.outputs["visible-devices"] == uuids(fake, 2, 3)
    assert result.env["CUDA_VISIBLE_DEVICES"] == uuids(fake, 2, 3)
    assert result.report["visibility"]["hidden_nvml_indices"] == [0, 1]
    assert (
        "not judged"
        in next(c for c in result.report["checks"] if c["check"] == "require-gpu")["reason"]
    )


def test_order_is_cudas_and_the_list_stops_at_the_first_invalid_entry(setup_run) -> None:
    fake = FakeNvml(HOST)
    result = setup_run(fake, visible="3,1,7,2")  # 7 names no device: CUDA ignores 7 and 2
    assert result.outputs["visible-devices"] == uuids(fake, 3, 1)
    assert result.report["visibility"]["ignored_from"] == "7"
    assert any("ignores '7'" in a.message for a in result.annotations)


@pytest.mark.parametrize("visible", ["", "-1", "NoDevFiles", "GPU-", "0,0"])
def test_nothing_or_an_invalid_first_entry_hides_every_gpu(setup_run, visible: str) -> None:
    fake = FakeNvml(["h100-sxm"] * 4)
    result = setup_run(fake, visible=visible, export_visible_devices="true")
    if visible == "0,0":  # a repeat ends the list at the repeat: device 0 only
        assert result.outputs["gpu-count"] == 1
        return
    assert result.exit_code == 1
    assert result.outputs["gpu-count"] == 0 and result.outputs["visible-devices"] == ""
    assert "CUDA_VISIBLE_DEVICES" not in result.env  # never widened to the host's GPUs
    assert "hides all 4 GPU(s)" in result.headline


@pytest.mark.parametrize(
    ("visible", "why"),
    [
        ("0,0", "(a duplicate: it names a device an earlier entry already named)"),
        ("1,2,1", "(a duplicate: it names a device an earlier entry already named)"),
        ("0,9", "(it names no device here)"),
    ],
)
def test_the_warning_says_why_the_list_stops(setup_run, visible: str, why: str) -> None:
    """'0,0' stops at a repeat of a device that exists: the warning must not say it names none."""
    result = setup_run(FakeNvml(["h100-sxm"] * 4), visible=visible)
    (warned,) = [a.message for a in result.annotations if "CUDA ignores" in a.message]
    assert warned.endswith(f"and every entry after it {why}"), warned


def test_a_mig_uuid_selects_that_slice_only(setup_run) -> None:
    fake = FakeNvml(["a100-mig", "h100-sxm"])
    second = fake.devices[0].migs[1].uuid
    result = setup_run(fake, visible=second, export_visible_devices="true")
    assert result.exit_code == 0, result.headline
    assert result.outputs["visible-devices"] == second
    assert result.env["CUDA_VISIBLE_DEVICES"] == second
    assert result.outputs["gpu-count"] == 1


def test_the_r450_mig_form_names_a_gpu_instance() -> None:
    fake = FakeNvml(["a100-mig"])
    with open_nvml({}, fake) as session:
        gpus = session.snapshot().gpus
    vis = resolve(f"MIG-{fake.devices[0].uuid}/2/0", "", gpus)
    assert vis.selected == (0,) and vis.mig == {0: (fake.devices[0].migs[1].uuid,)}


def test_an_ambiguous_uuid_prefix_ends_the_list() -> None:
    fake = FakeNvml(["h100-sxm"] * 2)
    with open_nvml({}, fake) as session:
        gpus = session.snapshot().gpus
    assert resolve("GPU-", "", gpus).selected == ()
    vis = resolve("1,GPU", "", gpus)  # a bare word is not a device
    assert vis.selected == (1,) and vis.stopped_at == "GPU"


def test_indices_on_mixed_models_without_pci_bus_id_order_warn() -> None:
    fake = FakeNvml(["t4", "l4"])
    with open_nvml({}, fake) as session:
        gpus = session.snapshot().gpus
    assert resolve("1", "", gpus).notes  # FASTEST_FIRST on mixed models: said, not guessed
    assert not resolve("1", "PCI_BUS_ID", gpus).notes


# ----- item 2: a GPU this process may not open ---------------------------------------------
def test_a_no_permission_gpu_is_skipped_and_listed_not_exit_3(setup_run) -> None:
    fake = FakeNvml.from_spec("h100-sxm,h100-sxm:open=4,h100-sxm")
    result = setup_run(fake)
    assert result.exit_code == 0, result.headline
    assert result.outputs["gpu-count"] == 2
    assert result.report["nvml"]["skipped"][0]["index"] == 1
    assert any(
        "GPU 1 could not be opened" in a.message and "Insufficient Permissions" in a.message
        for a in result.annotations
    )


def test_cuda_ordinals_count_only_the_gpus_that_open(setup_run) -> None:
    # Slurm's ConstrainDevices: CUDA sees the two allowed GPUs as 0 and 1.
    fake = FakeNvml.from_spec("h100-sxm:open=4,h100-sxm,h100-sxm:open=4,h100-sxm")
    result = setup_run(fake, visible="0,1")
    assert result.outputs["visible-devices"] == uuids(fake, 1, 3)


def test_every_gpu_unopenable_fails_require_gpu_with_the_reason(setup_run) -> None:
    fake = FakeNvml.from_spec("h100-sxm:open=4")
    result = setup_run(fake)
    assert result.exit_code == 1
    assert "may open none" in result.headline


# ----- gpu-smoke's health-only mode --------------------------------------------------------
def smoke(fake: FakeNvml, visible: str | None, tmp: Path) -> Result:
    from gpuci.gpu._smoke import smoke as run_smoke

    values = {"memory-fraction": 0.5, "framework": "none", "report": str(tmp / "smoke.json")}
    environ = {"GPUCI_JOURNAL": str(tmp / "journal.jsonl")}
    if visible is not None:
        environ["CUDA_VISIBLE_DEVICES"] = visible
    rt = Runtime(environ=environ, stdout=io.StringIO())
    return run_smoke(build(SmokeInputs, values), rt, nvml=fake)


def test_smoke_health_only_watches_only_the_visible_gpus(tmp_path: Path) -> None:
    fake = FakeNvml.from_spec("h100-sxm:ecc+=3,h100-sxm,h100-sxm:xid=79,h100-sxm")
    result = smoke(fake, "1,3", tmp_path)
    assert result.exit_code == 0, result.headline
    labels = [c["gpu"] for c in result.report["checks"] if c["name"] == "health"]
    assert labels == [1, 3]
    assert [g["index"] for g in result.report["gpus"]] == [1, 3]


def test_smoke_with_no_visible_gpu_is_a_config_error_with_a_report(tmp_path: Path) -> None:
    result = smoke(FakeNvml(["h100-sxm"] * 2), "NoDevFiles", tmp_path)
    assert result.exit_code == 2
    assert "hides all 2 GPU(s)" in result.headline
    assert result.outputs["passed"] is False


def test_smoke_skips_a_no_permission_gpu(tmp_path: Path) -> None:
    result = smoke(FakeNvml.from_spec("h100-sxm:open=4,h100-sxm"), None, tmp_path)
    assert result.exit_code == 0, result.headline
    assert [g["index"] for g in result.report["gpus"]] == [1]
    assert any("GPU 0 could not be opened" in n for n in result.report["notes"])


# ----- modes: ECC off or changing, persistence off -----------------------------------------
def test_ecc_off_pending_and_persistence_off_are_reported_not_failed(setup_run) -> None:
    fake = FakeNvml(["h100-sxm", "h100-sxm"])
    fake.set(0, ecc_enabled=False)
    fake.set(1, ecc_pending=False, persistence=False)
    result = setup_run(fake)
    assert result.exit_code == 0, result.headline
    text = [a.message for a in result.annotations if a.title == "gpu-setup: modes"]
    assert any(t.startswith("GPU 0: ECC is off") for t in text), text
    assert any("GPU 1: an ECC mode change (to off) is pending" in t for t in text), text
    assert any("GPU 1: persistence mode is off" in t for t in text), text
    gpus = result.report["nvml"]["gpus"]
    assert gpus[1]["persistence_mode"] is False and gpus[1]["health"]["ecc_pending"] is False


def test_a_power_limit_below_the_default_is_reported(setup_run) -> None:
    fake = FakeNvml(["h100-sxm"])
    fake.set(0, power_limit_mw=450000, power_default_mw=700000)
    result = setup_run(fake)
    assert result.exit_code == 0
    assert any(
        "power limit lowered to 450 W of the default 700 W" in a.message for a in result.annotations
    )


def test_applications_clocks_below_the_default_are_reported(setup_run) -> None:
    result = setup_run(FakeNvml.from_spec("h200:appclock=1200"))
    assert result.exit_code == 0
    text = [a.message for a in result.annotations]
    assert any(
        "SM applications clock set to 1200 MHz, below the default 1980 MHz (max 1980)" in t
        for t in text
    ), text
    gpu = result.report["nvml"]["gpus"][0]
    assert ["sm", 1410, 1200, 1980, 1980] in [list(row) for row in gpu["clocks_mhz"]]


def test_a_t4_at_its_default_applications_clock_is_not_reported(setup_run) -> None:
    # T4: 585 MHz default applications clock, 1590 max (autoboost): stock, not lowered.
    result = setup_run(FakeNvml(["t4"]))
    assert not any("applications clock" in a.message for a in result.annotations)


# CUDA reads ordinals in ASCII: a Unicode digit names no device (str.isdigit() said it did: a
# fullwidth one selected GPU 1; '²' and a 5000-digit number raised in int(): an internal error).
ODD_ORDINALS = ["²", "\uff11", "\u0663", "9" * 5000, "1" * 10]


@pytest.mark.parametrize("odd", ODD_ORDINALS)
def test_a_unicode_digit_or_an_overlong_ordinal_ends_the_list(setup_run, odd: str) -> None:
    fake = FakeNvml(["h100-sxm"] * 4)
    result = setup_run(fake, visible=odd, export_visible_devices="true")
    assert result.exit_code == 1, result.headline  # one line about the job's GPUs, no error
    assert result.outputs["gpu-count"] == 0 and result.outputs["visible-devices"] == ""
    assert "CUDA_VISIBLE_DEVICES" not in result.env  # never a GPU CUDA would not see
    with open_nvml({}, fake) as session:
        gpus = session.snapshot().gpus
    vis = resolve(f"2,{odd},3", "", gpus)
    assert vis.selected == (2,) and vis.stopped_at == odd


@pytest.mark.parametrize("gi", ["\uff12", "9" * 5000])
def test_the_r450_mig_form_takes_ascii_instance_numbers_only(gi: str) -> None:
    fake = FakeNvml(["a100-mig"])
    with open_nvml({}, fake) as session:
        gpus = session.snapshot().gpus
    vis = resolve(f"MIG-{fake.devices[0].uuid}/{gi}/0", "", gpus)
    assert vis.selected == () and vis.mig == {}
