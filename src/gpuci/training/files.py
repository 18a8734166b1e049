"""Hashing and atomic JSON writes: nothing half-written ever sits under its final name."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from gpuci.errors import InfraError, IntegrityError

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def dump_json(data: Any) -> bytes:
    """Stable bytes (sorted keys): the same record always has the same digest."""
    return (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode()


def write_atomic(path: Path, payload: bytes) -> str:
    """Write ``path.incomplete``, check its sha256 on disk, then rename; returns the sha256."""
    expected = hashlib.sha256(payload).hexdigest()
    temp = path.with_name(path.name + ".incomplete")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if sha256_file(temp) != expected:
            raise IntegrityError(
                f"{temp} does not read back as written", hint="check the disk and rerun"
            )
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise InfraError(
            f"cannot write {path}: {exc.strerror or exc}", hint="check the folder and free space"
        ) from None
    return expected
