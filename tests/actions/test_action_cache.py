"""The cache actions in one job: a miss, a save, then hits through the leaf and root actions."""

from __future__ import annotations

import shutil
from pathlib import Path

from action_env import run_gpuci_action


def test_miss_save_then_hit_across_actions(tmp_path: Path) -> None:
    store = f"file://{tmp_path / 'store'}"
    data = tmp_path / "workspace" / "models" / "base"
    data.mkdir(parents=True)
    (data / "weights.bin").write_bytes(b"\x01" * 4096)
    (data / "config.json").write_text('{"layers": 2}')
    paths = "models/base\n"  # multi-line input, through env: like any other

    miss = run_gpuci_action(
        tmp_path, "actions/cache-weights", {"key": "w-v1", "path": paths, "store": store}
    )
    assert miss.ok, miss.log
    assert miss.outputs["cache-hit"] == "false"
    assert miss.outputs["matched-key"] == ""

    save = run_gpuci_action(
        tmp_path, "actions/cache-weights/save", {"key": "w-v1", "path": paths, "store": store}
    )
    assert save.ok, save.log
    assert int(save.outputs["bytes-uploaded"]) >= 4096
    assert save.outputs["files"] == "2"

    shutil.rmtree(data)
    hit = run_gpuci_action(
        tmp_path,
        "actions/cache-weights/restore",
        {"key": "w-v2", "restore-keys": "w-\n", "path": paths, "store": store},
    )
    assert hit.ok, hit.log
    assert hit.outputs["cache-hit"] == "false"  # a restore-keys match is not an exact hit
    assert hit.outputs["matched-key"] == "w-v1"
    assert (data / "weights.bin").read_bytes() == b"\x01" * 4096
    assert "w-v1" in hit.summary

    shutil.rmtree(data)
    root = run_gpuci_action(
        tmp_path,
        ".",
        {"require-gpu": False, "cache-key": "w-v1", "cache-path": paths, "cache-store": store},
        GPUCI_FAKE_NVML="no-driver",
    )
    assert root.ok, root.log
    assert root.step("cache").outcome == "success"
    assert root.outputs["cache-hit"] == "true"
    assert root.outputs["cache-matched-key"] == "w-v1"
    assert root.outputs["gpu-count"] == "0"
    assert (data / "config.json").read_text() == '{"layers": 2}'
