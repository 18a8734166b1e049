"""The one helper that runs a call on a daemon thread and waits for it with a deadline (the
pods cleanup's ledger writes, the restore's last-use record)."""

from __future__ import annotations

import threading
import time

import pytest

from gpuci.background import Background


def test_the_value_comes_back_once_the_call_is_over():
    call = Background(lambda: "written", "gpuci-test")
    assert call.result() == "written"
    assert call.wait(time.monotonic()) is True  # over: no deadline matters now


def test_a_call_still_running_at_the_deadline_is_not_waited_for():
    release = threading.Event()
    call = Background(lambda: release.wait(10), "gpuci-test-hung")
    try:
        assert call.wait(time.monotonic()) is False  # the deadline has passed: not over
        names = [thread.name for thread in threading.enumerate() if thread.daemon]
        assert "gpuci-test-hung" in names  # a daemon: it ends with the process
    finally:
        release.set()
    assert call.wait() is True


def test_what_the_call_raised_is_raised_where_it_is_waited_for():
    def broken() -> None:
        raise KeyError("a bug")

    call = Background(broken, "gpuci-test")
    with pytest.raises(KeyError, match="a bug"):
        call.wait()
    with pytest.raises(KeyError, match="a bug"):
        call.result()
