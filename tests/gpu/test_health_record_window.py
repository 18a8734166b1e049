"""The GPU health record's read window: old verdicts never make the recent ones unreadable."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from gpuci.gpu import _health_record as hr
from gpuci.gpu.options import ReportInputs
from gpuci.inputs import build
from gpuci.runtime import Runtime

DAY = 86400


def put(root: Path, gpu: str, at: float, passed: bool, nonce: int) -> None:
    """One verdict of ``gpu`` written at ``at`` (seconds), as gpu-smoke names it."""
    folder = root / hr.ROOT / gpu
    folder.mkdir(parents=True, exist_ok=True)
    ms = int(at * 1000)
    kind = "pass" if passed else "fail"
    item = {"schema": 1, "uuid": gpu, "passed": passed, "host": "n1", "time": at,
            "failed_checks": [] if passed else ["health"], "data_center": "EU-RO-1"}  # fmt: skip
    (folder / f"{ms:015d}-{kind}-{nonce:08x}.json").write_text(json.dumps(item))


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(hr, "MAX_KEYS", 5)
    return 5


def test_verdicts_older_than_the_window_do_not_count_against_the_cap(tmp_path, small_cap):
    now = time.time()
    for i in range(small_cap * 3):  # a year-old history, well over the cap
        put(tmp_path, f"GPU-old-{i % 2}", now - 400 * DAY + i, True, i)
    put(tmp_path, "GPU-bad", now - 60, False, 1)
    warned: list[str] = []
    got = hr.recent_failures(tmp_path.as_uri(), {}, now - 7 * DAY, warn=warned.append)
    assert [g["uuid"] for g in got] == ["GPU-bad"]
    assert warned == []  # nothing in the window was left out


def test_more_verdicts_in_the_window_than_the_cap_reads_the_newest_with_one_warning(
    tmp_path, small_cap
):
    now = time.time()
    for i in range(small_cap + 3):  # the oldest three in the window are the failures
        put(tmp_path, f"GPU-{i}", now - 3600 + i, i >= 3, i)
    put(tmp_path, "GPU-new", now - 10, False, 99)
    warned: list[str] = []
    got = hr.recent_failures(tmp_path.as_uri(), {}, now - 7 * DAY, warn=warned.append)
    assert [g["uuid"] for g in got] == ["GPU-new"]  # the newest 5: four passes and GPU-new
    assert len(warned) == 1
    assert f"{small_cap + 4} verdicts in the window" in warned[0]
    assert f"the newest {small_cap} are reported" in warned[0]


def test_gpus_report_reads_the_window_past_a_pile_of_old_verdicts(tmp_path, small_cap):
    now = time.time()
    for i in range(small_cap * 2):
        put(tmp_path, "GPU-old", now - 30 * DAY + i, False, i)
    put(tmp_path, "GPU-bad", now - 60, False, 1)
    inp = build(ReportInputs, {"store": tmp_path.as_uri(), "days": 7})
    result = hr.report(inp, Runtime(environ={}, stdout=io.StringIO()))
    assert int(result.exit_code) == 0
    assert result.outputs == {"failing-gpus": 1, "verdicts": 1}
    assert not result.annotations
