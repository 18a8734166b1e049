"""gpuci.files: nothing half-written under a final name, and the report's default place."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from gpuci import files, untrusted_json
from gpuci.errors import InfraError, InputError
from gpuci_testing import count_listed, outcome_in_thread


def test_atomic_write_returns_the_digest_and_leaves_no_incomplete(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "out.json"
    digest = files.atomic_write_bytes(target, b"payload")
    hasher, _ = files.hash_file(target)
    assert digest == hashlib.sha256(b"payload").hexdigest() == hasher.hexdigest()
    assert target.read_bytes() == b"payload"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_bytes(b"old")
    files.incomplete_path(target).mkdir()  # the temporary name cannot be opened as a file
    with pytest.raises(OSError):
        files.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"


def test_report_path_prefers_the_input_then_runner_temp(tmp_path: Path) -> None:
    env = {"RUNNER_TEMP": str(tmp_path)}
    assert files.report_path("x.json", env, "r.json") == Path("x.json")
    assert files.report_path("", env, "r.json") == tmp_path / "r.json"
    assert files.report_path(None, {}, "r.json") == Path.cwd() / "r.json"


def test_report_json_keeps_key_order_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    files.write_report(target, {"b": 1, "a": Path("p")}, "test report", sort_keys=False)
    assert target.read_text().startswith('{\n  "b": 1,\n  "a": "p"\n}')
    files.write_report(target, {"b": 1, "a": 2}, "test report")
    assert list(json.loads(target.read_text())) == ["a", "b"]


def test_unwritable_places_name_the_cause_and_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match=r"cannot write the test report to .*file/r.json") as exc:
        files.write_report(blocker / "r.json", {}, "test report")
    assert "report input" in exc.value.hint and "\n" not in exc.value.message
    with pytest.raises(InfraError, match=r"cannot write .*file/out"):
        files.write_file(blocker / "out", b"x")
    assert list(tmp_path.iterdir()) == [blocker]


def test_json_lines_append_whole_records_and_skip_torn_ones(tmp_path: Path) -> None:
    log = tmp_path / "sub" / "log.jsonl"
    assert untrusted_json.read_json_lines(log) == []
    files.append_json_line(log, {"b": 1, "a": "x"})
    with open(log, "a", encoding="utf-8") as handle:
        handle.write('{"torn": \n[1, 2]\n')  # a killed writer's half line, and a non-object
    files.append_json_line(log, {"c": None})
    assert log.read_text().splitlines()[0] == '{"a": "x", "b": 1}'
    assert untrusted_json.read_json_lines(log) == [{"a": "x", "b": 1}, {"c": None}]


def test_json_lines_someone_else_wrote_are_skipped_not_a_traceback(tmp_path: Path):
    """The journal lives in RUNNER_TEMP, where a PR's code can write too."""
    log = tmp_path / "journal.jsonl"
    deep, huge = "[" * 100_000 + "]" * 100_000, '{"n": ' + "9" * 5001 + "}"
    log.write_text(f'{{"a": 1}}\n{deep}\n{huge}\n{{"b": 2}}\n')
    assert untrusted_json.read_json_lines(log) == [{"a": 1}, {"b": 2}]


def test_json_lines_are_read_bounded_from_the_end(tmp_path: Path):
    """Bytes that are not UTF-8 are skipped, and of a journal padded past 16 MiB only the end
    (where the job's newest records are) is read."""
    log = tmp_path / "journal.jsonl"
    log.write_bytes(b'{"old": 1}\n\xff\xfe\n' + b" " * (16 << 20) + b'\n{"new": 2}\n')
    assert untrusted_json.read_json_lines(log) == [{"new": 2}]


def test_hash_fd_is_the_one_hash_loop(tmp_path):
    """Every block once, in order, at its offset; a resumed hasher goes on; the file position
    is neither used nor moved (pread), so a caller's open file is left as it was."""
    data = os.urandom(10_000)
    target = tmp_path / "f.bin"
    target.write_bytes(data)
    seen: list[tuple[int, bytes]] = []
    with open(target, "rb", buffering=0) as handle:
        handle.seek(123)
        hasher, count = files.hash_fd(
            handle.fileno(), chunk=4096, each=lambda block, at: seen.append((at, bytes(block)))
        )
        assert handle.tell() == 123
    assert (hasher.hexdigest(), count) == (hashlib.sha256(data).hexdigest(), len(data))
    assert [at for at, _ in seen] == [0, 4096, 8192]
    assert b"".join(block for _, block in seen) == data
    head = hashlib.sha256(b"head")
    with open(target, "rb") as handle:
        resumed, _ = files.hash_fd(handle.fileno(), head)
    assert resumed.hexdigest() == hashlib.sha256(b"head" + data).hexdigest()
    assert files.hash_file(target, chunk=999)[1] == len(data)


