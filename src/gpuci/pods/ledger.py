"""A local record of which pod belonged to whom, for costs after the pod is gone.

RunPod's billing names only the pod id, and terminated pods vanish from ``listPods``, so
without this the spend of a finished pod could not be attributed to its owner or GPU type.
``up`` appends one line per pod; ``cost`` and the budget check read it. Keep it on a
persistent runner or cache it between jobs; what it lacks shows as "(unattributed)".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuci import files

ENV_LEDGER = "GPUCI_PODS_LEDGER"


def ledger_path(environ: Mapping[str, str]) -> Path:
    if environ.get(ENV_LEDGER):
        return Path(environ[ENV_LEDGER])
    return Path.home() / ".cache" / "gpuci" / "pods-ledger.jsonl"


def append(environ: Mapping[str, str], entry: Mapping[str, Any]) -> None:
    """One line per pod; parallel jobs never interleave records (see gpuci.files)."""
    files.append_json_line(ledger_path(environ), entry)


def read(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """podId -> the last entry written for it (lines torn by a killed job are skipped)."""
    entries = files.read_json_lines(ledger_path(environ))
    return {item["podId"]: item for item in entries if item.get("podId")}
