"""A download client keeps its 1 MiB read buffers in malloc's heap (gpuci.fetch._memory).

Counted in page faults, not seconds: the same churn of 1 MiB buffers that a download makes
(a few alive at once, freed, again) faults every page in anew under glibc's defaults."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from gpuci.fetch import _memory as memory

# Eight 1 MiB buffers alive at once, then freed, fifty times: what the reader, the writer and
# the hasher threads hold between them. Prints the minor page faults of the second round.
CHURN = textwrap.dedent(
    """
    import resource, sys
    if sys.argv[1] == "library":  # a download client made through the API
        from gpuci.fetch import FetchPolicy
        from gpuci.fetch._client import new_client
        new_client(FetchPolicy()).close()
    elif sys.argv[1] == "command":  # the retry-fetch command, its one URL refused at once
        import contextlib, io
        from gpuci.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["retry-fetch", "--url", "http://127.0.0.1:9/x", "--dest", sys.argv[2],
                  "--attempts", "1", "--timeout", "2s"])
    def churn():
        for _ in range(50):
            live = [bytes(bytearray(1 << 20)) for _ in range(8)]
            del live
    churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    churn()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def _faults(mode: str, *args: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUN"))}
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode, *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(memory._glibc_mallopt() is None, reason="glibc only")
def test_the_retry_fetch_command_stops_the_page_faults_of_buffer_churn(tmp_path):
    pages_per_round = 50 * 8 * (1 << 20) // 4096  # every buffer faulted in anew: 102400
    assert _faults("plain") > pages_per_round // 2  # glibc's defaults (the test's premise)
    assert _faults("command", str(tmp_path / "out.bin")) < pages_per_round // 100


@pytest.mark.skipif(memory._glibc_mallopt() is None, reason="glibc only")
def test_a_client_made_through_the_api_leaves_the_host_process_malloc_alone():
    pages_per_round = 50 * 8 * (1 << 20) // 4096
    assert _faults("library") > pages_per_round // 2


def test_thresholds_are_set_through_mallopt():
    calls: list[tuple[int, int]] = []

    def mallopt(param: int, value: int) -> int:
        calls.append((param, value))
        return 1

    assert memory.apply_thresholds(mallopt, {}) is True
    assert calls == [
        (memory.M_MMAP_THRESHOLD, 4 << 20),
        (memory.M_TRIM_THRESHOLD, 32 << 20),
    ]


@pytest.mark.parametrize(
    "environ",
    [
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"MALLOC_TRIM_THRESHOLD_": "0"},
        {"MALLOC_TOP_PAD_": "0"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"},
    ],
)
def test_a_user_who_tunes_malloc_keeps_their_settings(environ):
    calls: list[tuple[int, int]] = []
    assert memory.apply_thresholds(lambda p, v: calls.append((p, v)) or 1, environ) is False
    assert calls == []


def test_without_glibc_nothing_changes():
    assert memory.apply_thresholds(None, {}) is False


def test_a_refusal_is_reported_not_raised():
    assert memory.apply_thresholds(lambda p, v: 0, {}) is False
