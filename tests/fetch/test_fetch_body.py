"""client.Body: a plain Content-Length body read straight from its connection (no h11
copies), with the same bounds and errors as httpx's iter_raw, against a real server."""

from __future__ import annotations

import hashlib
import os

import httpx
import pytest
from fetch_server import Fault, FaultyServer

from gpuci.fetch import FetchPolicy, fetch_file
from gpuci.fetch._client import Body, new_client

BIG = os.urandom(5 << 20)  # several 1 MiB reads past what h11 buffers with the headers


def _get(client: httpx.Client, url: str, timeout: float = 5.0) -> httpx.Response:
    request = client.build_request(
        "GET", url, headers={"Accept-Encoding": "identity"}, timeout=timeout
    )
    return client.send(request, stream=True)


@pytest.fixture
def big_server():
    with FaultyServer() as srv:
        srv.add("/big", BIG)
        yield srv


def test_a_plain_body_is_read_from_the_connection_exactly(big_server):
    with new_client(FetchPolicy()) as client:
        resp = _get(client, big_server.url("/big"))
        try:
            body = Body(resp)
            assert body._direct() is not None  # HTTP/1.1, Content-Length, a network stream
            data = b"".join(body.chunks())
        finally:
            resp.close()
        assert data == BIG and body.received == len(BIG)
        # the connection is closed, not reused in a state h11 did not see end: a next
        # request on the same client still gets the right bytes
        again = client.get(big_server.url("/big"), headers={"Accept-Encoding": "identity"})
        assert again.content == BIG


def test_a_connection_cut_short_is_named_as_h11_names_it(big_server):
    big_server.faults("/big", Fault(drop_after=3 << 20))
    with new_client(FetchPolicy()) as client:
        resp = _get(client, big_server.url("/big"))
        body = Body(resp)
        with pytest.raises(httpx.RemoteProtocolError, match="received 3145728 bytes"):
            for _ in body.chunks():
                pass
        resp.close()
        assert body.received == 3 << 20


def test_a_stall_is_a_read_timeout(big_server):
    big_server.faults("/big", Fault(stall=3.0, stall_after=2 << 20))
    with new_client(FetchPolicy()) as client:
        resp = _get(client, big_server.url("/big"), timeout=0.3)
        with pytest.raises(httpx.ReadTimeout):
            for _ in Body(resp).chunks():
                pass
        resp.close()


def test_a_body_without_a_network_stream_goes_through_iter_raw():
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, content=iter([b"x" * 1000]))
    )
    with httpx.Client(transport=transport) as client, client.stream("GET", "http://t/") as resp:
        body = Body(resp)
        assert body._direct() is None
        assert b"".join(body.chunks()) == b"x" * 1000 and body.received == 1000


def test_a_cut_then_a_stall_on_the_direct_path_still_resume_to_the_right_bytes(
    big_server, tmp_path
):
    """The retry policy knows the direct path's errors: a cut (RemoteProtocolError) and a
    stall (ReadTimeout) are both retried with Range, and the file verifies."""
    big_server.faults("/big", Fault(drop_after=2 << 20), Fault(stall=600, stall_after=1 << 20))
    policy = FetchPolicy(  # a read timeout past a busy machine's pauses, not the stall's
        attempts=4, timeout=2, deadline=60, max_wait=0.05, initial_wait=0.01, connections=1
    )
    res = fetch_file(
        big_server.url("/big"),
        tmp_path / "out.bin",
        hashlib.sha256(BIG).hexdigest(),
        policy=policy,
    )
    assert (tmp_path / "out.bin").read_bytes() == BIG
    assert res.attempts == 3 and res.resumed_bytes >= 3 << 20
