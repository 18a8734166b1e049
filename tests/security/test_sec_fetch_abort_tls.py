"""An abort never turns a TLS connection's queued ciphertext into download bytes (review B, 1).

``httpclients._shut`` (a :class:`~gpuci.httpclients.Scope`'s abort when a sibling segment
fails for good, or the client's on Ctrl-C) called ``SSLSocket.shutdown``, which drops the TLS
object: a read after it returned the ciphertext still queued in the socket, and the first
answer's body (``fetch._client.Body``, reading through ``exact_stream``, which skipped the
abort checks) yielded it as body bytes, written into the partial a resumed run went on from.

Staged without sleeps: the server sends its headers and the first 1000 bytes, waits until the
client took them, sends more, and the client waits until that is queued in its socket before
it aborts.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpcore
import httpx
import pytest

from gpuci import httpclients
from gpuci.fetch._client import Body
from gpuci_testing import self_signed_cert

FIRST = 1000
BODY = bytes(range(256)) * 1024  # 256 KiB announced; FIRST + QUEUED of it ever sent
QUEUED = 32 * 1024  # fits the loopback socket's buffers: the server's sendall returns
WAIT = 30  # seconds; each wait below ends as soon as its event happens


@dataclass
class _Staged:
    """One TLS exchange, stopped with bytes queued unread in the client's socket."""

    client: httpx.Client
    scope: httpclients.Scope
    resp: httpx.Response
    chunks: Iterator[bytes]
    got: bytearray


@contextmanager
def _tls_server(crt: object, key: object, first_taken: threading.Event) -> Iterator[tuple]:
    """A TLS server on 127.0.0.1 for one request: headers, FIRST bytes, then (once the client
    took them) QUEUED more; it holds the connection open until the test ends."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(crt, key)
    listener = socket.create_server(("127.0.0.1", 0))
    sent, done = threading.Event(), threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            head = b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: "v1"\r\n\r\n' % len(BODY)
            tls.sendall(head + BODY[:FIRST])
            first_taken.wait(WAIT)
            tls.sendall(BODY[FIRST : FIRST + QUEUED])
            sent.set()
            done.wait(WAIT)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], sent
    finally:
        done.set()
        thread.join(WAIT)
        listener.close()


@pytest.fixture
def staged(tmp_path, monkeypatch) -> Iterator[_Staged]:
    crt, key = self_signed_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(crt))
    first_taken = threading.Event()
    with _tls_server(crt, key, first_taken) as (port, sent):
        client = httpclients.new_client(timeout=WAIT, agent="test", read_bytes=1 << 20)
        scope = httpclients.Scope()
        try:
            with httpclients.deadline(None, scope):  # the request is the scope's
                url = f"https://127.0.0.1:{port}/f"
                request = client.build_request("GET", url, headers={"Accept-Encoding": "identity"})
                resp = client.send(request, stream=True)
            # read outside the scope's context, as the first answer's worker thread does
            chunks = Body(resp).chunks()
            got = bytearray(next(chunks))
            assert got == BODY[:FIRST]
            first_taken.set()
            assert sent.wait(WAIT)
            sock = resp.extensions["network_stream"].get_extra_info("socket")
            assert select.select([sock], [], [], WAIT)[0], "the server's bytes never arrived"
            yield _Staged(client, scope, resp, chunks, got)
        finally:
            client.close()


ABORTS: dict[str, Callable[[_Staged], None]] = {
    "a sibling segment failed (Scope.abort)": lambda s: s.scope.abort(),
    "Ctrl-C (the client's abort)": lambda s: httpclients.abort(s.client),
}


@pytest.mark.parametrize("abort", ABORTS.values(), ids=list(ABORTS))
def test_the_body_yields_nothing_read_after_an_abort(staged, abort):
    abort(staged)
    ended: BaseException | None = None
    try:
        for chunk in staged.chunks:  # before the fix: the queued ciphertext, as body bytes
            staged.got += chunk
    except BaseException as exc:  # Aborted (a BaseException, as Ctrl-C's own)
        ended = exc
    assert staged.got == BODY[:FIRST], "bytes read after the abort were yielded as the body"
    assert isinstance(ended, httpclients.Aborted), ended


@pytest.mark.parametrize("abort", ABORTS.values(), ids=list(ABORTS))
def test_a_shut_tls_connection_never_reads_its_ciphertext(staged, abort):
    """Below every check: the connection itself, once shut, returns the server's own bytes
    (decrypted), an end or an error, never the ciphertext that was still queued."""
    abort(staged)
    raw = staged.resp.extensions["network_stream"].raw
    try:
        data = raw.read(len(BODY), WAIT)
    except (httpcore.NetworkError, OSError):
        data = b""
    assert data == BODY[FIRST : FIRST + len(data)], "ciphertext read as the server's bytes"
