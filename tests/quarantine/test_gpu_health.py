"""The per-GPU health record: gpu-smoke writes a verdict per GPU, ``gpus report`` reads them."""

from __future__ import annotations

import json
from pathlib import Path

from gpuci_testing import clean_env, run_cli_here

ROOT = "gpu-health/verdicts"


def cli(tmp_path: Path, *args: str, **env: str):
    environ = clean_env(GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"), **env)
    proc = run_cli_here(*args, env=environ, cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def smoke(tmp_path: Path, nvml: str, **env: str):
    return cli(tmp_path, "gpu-smoke", "--framework", "none", GPUCI_FAKE_NVML=nvml, **env)


def verdict_files(store: Path) -> list[Path]:
    return sorted((store / ROOT).rglob("*.json")) if (store / ROOT).exists() else []


def test_each_verdict_is_recorded_and_the_report_lists_the_failing_gpu(tmp_path):
    store = tmp_path / "health"
    url = store.as_uri()
    bad = smoke(
        tmp_path,
        "h200:ecc+=1,h200",
        GPUCI_GPU_HEALTH_STORE=url,
        RUNNER_NAME="r-7",
        GPUCI_NODE_NAME="node-a",
    )
    assert bad.returncode == 1
    good = smoke(
        tmp_path, "h200,h200", GPUCI_NODE_NAME="node-b", RUNNER_NAME="r-8", INPUT_HEALTH_STORE=url
    )
    assert good.returncode == 0
    records = [json.loads(p.read_text()) for p in verdict_files(store)]
    assert len(records) == 4
    failed = [r for r in records if not r["passed"]]
    assert len(failed) == 1
    assert failed[0]["host"] == "node-a" and failed[0]["runner"] == "r-7"
    assert failed[0]["failed_checks"] == ["health"] and failed[0]["uuid"].startswith("GPU-")
    assert failed[0]["checks"][0]["figures"]["ecc_uncorrected"] == [0, 1]

    proc = cli(tmp_path, "gpus", "report", "--days", "2", "--store", url, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["outputs"] == {"failing-gpus": "1", "verdicts": "4"}
    table = body["summary_markdown"]
    row = [ln for ln in table.splitlines() if ln.startswith("| node-a")]
    assert len(row) == 1 and failed[0]["uuid"] in row[0] and "| health |" in row[0]
    assert "node-b" not in table


def test_no_store_no_record_and_a_failed_write_is_one_warning(tmp_path):
    assert smoke(tmp_path, "h200:ecc+=1").returncode == 1
    assert not list(tmp_path.rglob(f"{ROOT}/*"))
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    proc = smoke(tmp_path, "h200:ecc+=1", GPUCI_GPU_HEALTH_STORE=(blocker / "s").as_uri())
    assert proc.returncode == 1  # the verdict, not the store's failure
    text = proc.stdout + proc.stderr
    assert text.count("GPU health record not written") == 1


def test_the_report_reads_only_the_period_skips_garbage_and_escapes_cells(tmp_path):
    store = tmp_path / "health"
    hostile = "evil|node\n::error::pwned"
    assert (
        smoke(
            tmp_path, "h200:ecc+=1", GPUCI_GPU_HEALTH_STORE=store.as_uri(), GPUCI_NODE_NAME=hostile
        ).returncode
        == 1
    )
    folder = verdict_files(store)[0].parent
    old = dict(json.loads(verdict_files(store)[0].read_text()), host="ancient")
    (folder / "000000000001000-fail-00000000.json").write_text(json.dumps(old))  # 1970
    (folder / "999999999999999-fail-11111111.json").write_bytes(b"{" * 200_000)  # too big
    (folder / "999999999999998-fail-22222222.json").write_text("[1, 2]")  # not a verdict
    proc = cli(tmp_path, "gpus", "report", "--store", store.as_uri(), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["outputs"]["verdicts"] == "1"
    table = body["summary_markdown"]
    assert "ancient" not in table
    assert "evil\\|node" in table and "\n::error::pwned" not in table


def test_report_without_a_store_is_an_input_error(tmp_path):
    proc = cli(tmp_path, "gpus", "report")
    assert proc.returncode == 2 and "GPUCI_GPU_HEALTH_STORE" in proc.stdout + proc.stderr


def test_the_board_serial_is_recorded_and_reported(tmp_path):
    """Issue 26 item 3: the serial on the board's label follows it to the RMA desk."""
    store = tmp_path / "health"
    url = store.as_uri()
    assert smoke(tmp_path, "h200:ecc+=1,t4", GPUCI_GPU_HEALTH_STORE=url).returncode == 1
    records = {r["index"]: r for r in map(json.loads, map(Path.read_text, verdict_files(store)))}
    assert records[0]["serial"] == "1652421000000"  # the fake's, in NVIDIA's 13-digit form
    assert records[1]["serial"] == "1323520000001"
    proc = cli(tmp_path, "gpus", "report", "--days", "1", "--store", url, "--json")
    body = json.loads(proc.stdout)
    assert "| serial |" in body["summary_markdown"].splitlines()[2]
    assert "| 1652421000000 |" in body["summary_markdown"]
    assert body["report"]["failing"][0]["serial"] == "1652421000000"


def test_a_stored_serial_is_an_input(tmp_path):
    """A verdict object's serial is capped and never breaks the table."""
    store = tmp_path / "health"
    assert smoke(tmp_path, "h200:ecc+=1", GPUCI_GPU_HEALTH_STORE=store.as_uri()).returncode == 1
    (path,) = verdict_files(store)
    item = json.loads(path.read_text())
    item["serial"] = "x|y\n::error::" + "9" * 500
    path.write_text(json.dumps(item))
    proc = cli(tmp_path, "gpus", "report", "--days", "1", "--store", store.as_uri(), "--json")
    body = json.loads(proc.stdout)
    serial = body["report"]["failing"][0]["serial"]
    assert len(serial) <= 64
    assert "\n::error::" not in body["summary_markdown"]
