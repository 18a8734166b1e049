"""A per-job journal: what each gpu-ci step did, for provenance and reports later in the job.

Steps of one job run as separate processes; this file is how ``provenance`` learns which cache
manifests were restored and which GPU was used. One JSON object per line, appended atomically
(a single ``write`` of a line under ``O_APPEND``), so parallel steps never interleave records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuci import files, settings, untrusted_json
from gpuci.errors import JournalError


def journal_path(environ: Mapping[str, str] | None = None) -> Path:
    if settings.JOURNAL.is_set(environ):
        return Path(settings.JOURNAL.value(environ))
    base = settings.RUNNER_TEMP.value(environ) or os.path.join(os.getcwd(), ".gpuci")
    return Path(base) / "gpuci-journal.jsonl"


def record(kind: str, data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Append one record, e.g. ``record("cache-restore", {"key": ..., "manifest": ...})``.

    Raises :class:`JournalError` (exit 3 in one line, and an ``OSError``) when it cannot.
    """
    path = journal_path(environ)
    try:
        files.append_json_line(path, {"kind": kind, "time": time.time(), **data})
    except OSError as exc:
        raise JournalError(
            f"cannot write the job journal {path}: {exc.strerror or exc}",
            hint="set GPUCI_JOURNAL to a writable file, or make RUNNER_TEMP (or ./.gpuci) writable",
        ) from exc


def read(kind: str | None = None, environ: Mapping[str, str] | None = None) -> list[dict]:
    """The records (of ``kind``), oldest first. Raises :class:`JournalError` when the file is
    there but cannot be read (a step of the PR's may have made it unreadable)."""
    path = journal_path(environ)
    try:
        records = untrusted_json.read_json_lines(path)
    except OSError as exc:
        raise JournalError(
            f"cannot read the job journal {path}: {exc.strerror or exc}",
            hint="set GPUCI_JOURNAL to a readable file, or remove the one there",
        ) from exc
    return [item for item in records if kind is None or item.get("kind") == kind]


def latest(kind: str, environ: Mapping[str, str] | None = None) -> dict | None:
    """The newest record of ``kind`` without its ``kind`` field; None when there is none."""
    records = read(kind, environ)
    return {k: v for k, v in records[-1].items() if k != "kind"} if records else None
