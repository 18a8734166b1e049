"""A per-job journal: what each gpu-ci step did, for provenance and reports later in the job.

Steps of one job run as separate processes; this file is how ``provenance`` learns which cache
manifests were restored and which GPU was used. One JSON object per line, appended atomically
(a single ``write`` of a line under ``O_APPEND``), so parallel steps never interleave records.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def journal_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("GPUCI_JOURNAL"):
        return Path(env["GPUCI_JOURNAL"])
    base = env.get("RUNNER_TEMP") or os.path.join(os.getcwd(), ".gpuci")
    return Path(base) / "gpuci-journal.jsonl"


def record(kind: str, data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Append one record, e.g. ``record("cache-restore", {"key": ..., "manifest": ...})``."""
    path = journal_path(environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"kind": kind, "time": time.time(), **data}, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(kind: str | None = None, environ: Mapping[str, str] | None = None) -> list[dict]:
    path = journal_path(environ)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line from a killed step: skip it, keep the rest
        if kind is None or item.get("kind") == kind:
            records.append(item)
    return records
