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

from gpuci import files


def journal_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("GPUCI_JOURNAL"):
        return Path(env["GPUCI_JOURNAL"])
    base = env.get("RUNNER_TEMP") or os.path.join(os.getcwd(), ".gpuci")
    return Path(base) / "gpuci-journal.jsonl"


def record(kind: str, data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Append one record, e.g. ``record("cache-restore", {"key": ..., "manifest": ...})``."""
    files.append_json_line(journal_path(environ), {"kind": kind, "time": time.time(), **data})


def read(kind: str | None = None, environ: Mapping[str, str] | None = None) -> list[dict]:
    records = files.read_json_lines(journal_path(environ))
    return [item for item in records if kind is None or item.get("kind") == kind]
