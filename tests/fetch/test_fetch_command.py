"""The retry-fetch command end to end: inputs as a user types them, outputs, summary, dry run."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fetch_server import DATA, SHA, Fault, FaultyServer, plant_partial

from gpuci.cli import run_command
from gpuci.commands import _retry_fetch as retry_fetch
from gpuci.runtime import Result, Runtime
from gpuci_testing import clean_env, run_cli

FAST = {"attempts": "4", "timeout": "1s", "max-wait": "50ms", "deadline": "20s"}


def fetch(
    flags: dict[str, str], tmp_path: Path, dry_run: bool = False, **env: str
) -> tuple[Result, str]:
    out = io.StringIO()
    environ = {"GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"), **env}
    rt = Runtime(environ, dry_run=dry_run, stdout=out, stderr=out)
    result = run_command(retry_fetch.COMMAND, "retry-fetch", {**FAST, **flags}, rt)
    rt.render(result)
    return result, out.getvalue()


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_one_url_outputs_summary_and_journal(server: FaultyServer, tmp_path: Path):
    server.faults("/data.bin", Fault(drop_after=120_000))
    result, text = fetch(
        {"url": server.url("/data.bin"), "dest": "w/model.bin", "sha256": SHA}, tmp_path
    )
    assert result.ok, text
    assert (tmp_path / "w/model.bin").read_bytes() == DATA
    out = result.outputs
    assert out["path"] == str(tmp_path / "w/model.bin")
    assert (out["sha256"], out["bytes"], out["attempts"]) == (SHA, len(DATA), 2)
    assert out["resumed-bytes"] == 120_000
    assert "| file | size | sha256 | attempts |" in result.summary[0]
    assert "model.bin" in result.summary[0]
    record = json.loads((tmp_path / "journal.jsonl").read_text())
    assert record["kind"] == "retry-fetch" and record["files"][0]["sha256"] == SHA


def test_several_urls_in_parallel_into_a_folder(tmp_path: Path):
    blobs = {f"/f{i}.bin": os.urandom(50_000 + i) for i in range(5)}
    with FaultyServer() as srv:
        for path, data in blobs.items():
            srv.add(path, data)
        srv.faults("/f2.bin", Fault(status=503), Fault(drop_after=10_000))
        urls = "\n".join(srv.url(p) for p in blobs)
        result, text = fetch({"url": urls, "dest": "out", "parallel": "3"}, tmp_path)
        assert result.ok, text
        for path, data in blobs.items():
            assert (tmp_path / "out" / path[1:]).read_bytes() == data
        assert result.outputs["attempts"] == 5 + 2
        assert result.outputs["resumed-bytes"] == 10_000
        assert result.outputs["sha256"].splitlines() == [
            hashlib.sha256(d).hexdigest() for d in blobs.values()
        ]
        assert srv.served() == sum(len(d) for d in blobs.values())


def test_list_file_with_a_bad_checksum_fails_that_file_only(server, tmp_path: Path):
    server.add("/other.bin", b"x" * 1000)
    listing = tmp_path / "files.txt"
    listing.write_text(
        f"# url sha256 dest\n{server.url('/data.bin')} {SHA} a.bin\n"
        f"{server.url('/other.bin')} {'0' * 64} b.bin\n"
    )
    result, _ = fetch({"url": "@files.txt"}, tmp_path)
    assert result.exit_code == 3
    assert "sha256 mismatch" in result.headline and "0" * 64 in result.headline
    assert (tmp_path / "a.bin").read_bytes() == DATA
    assert not (tmp_path / "b.bin").exists()
    assert not (tmp_path / "b.bin.incomplete").exists()
    assert result.outputs["path"] == str(tmp_path / "a.bin")
    assert "FAILED" in result.summary[0]


def test_sha256_from_a_checksums_url(server, tmp_path: Path):
    sums = f"{'1' * 64}  other.bin\n{SHA} *data.bin\n".encode()
    server.add("/SHA256SUMS", sums)
    result, text = fetch(
        {"url": server.url("/data.bin"), "sha256": server.url("/SHA256SUMS")}, tmp_path
    )
    assert result.ok, text
    assert result.outputs["sha256"] == SHA


def test_header_values_are_masked_and_sent(server, tmp_path: Path):
    result, text = fetch(
        {"url": server.url("/data.bin"), "headers": "Authorization: Bearer tok-123456"},
        tmp_path,
        GITHUB_ACTIONS="true",
        GITHUB_OUTPUT=str(tmp_path / "gh_out"),
        GITHUB_STEP_SUMMARY=str(tmp_path / "gh_summary"),
    )
    assert result.ok, text
    assert "::add-mask::Bearer tok-123456" in text
    assert "::add-mask::tok-123456\n" in text  # the token alone, wherever it shows up later
    assert server.gets()[0].headers["Authorization"] == "Bearer tok-123456"
    assert "attempts<<" in (tmp_path / "gh_out").read_text()


def test_progress_lines_per_file(server, tmp_path: Path):
    result, text = fetch(
        {"url": server.url("/data.bin"), "dest": "p.bin"}, tmp_path, GPUCI_PROGRESS_INTERVAL="0"
    )
    assert result.ok
    assert "p.bin: " in text and "/s" in text
    again, text = fetch({"url": server.url("/data.bin"), "dest": "p.bin", "sha256": SHA}, tmp_path)
    assert again.ok and "p.bin: already present, sha256 matches\n" in text
    assert "p.bin: 0 B" not in text


def test_dry_run_probes_and_writes_nothing(server, tmp_path: Path):
    plant_partial(tmp_path / "big.bin", DATA[:1000], server.url("/data.bin"))
    before = sorted(p.name for p in tmp_path.iterdir())
    result, text = fetch(
        {"url": server.url("/data.bin"), "dest": "big.bin"},
        tmp_path,
        dry_run=True,
        GPUCI_PROBE="true",
    )
    assert result.ok, text
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert [r.method for r in server.requests] == ["HEAD"]
    plan = result.report["plan"][0]
    assert plan["size"] == len(DATA) and plan["resumable"] is True
    assert plan["would"].startswith("resume from byte 1000")
    assert result.outputs["bytes"] == len(DATA)


def test_dry_run_without_probe_contacts_nobody(server, tmp_path: Path):
    """No network unless --probe: the plan says what would be fetched and verified."""
    plant_partial(tmp_path / "big.bin", DATA[:1000], server.url("/data.bin"))
    flags = {
        "url": server.url("/data.bin") + "\n" + server.url("/nope.bin"),
        "dest": "dl/",
        "sha256": "",
    }
    result, text = fetch(
        {"url": server.url("/data.bin"), "dest": "big.bin", "sha256": SHA}, tmp_path, dry_run=True
    )
    assert result.ok, text
    assert server.requests == []
    plan = result.report["plan"][0]
    assert plan["would"].startswith("fetch, resume from byte 1000 of ")
    assert f"verify sha256 {SHA[:16]}" in plan["would"]
    assert result.report["probe"] is False and "--probe asks the servers" in result.headline
    result, text = fetch({**flags, "sha256": ""}, tmp_path, dry_run=True)
    assert result.ok, text  # a URL that would 404 is not known to fail without asking
    assert server.requests == []
    assert "no digest given: not verified" in result.report["plan"][1]["would"]


def test_dry_run_reports_a_url_that_would_fail(server, tmp_path: Path):
    result, text = fetch(
        {"url": server.url("/nope.bin")}, tmp_path, dry_run=True, GPUCI_PROBE="true"
    )
    assert result.exit_code == 3
    assert "HTTP 404" in text
    assert list(tmp_path.iterdir()) == []


def test_dry_run_without_range_support(tmp_path: Path):
    with FaultyServer() as srv:
        srv.add("/plain.bin", DATA, accept_ranges=False, etag=None)
        result, _ = fetch(
            {"url": srv.url("/plain.bin")}, tmp_path, dry_run=True, GPUCI_PROBE="true"
        )
    assert result.ok and result.report["plan"][0]["resumable"] is False


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"url": "http://h/a.bin", "sha256": "abc"}, "not a sha256"),
        ({"url": "http://h/a.bin\nhttp://h/b.bin", "mirrors": "http://m/a.bin"}, "full URL"),
        ({"url": "http://h/a.bin", "headers": "no colon here"}, "Name: value"),
        ({"url": "ftp://h/a.bin"}, "http(s) URL"),
        ({"url": "http://h/"}, "cannot name a file"),
        ({"url": "http://h/a.bin\nhttp://other/a.bin"}, "would both be written"),
        ({"url": "@missing.txt"}, "cannot read the url list"),
        ({"url": "http://h/a.bin", "attempts": "0"}, "below the minimum"),
    ],
)
def test_bad_input_is_exit_2_before_any_request(tmp_path: Path, flags, needle):
    result, text = fetch(flags, tmp_path)
    assert result.exit_code == 2, text
    assert needle in result.headline
    assert "(fix: " in result.headline


def test_a_url_list_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path):
    """'@urls.txt' names a file in the checkout, which a PR writes: a FIFO there held open()
    until something wrote to it. Run on a thread given 60 s, then unblocked."""
    import threading

    fifo = tmp_path / "urls.txt"
    os.mkfifo(fifo)
    got: list[tuple[Result, str]] = []
    worker = threading.Thread(target=lambda: got.append(fetch({"url": "@urls.txt"}, tmp_path)))
    worker.start()
    worker.join(60)
    if worker.is_alive():  # unblock the old code's open(), then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(60)
    assert got, "the url list's open() waited on the FIFO"
    result, text = got[0]
    assert result.exit_code == 2 and "not a regular file" in result.headline, text


def test_cli_one_line_error_and_exit_code(server, tmp_path: Path):
    env = clean_env(INPUT_URL=server.url("/missing.bin"), INPUT_ATTEMPTS="2")
    proc = run_cli("retry-fetch", "--json", env=env, cwd=tmp_path, timeout=30)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["report"]["error"]["type"] == "FetchError"
    assert "HTTP 404" in body["headline"] and "Traceback" not in proc.stderr


def test_command_spec_stays_light():
    code = (
        "import sys, gpuci.cli, gpuci.commands._retry_fetch; "
        "assert 'httpx' not in sys.modules and 'tenacity' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_presigned_query_is_masked_and_kept_out_of_the_journal(server, tmp_path: Path):
    url = server.url("/data.bin") + "?X-Amz-Signature=deadbeefcafe"
    result, text = fetch({"url": url}, tmp_path, GPUCI_PROGRESS_INTERVAL="0")
    assert result.ok, text
    assert "deadbeefcafe" not in text and "***" in text
    journal = (tmp_path / "journal.jsonl").read_text()
    assert "deadbeefcafe" not in journal and server.url("/data.bin") in journal


def test_failed_files_still_count_their_attempts(server, tmp_path: Path):
    server.faults("/data.bin", *[Fault(status=503)] * 4)
    result, text = fetch({"url": server.url("/data.bin")}, tmp_path)
    assert result.exit_code == 3 and "after 4 attempt(s)" in result.headline
    assert result.outputs["attempts"] == 4  # not 0: the output agrees with the error
    assert "data.bin: failed after 0 B in " in text  # the progress line does not read as done


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "probe"])
def test_the_headers_reach_a_checksum_file_on_the_downloads_origin(
    server, tmp_path: Path, dry_run: bool
):
    """A private repository's SHA256SUMS needs the same token as its files (same origin only:
    ``home_credentials``); both the run and the probing dry run send it."""
    server.add("/SHA256SUMS", f"{SHA}  data.bin\n".encode())
    flags = {
        "url": server.url("/data.bin"),
        "sha256": server.url("/SHA256SUMS"),
        "headers": "Authorization: Bearer tok-123456",
    }
    result, text = fetch(flags, tmp_path, dry_run=dry_run, GPUCI_PROBE="true")
    assert result.ok, text
    asked = server.gets("/SHA256SUMS")
    assert asked and asked[0].headers.get("Authorization") == "Bearer tok-123456"
