"""gpu-setup's and gpu-smoke's typed inputs: the dataclasses match the specs, and the CLI's
flags and ``INPUT_*`` are parsed once into their fields (``tests/test_typed.py`` checks every
typed command's fields and defaults; this file checks the GPU commands' own parsing)."""

from __future__ import annotations

from gpuci.commands import command_named
from gpuci.gpu._checks import requirements
from gpuci.gpu._smoke import selected_checks
from gpuci.gpu.options import SetupInputs, SmokeInputs
from gpuci.inputs import build, resolve, specs_of


def test_both_commands_take_their_dataclass() -> None:
    for name, cls in (("gpu-setup", SetupInputs), ("gpu-smoke", SmokeInputs)):
        cmd = command_named(name)
        assert cmd is not None and cmd.load_options() is cls
        assert build(cls, resolve(cmd.inputs, {}, {})) == cls()  # defaults are the specs'


def test_gpu_setup_flags_and_env_are_parsed_once_into_fields() -> None:
    flags = {"min-memory-gb": "79.5", "min-cuda": "12.4", "gpu-name": "H100|H200", "min-gpus": "2"}
    inp = build(
        SetupInputs, resolve(specs_of(SetupInputs), flags, {"INPUT_EXPORT-VISIBLE-DEVICES": "true"})
    )
    assert inp.min_memory_gb == 79.5 and inp.min_cuda == (12, 4) and inp.min_gpus == 2
    assert inp.gpu_name is not None and inp.gpu_name.search("NVIDIA H200")
    assert inp.export_visible_devices is True  # INPUT_* reaches the field too
    assert inp.min_compute_capability is None and inp.report == ""  # not given: not checked
    assert requirements(inp).min_cuda == (12, 4)


def test_gpu_smoke_flags_are_parsed_once_into_fields() -> None:
    flags = {"checks": "health,\ngemm", "dcgm-level": "2", "quarantine-labels": "gpu-large"}
    inp = build(SmokeInputs, resolve(specs_of(SmokeInputs), flags, {}))
    assert inp.checks == ["health", "gemm"] and inp.dcgm_level == 2
    assert inp.quarantine_labels == ["gpu-large"] and inp.on_failure == "fail"
    assert inp.budget_seconds == 30.0 and inp.min_bandwidth_gbs is None
    assert selected_checks(inp) == ["health", "gemm"]


def test_runners_release_hands_the_smoke_every_shared_input() -> None:
    """``runners release`` runs the smoke first with its own copy of the smoke's inputs: each
    one it shares with gpu-smoke reaches the SmokeInputs it builds (a new smoke input that
    release also takes cannot be dropped on the way)."""
    import dataclasses

    from gpuci.quarantine import ReleaseInputs

    shared = {f.name for f in dataclasses.fields(SmokeInputs)} & {
        f.name for f in dataclasses.fields(ReleaseInputs)
    }
    assert {"checks", "budget_seconds", "min_busbw_gbs", "max_throttle_percent"} <= shared
    given = ReleaseInputs(
        name="r",
        checks=["gemm"],
        budget_seconds=12.0,
        memory_fraction=0.5,
        min_bandwidth_gbs=1.0,
        min_gemm_tflops=2.0,
        min_busbw_gbs=3.0,
        max_throttle_percent=4.0,
        framework="cupy",
        dcgm_level=1,
        report="r.json",
    )
    smoke = given.smoke_inputs()
    for name in shared:
        assert getattr(smoke, name) == getattr(given, name), name
