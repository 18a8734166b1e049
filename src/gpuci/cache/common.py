"""What restore, save and ls share: opening the store from inputs, outputs and the summary."""

from __future__ import annotations

from typing import Any

from gpuci.cache.store import Store, open_store
from gpuci.runtime import Runtime, human_bytes, markdown_table


def store_from(values: dict[str, Any], rt: Runtime) -> Store:
    return open_store(
        values.get("store"),
        endpoint_url=values.get("endpoint-url"),
        region=values.get("region"),
        environ=rt.environ,
        mask=rt.mask,
    )


def outputs(
    *,
    hit: bool,
    matched: str,
    manifest: str,
    down: int,
    up: int,
    files: int,
    seconds: float,
    local: int = 0,
    populated: bool | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cache-hit": hit,
        "matched-key": matched,
        "manifest": manifest,
        "bytes-downloaded": down,
        "bytes-from-local": local,
        "bytes-uploaded": up,
        "files": files,
        "seconds": round(seconds, 3),
    }
    if populated is not None:
        out["populated"] = populated
    return out


def summary_table(key: str, outcome: str, files: int, size: int, moved: int, seconds: float) -> str:
    rate = moved / seconds / 1e6 if seconds > 0 and moved else 0.0
    return markdown_table(
        ["key", "result", "files", "bytes", "moved", "seconds", "MB/s"],
        [
            [
                key,
                outcome,
                files,
                human_bytes(size),
                human_bytes(moved),
                f"{seconds:.2f}",
                f"{rate:.1f}",
            ]
        ],
    )
