"""A provenance record read back: ``provenance.json`` checked as input (someone may have
edited it), and the exact restore commands of the model's cached inputs it records.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gpuci import untrusted_json
from gpuci.cache import layout
from gpuci.errors import InputError

__all__ = ["SCHEMA", "commands_markdown", "load_record", "restore_commands"]

SCHEMA = "gpuci.provenance/v1"


def restore_commands(record: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The commands that restore a recorded model's cached inputs, exact tree by manifest.

    Returns (commands, why some dataset has none). Every value comes from a record someone may
    have edited, so digests are checked and anything with a control character is refused.
    """
    commands: list[str] = []
    skipped: list[str] = []
    datasets = record.get("datasets")
    if not isinstance(datasets, list):
        datasets = []
    for ds in datasets:
        if not isinstance(ds, dict):
            continue
        name = str(ds.get("matched_key") or ds.get("key") or "dataset")
        try:
            digest = layout.manifest_digest(str(ds.get("manifest") or ""))
        except InputError:
            skipped.append(f"{name!r}: no valid manifest digest recorded")
            continue
        paths = ds.get("path") or []
        paths = [paths] if isinstance(paths, str) else [str(p) for p in paths]
        parts = ["python", "-m", "gpuci", "cache-weights", "restore", "--manifest", digest]
        for flag, field_name in (("--store", "store"), ("--endpoint-url", "endpoint_url")):
            if ds.get(field_name):
                parts += [flag, str(ds[field_name])]
        for path in paths:
            parts += ["--path", path]
        line = shlex.join(parts)
        if not paths or any(ord(c) < 32 or c == "\x7f" for c in line):
            skipped.append(f"{name!r}: no usable path or store recorded")
            continue
        commands.append(line)
    return commands, skipped


def commands_markdown(commands: list[str]) -> str:
    """The restore commands as a markdown block for a summary."""
    return "Restore the inputs of this model (exact trees, by manifest):\n\n```sh\n" + (
        "\n".join(commands) + "\n```"
    )


def load_record(path: str) -> dict[str, Any]:
    """A provenance.json written by this tool (or edited since: it is checked as input).

    Raises InputError when it cannot be read or is not a gpu-ci provenance record.
    """
    try:
        raw = untrusted_json.read(Path(path))
    except OSError as exc:
        raise InputError(
            f"cannot read provenance record {path}: {exc.strerror or exc}",
            hint="give the provenance.json the training job wrote (a build artifact)",
        ) from None
    except untrusted_json.Unusable as exc:
        raise InputError(
            f"provenance record {path} is not usable: {exc}",
            hint="give the provenance.json the training job wrote",
        ) from None
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise InputError(
            f"{path} is not a gpu-ci provenance record (schema {SCHEMA})",
            hint="give provenance.json, not the in-toto statement or the predicate",
        )
    return raw
