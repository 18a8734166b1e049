"""Typed inputs: each command's inputs are its options class's fields, built once at the edge."""

from __future__ import annotations

import inspect
import io
from typing import Any

import pytest

from gpuci.cache.options import RestoreInputs
from gpuci.commands import Command, iter_leaf_commands
from gpuci.commands._dispatch import run_command
from gpuci.errors import ExitCode
from gpuci.inputs import build, inp, options, resolve
from gpuci.runtime import Runtime

TYPED = [(name, cmd) for name, cmd in iter_leaf_commands() if cmd.load_options()]
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


def _required(cmd: Command[Any]) -> tuple[dict[str, str | None], dict[str, Any]]:
    """Flags giving every required input, and the fields they parse to."""
    flags: dict[str, str | None] = {}
    fields: dict[str, Any] = {}
    for spec in cmd.inputs:
        if spec.required:
            flags[spec.name], fields[spec.name.replace("-", "_")] = SAMPLES[spec.kind]
    return flags, fields


def test_the_commands_are_build() -> None:
    assert {name for name, _ in TYPED} >= EXPECTED_TYPED


@pytest.mark.parametrize(("name", "cmd"), TYPED, ids=IDS)
def test_the_fields_defaults_are_the_inputs_defaults(name: str, cmd: Command[Any]) -> None:
    cls = cmd.load_options()
    assert cls is not None
    flags, fields = _required(cmd)
    defaults = build(cls, resolve(cmd.inputs, flags, {}))
    assert defaults == cls(**fields)  # the CLI's defaults and the Python API's are one


@pytest.mark.parametrize(("name", "cmd"), TYPED, ids=IDS)
def test_a_wrong_typed_input_stops_at_the_edge(name: str, cmd: Command[Any]) -> None:
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
def test_the_run_function_takes_the_dataclass(name: str, cmd: Command[Any]) -> None:
    """Typed from the edge on: the command's function is declared to take its dataclass."""
    cls, func = cmd.load_options(), cmd.load()
    assert cls is not None and func is not None
    first = next(iter(inspect.signature(func).parameters.values()))
    assert first.annotation in (cls, cls.__name__), f"{cmd.target} takes {first.annotation}"


def test_a_field_declares_its_input() -> None:
    @options
    class Opts:
        grace: float = inp("How long.", kind="duration", default="6h")
        paths: list[str] = inp("Paths.", kind="lines")
        limit: int | None = inp("Most.", minimum=1)

    grace, paths, limit = (s for s in Opts.__dataclass_fields__.values())  # type: ignore[attr-defined]
    assert Opts() == Opts(grace=21600.0, paths=[], limit=None)  # parsed defaults, empty lists
    assert [s.metadata["input"].name for s in (grace, paths, limit)] == ["grace", "paths", "limit"]
    assert limit.metadata["input"].kind == "int"  # implied by the annotation


def test_a_kind_the_type_cannot_hold_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match=r"Opts\.count is int, its input kind duration"):

        @options
        class Opts:
            count: int = inp("How many.", kind="duration")

    with pytest.raises(TypeError, match="not declared with inp"):

        @options
        class Bare:
            count: int = 0


def test_values_are_parsed_once_into_fields() -> None:
    from gpuci.commands._cache_weights import RESTORE

    flags = {"key": "k", "restore-keys": "a-\nb-", "lookup-only": "yes"}
    inp = build(RestoreInputs, resolve(RESTORE.inputs, flags, {}))
    assert inp.restore_keys == ["a-", "b-"] and inp.lookup_only is True and inp.store == ""


def test_a_size_of_none_stays_none() -> None:
    """``max-bytes none`` means no limit: None is the user's value there, not "not given"."""
    from gpuci.commands._retry_fetch import COMMAND
    from gpuci.fetch._policy import DEFAULT_MAX_BYTES
    from gpuci.fetch.options import FetchInputs

    inp = build(FetchInputs, resolve(COMMAND.inputs, {"url": "u", "max-bytes": "none"}, {}))
    assert inp.max_bytes is None and inp.policy().max_bytes is None
    inp = build(FetchInputs, resolve(COMMAND.inputs, {"url": "u"}, {}))
    assert inp.max_bytes == DEFAULT_MAX_BYTES and inp.url == ["u"] and inp.dest == ""


def test_each_definition_is_typed_with_the_class_it_names() -> None:
    """``RESTORE: Command[RestoreInputs]`` is what mypy carries; ``options`` is what runs."""
    import importlib
    import pkgutil

    import gpuci.commands

    checked = 0
    for info in pkgutil.iter_modules(gpuci.commands.__path__):
        module = importlib.import_module(f"gpuci.commands.{info.name}")
        for var, annotation in getattr(module, "__annotations__", {}).items():
            cmd = getattr(module, var)
            if isinstance(cmd, Command) and cmd.options is not None:
                assert annotation == f"Command[{cmd.options.partition(':')[2]}]", var
                checked += 1
    assert checked == len(TYPED)


def test_python_values_meet_the_same_rules() -> None:
    """The Python APIs build these classes directly; ``checked`` holds them to the inputs."""
    from gpuci.errors import InputError
    from gpuci.gpu.options import SetupInputs, SmokeInputs
    from gpuci.inputs import checked

    assert checked(SmokeInputs(budget_seconds=5)) == SmokeInputs(budget_seconds=5)
    for bad, said in (
        (SmokeInputs(dcgm_level=5), "input 'dcgm-level' (argument) is '5', not one of: 0, 1, 2"),
        (SmokeInputs(budget_seconds=0), "below the minimum 1"),
        (SetupInputs(min_gpus=True), "min-gpus is True, not a number"),
        (SetupInputs(min_gpus="2"), "min-gpus is '2', not a number"),  # type: ignore[arg-type]
        (SmokeInputs(memory_fraction=float("nan")), "expected a finite number"),
    ):
        with pytest.raises(InputError) as caught:
            checked(bad)
        assert said in caught.value.message
