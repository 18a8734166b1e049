"""Typed inputs: each typed command's dataclass matches its Input specs, and is built from them."""

from __future__ import annotations

import inspect
import io
from typing import Any

import pytest

from gpuci.cache.options import RestoreInputs, SaveInputs
from gpuci.commands import Command, iter_leaf_commands
from gpuci.commands.dispatch import run_command
from gpuci.errors import ExitCode
from gpuci.inputs import Input, resolve
from gpuci.runtime import Runtime
from gpuci.typed import check_fields, field_name, typed

TYPED = [(name, cmd) for name, cmd in iter_leaf_commands() if cmd.typed]
IDS = [n for n, _ in TYPED]

# A valid flag for each kind, and the value it parses to.
SAMPLES: dict[str, tuple[str, Any]] = {
    "str": ("x", "x"),
    "bool": ("true", True),
    "int": ("3", 3),
    "float": ("1.5", 1.5),
    "list": ("a", ["a"]),
    "lines": ("a", ["a"]),
    "duration": ("1d", 86400.0),
    "size": ("1KiB", 1024),
}
# A flag each kind refuses, for the edge test.
WRONG = {"bool": "maybe", "int": "three", "float": "lots", "duration": "soon", "size": "big"}

EXPECTED_TYPED = {
    "cache-weights restore",
    "cache-weights save",
    "cache-weights prune",
    "cache-weights ls",
    "cache-weights pin",
    "cache-weights unpin",
    "gate",
    "provenance",
    "report",
    "runners release",
    "gpus report",
    "dry-run",
    "pods up",
    "pods ls",
    "pods stop",
    "pods start",
    "pods down",
    "pods reap",
    "pods cost",
    "pods exec",
    "gpu-setup",
    "gpu-smoke",
    "retry-fetch",
}


def _required(cmd: Command) -> tuple[dict[str, str | None], dict[str, Any]]:
    """Flags giving every required input, and the fields they parse to."""
    flags: dict[str, str | None] = {}
    fields: dict[str, Any] = {}
    for spec in cmd.inputs:
        if spec.required:
            flags[spec.name], fields[field_name(spec.name)] = SAMPLES[spec.kind]
    return flags, fields


def test_the_commands_are_typed() -> None:
    assert {name for name, _ in TYPED} >= EXPECTED_TYPED


@pytest.mark.parametrize(("name", "cmd"), TYPED, ids=IDS)
def test_the_dataclass_matches_the_specs(name: str, cmd: Command) -> None:
    cls = cmd.load_typed()
    assert cls is not None
    assert check_fields(cls, cmd.inputs) == []
    flags, fields = _required(cmd)
    defaults = typed(cls, resolve(cmd.inputs, flags, {}))
    assert defaults == cls(**fields)  # the dataclass's defaults are the specs'


@pytest.mark.parametrize(("name", "cmd"), TYPED, ids=IDS)
def test_a_wrong_typed_input_stops_at_the_edge(name: str, cmd: Command) -> None:
    """Flags are parsed once, before the command runs: a bad value is exit 2 and one line."""
    spec = next((s for s in cmd.inputs if s.kind in WRONG or s.choices), None)
    if spec is None:
        pytest.skip("every input is free text")
    flags, _ = _required(cmd)
    flags[spec.name] = WRONG.get(spec.kind, "none-of-the-choices")
    rt = Runtime(environ={}, json_mode=True, stdout=io.StringIO(), stderr=io.StringIO())
    result = run_command(cmd, name, flags, rt)
    assert result.exit_code == ExitCode.BAD_INPUT
    assert spec.name in result.headline and "\n" not in result.headline


@pytest.mark.parametrize(("name", "cmd"), TYPED, ids=IDS)
def test_the_run_function_takes_the_dataclass(name: str, cmd: Command) -> None:
    """Typed from the edge on: the command's function is declared to take its dataclass."""
    cls, func = cmd.load_typed(), cmd.load()
    assert cls is not None and func is not None
    first = next(iter(inspect.signature(func).parameters.values()))
    assert first.annotation in (cls, cls.__name__), f"{cmd.target} takes {first.annotation}"


def test_a_mismatch_is_reported() -> None:
    specs = (Input("key", "k"), Input("path", "p", "lines"), Input("extra", "x", "bool"))
    problems = check_fields(SaveInputs, specs)
    assert any("extra" in p for p in problems)
    assert any("SaveInputs.store is no input" in p for p in problems)


def test_values_are_parsed_once_into_fields() -> None:
    from gpuci.commands.cache_weights import RESTORE

    flags = {"key": "k", "restore-keys": "a-\nb-", "lookup-only": "yes"}
    inp = typed(RestoreInputs, resolve(RESTORE.inputs, flags, {}))
    assert inp.restore_keys == ["a-", "b-"] and inp.lookup_only is True and inp.store == ""


def test_a_size_of_none_stays_none() -> None:
    """``max-bytes none`` means no limit: None is the user's value there, not "not given"."""
    from gpuci.commands.retry_fetch import COMMAND
    from gpuci.fetch.options import FetchInputs
    from gpuci.fetch.policy import DEFAULT_MAX_BYTES

    inp = typed(FetchInputs, resolve(COMMAND.inputs, {"url": "u", "max-bytes": "none"}, {}))
    assert inp.max_bytes is None and inp.policy().max_bytes is None
    inp = typed(FetchInputs, resolve(COMMAND.inputs, {"url": "u"}, {}))
    assert inp.max_bytes == DEFAULT_MAX_BYTES and inp.url == ["u"] and inp.dest == ""