def test_hash_fd_reads_no_further_than_the_size_it_is_given(tmp_path):
    """A file someone else put there is read up to the size it states: one that reads on past
    it (``/proc/self/pagemap``: 0 bytes stated, hundreds of GiB read) is EFBIG, not read."""
    target = tmp_path / "f.bin"
    target.write_bytes(b"x" * 10_000)
    with open(target, "rb", buffering=0) as handle:
        hasher, count = files.hash_fd(handle.fileno(), chunk=4096, size=10_000)
        assert (hasher.hexdigest(), count) == (hashlib.sha256(b"x" * 10_000).hexdigest(), 10_000)
        with pytest.raises(OSError) as caught:
            files.hash_fd(handle.fileno(), chunk=4096, size=5000)
        assert caught.value.errno == errno.EFBIG


def _walked(top: Path, limit: int | None) -> list[str]:
    """The names below ``top`` a walk with ``limit`` lists (folders as ``name/``)."""
    fd = os.open(top, files.FOLDER)
    try:
        return [
            "/".join([*names, entry.name])
            for _, names, entries in files.walk(fd, limit=limit)
            for entry in entries
        ]
    finally:
        os.close(fd)


def test_a_walk_lists_at_most_its_limit_of_names(tmp_path, monkeypatch):
    """A tree of empty folders holds no file a caller counts, and one folder's names were all
    read (and sorted) before the first was seen: a walk with a limit counts every name as it
    is listed and stops one past it, the rest never read."""
    for i in range(30):
        (tmp_path / f"d{i:02}").mkdir()
    (tmp_path / "d00" / "f").write_bytes(b"")
    assert _walked(tmp_path, 31) == ["d00/f"]  # 30 folders and a file: within the limit
    read = count_listed(monkeypatch)
    with pytest.raises(files.TooMany, match="more than 10 entries to walk") as caught:
        _walked(tmp_path, 10)
    assert caught.value.errno == errno.E2BIG
    assert len(read) == 11  # the one past the limit, then no more


def test_a_planted_temporary_is_replaced_never_written_through(tmp_path: Path) -> None:
    """The folder a report goes to may be the PR's (gate.json under its output dir): a link
    planted at ``<name>.incomplete`` had the bytes written through it into its target (then
    the link renamed over the name), and a FIFO held ``open`` until the job was killed, so the
    gate never said it errored. What is there is removed and the file made anew."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    target = tmp_path / "out" / "gate.json"
    target.parent.mkdir()
    files.incomplete_path(target).symlink_to(victim)
    files.atomic_write_bytes(target, b"report")
    assert victim.read_bytes() == b"keep"
    assert target.read_bytes() == b"report" and not target.is_symlink()

    os.mkfifo(files.incomplete_path(target))
    done = outcome_in_thread(lambda: files.atomic_write_bytes(target, b"again"))
    if not done:  # release the writer still waiting in open(), then fail
        os.close(os.open(files.incomplete_path(target), os.O_RDONLY | os.O_NONBLOCK))
    assert done == [hashlib.sha256(b"again").hexdigest()], done
    assert target.read_bytes() == b"again"


def test_a_call_still_running_reads_as_still_running_after_its_release() -> None:
    """What the FIFO tests read: a call still running at the timeout is ``[]``, and stays so
    once the test releases it. The live list came back, so a writer released from its FIFO
    appended its digest before the assert read it: a hang passed as a success."""
    release, ended = threading.Event(), threading.Event()

    def call() -> str:
        release.wait(60)
        return "done"

    got = outcome_in_thread(call, timeout=0.01)
    release.set()  # as the FIFO tests open the other end
    for worker in threading.enumerate():
        if worker.name == "outcome-in-thread":
            worker.join(60)
            ended.set()
    assert ended.is_set() and got == [], got
