"""The job journal is appended to, never waited on: a FIFO (or anything else that is no
regular file) planted where it lives is refused in one line."""

from __future__ import annotations

import os

import pytest

from gpuci import journal
from gpuci.errors import JournalError
from gpuci_testing import outcome_in_thread


def test_a_fifo_no_one_reads_is_refused_not_waited_on(tmp_path):
    """A PR's step made RUNNER_TEMP/gpuci-journal.jsonl a FIFO: open() for writing waited for
    a reader for ever, and with it the gate."""
    fifo = tmp_path / "gpuci-journal.jsonl"
    os.mkfifo(fifo)
    env = {"RUNNER_TEMP": str(tmp_path)}
    got = outcome_in_thread(lambda: journal.record("gate", {"passed": True}, env), timeout=20)
    if not got:  # release the writer still waiting in open(), then fail
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    assert got, "still waiting on the FIFO after 20 s"
    (error,) = got
    assert isinstance(error, JournalError), error
    assert "not a regular file" in error.one_line() and str(fifo) in error.one_line()


def test_a_fifo_someone_reads_is_refused_too(tmp_path):
    """With a reader on the other end the line would go down the pipe, not into the journal
    the later steps read."""
    fifo = tmp_path / "journal.jsonl"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(JournalError, match="not a regular file"):
            journal.record("gate", {"passed": True}, {"GPUCI_JOURNAL": str(fifo)})
    finally:
        os.close(reader)


def test_records_are_appended_and_read_back(tmp_path):
    env = {"GPUCI_JOURNAL": str(tmp_path / "j" / "journal.jsonl")}
    journal.record("gate", {"passed": True}, env)
    journal.record("gate", {"passed": False}, env)
    assert [r["passed"] for r in journal.read("gate", env)] == [True, False]


def test_dev_null_turns_the_journal_off_as_before(tmp_path):
    """``GPUCI_JOURNAL=/dev/null`` threw the records away before FIFOs were refused; since,
    every step that records failed (exit 3), the gate with ``passed: false``."""
    env = {"GPUCI_JOURNAL": os.devnull}
    journal.record("gate", {"passed": True}, env)
    assert journal.read("gate", env) == []


def test_a_socket_is_refused(tmp_path):
    """A socket (like a FIFO) would take the line away from the later steps."""
    import socket

    path = tmp_path / "journal.jsonl"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(JournalError, match="not a regular file"):
            journal.record("gate", {"passed": True}, {"GPUCI_JOURNAL": str(path)})


def test_a_journal_that_cannot_be_read_is_one_line_not_an_internal_error(tmp_path):
    """An OSError reading it (a name past the limit here; a file a PR's step made unreadable
    on a runner not run as root) escaped ``read`` as a bare OSError: 'internal error'."""
    env = {"GPUCI_JOURNAL": str(tmp_path / ("j" * 300))}
    with pytest.raises(JournalError, match="cannot read the job journal"):
        journal.read("gate", env)
    with pytest.raises(JournalError):
        journal.latest("gate", env)
