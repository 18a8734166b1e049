"""Typed inputs: each typed command's dataclass matches its Input specs, and is built from them."""

from __future__ import annotations

import pytest

from gpuci.cache.options import RestoreInputs, SaveInputs
from gpuci.commands import iter_leaf_commands
from gpuci.gpu.checks import Requirements
from gpuci.gpu.options import SetupInputs, SmokeInputs
from gpuci.gpu.smoke import selected_checks
from gpuci.inputs import Input, resolve
from gpuci.typed import as_values, check_fields, typed

TYPED = [(name, cmd) for name, cmd in iter_leaf_commands() if cmd.typed]


def test_restore_save_and_the_gpu_commands_are_typed() -> None:
    assert {name for name, _ in TYPED} >= {
        "cache-weights restore",
        "cache-weights save",
        "gpu-setup",
        "gpu-smoke",
    }


@pytest.mark.parametrize(("name", "cmd"), TYPED, ids=[n for n, _ in TYPED])
def test_the_dataclass_matches_the_specs(name: str, cmd) -> None:  # type: ignore[no-untyped-def]
    cls = cmd.load_typed()
    assert check_fields(cls, cmd.inputs) == []
    given = {"key": "k"} if any(i.name == "key" for i in cmd.inputs) else {}
    defaults = typed(cls, resolve(cmd.inputs, given, {}))
    assert defaults == cls(**given)  # the dataclass's defaults are the specs'


def test_a_mismatch_is_reported() -> None:
    specs = (Input("key", "k"), Input("path", "p", "lines"), Input("extra", "x", "bool"))
    problems = check_fields(SaveInputs, specs)
    assert any("extra" in p for p in problems)
    assert any("SaveInputs.store is no input" in p for p in problems)


def test_gpu_setup_values_are_parsed_once_into_fields() -> None:
    from gpuci.commands.gpu_setup import INPUTS

    flags = {"min-memory-gb": "79.5", "min-cuda": "12.4", "gpu-name": "H100|H200", "min-gpus": "2"}
    inp = typed(SetupInputs, resolve(INPUTS, flags, {"INPUT_EXPORT-VISIBLE-DEVICES": "true"}))
    assert inp.min_memory_gb == 79.5 and inp.min_cuda == (12, 4) and inp.min_gpus == 2
    assert inp.gpu_name is not None and inp.gpu_name.search("NVIDIA H200")
    assert inp.export_visible_devices is True  # INPUT_* reaches the field too
    assert inp.min_compute_capability is None and inp.report == ""  # not given: not checked
    assert Requirements.from_inputs(inp).min_cuda == (12, 4)


def test_gpu_smoke_values_are_parsed_once_into_fields() -> None:
    from gpuci.commands.gpu_smoke import INPUTS

    flags = {"checks": "health,\ngemm", "dcgm-level": "2", "quarantine-labels": "gpu-large"}
    inp = typed(SmokeInputs, resolve(INPUTS, flags, {}))
    assert inp.checks == ["health", "gemm"] and inp.dcgm_level == 2
    assert inp.quarantine_labels == ["gpu-large"] and inp.on_failure == "fail"
    assert inp.budget_seconds == 30.0 and inp.min_bandwidth_gbs is None
    assert selected_checks(inp) == ["health", "gemm"]
    assert as_values(inp)["health-store"] is None  # what gpu_health.record reads


def test_values_are_parsed_once_into_fields() -> None:
    from gpuci.commands.cache_weights import RESTORE

    flags = {"key": "k", "restore-keys": "a-\nb-", "lookup-only": "yes"}
    inp = typed(RestoreInputs, resolve(RESTORE.inputs, flags, {}))
    assert inp.restore_keys == ["a-", "b-"] and inp.lookup_only is True and inp.store == ""
    assert as_values(inp)["store"] is None and as_values(inp)["restore-keys"] == ["a-", "b-"]
