"""A local record of which pod belonged to whom, for costs after the pod is gone.

RunPod's billing names only the pod id, and terminated pods vanish from ``listPods``, so
without this the spend of a finished pod could not be attributed to its owner or GPU type.
``up`` appends one line per pod; ``cost`` and the budget check read it. Keep it on a
persistent runner or cache it between jobs; what it lacks shows as "(unattributed)".
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_LEDGER = "GPUCI_PODS_LEDGER"


def ledger_path(environ: Mapping[str, str]) -> Path:
    if environ.get(ENV_LEDGER):
        return Path(environ[ENV_LEDGER])
    return Path.home() / ".cache" / "gpuci" / "pods-ledger.jsonl"


def append(environ: Mapping[str, str], entry: Mapping[str, Any]) -> None:
    """One line, one ``write`` under ``O_APPEND``: parallel jobs never interleave records."""
    path = ledger_path(environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(dict(entry), sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)


def read(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """podId -> the last entry written for it."""
    path = ledger_path(environ)
    out: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line from a killed job
        if isinstance(item, dict) and item.get("podId"):
            out[item["podId"]] = item
    return out
