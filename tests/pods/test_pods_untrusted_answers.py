"""What RunPod (or whatever answers at RUNPOD_API_URL) sends back is untrusted: each answer is
read only up to a cap, whatever length it claims, and parsed through ``untrusted_json``
(nesting, numbers), so a hostile or broken server ends the step with one line, exit 3.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from pods_testing import FakeClock, refused_answer, serve_scripted

from gpuci.pods._runpod import client as client_mod
from gpuci.pods._runpod.client import RunPodClient, RunPodError


class _Endless(httpx.SyncByteStream):
    """A body that never ends; counts what was pulled from it."""

    def __init__(self) -> None:
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        chunk = b"[" + b"0," * 32767
        while True:
            self.pulled += len(chunk)
            yield chunk


def test_an_endless_answer_is_read_only_to_the_cap_and_is_one_line(monkeypatch):
    monkeypatch.setattr(client_mod, "MAX_ANSWER", 1 << 20)
    body = _Endless()
    claims = {"Content-Length": str(10**12)}
    err = refused_answer(
        "pods", handler=lambda request: httpx.Response(200, headers=claims, stream=body)
    )
    assert "over the 1 MiB cap" in err.message and "\n" not in err.message
    assert body.pulled <= (1 << 20) + 65536  # stopped at the cap, not at the claim


@pytest.mark.parametrize(
    "text, why",
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than"),
        ('{"pods": [], "n": 1e400}', "too large for a float"),
        ('{"pods": [], "n": ' + "9" * 5000 + "}", "5000 digits"),
        ("\xff\xfe", "not UTF-8"),
    ],
)
def test_a_hostile_json_answer_is_one_line_never_a_traceback(text, why):
    data = text.encode("latin-1")
    err = refused_answer("pods", handler=lambda request: httpx.Response(200, content=data))
    assert "no usable JSON" in err.message and "\n" not in err.message
    assert why in err.message


@pytest.mark.parametrize("status, body", [(200, b""), (200, b" \r\n"), (204, b"")])
def test_an_empty_answer_is_named_as_empty_not_as_bad_json(status, body):
    """An answer with no body says so (fresh62's billing answer read "not valid JSON
    (Expecting value at line 1)", which is what an empty body gives, and did not say it)."""
    err = refused_answer("billing", handler=lambda request: httpx.Response(status, content=body))
    assert f"HTTP {status} with an empty body, no JSON" in err.message, err.message
    assert "Expecting value" not in err.message and err.exit_code == 3


def test_a_body_that_is_not_json_names_its_status_and_size():
    err = refused_answer("billing", handler=lambda request: httpx.Response(200, content=b"<html>"))
    assert (
        "no usable JSON (it is not valid JSON (Expecting value at line 1); HTTP 200, 6 bytes)"
        in (err.message)
    ), err.message


def test_an_answer_cut_short_is_retried_never_read_as_bad_json():
    """A body that ends before its Content-Length (the connection closed under it) is a
    transport failure, retried; only a whole body is judged as JSON."""
    whole = b'{"records": []}'
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(whole)
    url = serve_scripted((head + whole[:5], head + whole))
    clock = FakeClock()
    with RunPodClient("rpa_test", url, clock=clock) as client:
        assert client.pod_billing("a", "b") == []
    assert len(clock.sleeps) == 1  # one retry's wait


def test_a_hostile_error_body_still_names_the_status():
    deep = ("[" * 100_000).encode()
    err = refused_answer("pods", handler=lambda request: httpx.Response(400, content=deep))
    assert "400" in err.one_line() and "\n" not in err.one_line()


class _Trickle(httpx.SyncByteStream):
    """A body that never ends, one byte at a time, each within any per-read timeout."""

    def __init__(self) -> None:
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        while True:
            self.pulled += 1
            time.sleep(0.01)
            yield b" "


def test_a_trickled_answer_ends_at_the_body_deadline_not_the_cap():
    """A byte per read never trips httpx's per-read timeout: the whole body has a deadline
    (3x the request timeout), then the call is a transport failure, retried, then one line."""
    body = _Trickle()
    client = RunPodClient(
        "rpa_test",
        "https://runpod.test",
        timeout=0.1,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, stream=body)),
        policy=client_mod.CLEANUP_POLICY,
    )
    with client as c, pytest.raises(RunPodError) as err:
        c.list_pods()
    assert "too slowly" in err.value.message and "\n" not in err.value.message
    assert body.pulled < 1000  # stopped by the deadline, far below the 16 MiB cap
