"""Typed inputs: a command's resolved values as one frozen dataclass, built once at the edge.

:func:`gpuci.inputs.resolve` turns flags, ``INPUT_*`` and defaults into a dict keyed by input
name; :func:`typed` turns that dict into the command's dataclass (field names are the input
names in snake_case), so the phases below read ``inp.restore_keys``, checked by mypy, instead of
``values["restore-keys"]``. :func:`check_fields` keeps each dataclass and its ``Input`` specs in
step (a test runs it for every typed command). Helpers shared by several commands take the
fields they need (keyword arguments, or a small Protocol such as
:class:`gpuci.cache.options.StoreFields`), never the dict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from gpuci.inputs import Input

__all__ = ["KIND_TYPES", "check_fields", "field_name", "typed"]

T = TypeVar("T")

# The Python type each input kind parses to (``Input.kind`` -> the field's annotation text).
KIND_TYPES = {
    "str": "str",
    "bool": "bool",
    "int": "int",
    "float": "float",
    "list": "list[str]",
    "lines": "list[str]",
    "duration": "float",
    "size": "int",
    "version": "tuple[int, ...]",
    "regex": "re.Pattern[str]",
}


def field_name(input_name: str) -> str:
    """``restore-keys`` -> ``restore_keys``."""
    return input_name.replace("-", "_")


def typed(cls: type[T], values: Mapping[str, Any]) -> T:
    """The dataclass ``cls`` filled from resolved ``values`` (keys: hyphenated input names).

    An input not given and without a default resolves to None; a field then takes its own
    default (``""`` for text, ``[]`` for lists), so phases never test for None. A field that
    admits None (``int | None``) keeps it: there None is a value the user chose (a size of
    ``none``: no limit), since an input with a default never resolves to None otherwise.
    Raises nothing of its own: a wrong-typed input was already an InputError (exit 2) in
    ``resolve``.
    """
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = values.get(field.name.replace("_", "-"))
        if value is not None or (_admits_none(field) and field.name.replace("_", "-") in values):
            kwargs[field.name] = value
    return cls(**kwargs)


def _admits_none(field: dataclasses.Field[Any]) -> bool:
    """Whether the field's annotation (text, under ``from __future__ import annotations``)
    includes None, as ``int | None`` does."""
    return "None" in (part.strip() for part in str(field.type).split("|"))


def check_fields(cls: type, specs: tuple[Input, ...]) -> list[str]:
    """Mismatches between ``cls`` and the specs (missing, extra or wrongly typed fields).

    Raises KeyError for an input kind :data:`KIND_TYPES` does not know.
    """
    problems: list[str] = []
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for spec in specs:
        field = fields.pop(field_name(spec.name), None)
        if field is None:
            problems.append(f"{cls.__name__} lacks a field for input {spec.name}")
            continue
        annotation = str(field.type).replace(" | None", "")
        if annotation != KIND_TYPES[spec.kind]:
            problems.append(
                f"{cls.__name__}.{field.name} is {field.type}, input {spec.name} is "
                f"{KIND_TYPES[spec.kind]}"
            )
    problems += [f"{cls.__name__}.{name} is no input of the command" for name in fields]
    return problems
