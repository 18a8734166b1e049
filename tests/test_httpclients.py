"""gpuci.httpclients: one policy for every httpx client, and no process-wide patch."""

from __future__ import annotations

import hashlib
import select
import shutil
import socket
import ssl
import threading
from pathlib import Path

import httpx
import pytest
from httpcore._sync.http11 import HTTP11Connection

from gpuci import httpclients
from gpuci.fetch import FetchPolicy, fetch_file
from gpuci.fetch._client import new_client as download_client
from gpuci_testing import self_signed_cert
from loopback_http import JsonAPIHandler, LoopbackHTTPServer

BODY = b"x" * 300_000


class _Handler(JsonAPIHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path in ("/away", "/no-idna"):
            self.send_response(302)
            self.send_header("Location", "/body" if self.path == "/away" else "http://xn--/")
            self.send_header("Set-Cookie", "session=1")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("X-Agent", self.headers.get("User-Agent", ""))
        self.end_headers()
        self.wfile.write(BODY)


@pytest.fixture
def server():
    with LoopbackHTTPServer(_Handler) as srv:
        yield f"http://127.0.0.1:{srv.port}"


def test_a_download_client_leaves_httpcores_class_constant_alone(server):
    """The read size is the download client's own: before, creating one raised httpcore's
    class constant to 1 MiB for every httpx client in the process."""
    before = HTTP11Connection.READ_NUM_BYTES
    with download_client(FetchPolicy()) as client:
        resp = client.get(f"{server}/body")
        assert resp.content == BODY
        stream = resp.extensions["network_stream"]
        assert stream.size == 1 << 20  # this client's connections read 1 MiB at a time
    assert HTTP11Connection.READ_NUM_BYTES == before == 64 * 1024


def test_every_client_reads_at_httpcores_size_through_the_streams_a_deadline_bounds(server):
    """No client is left outside :func:`httpclients.deadline`: one made without ``read_bytes``
    reads httpcore's own 64 KiB through the same sized streams (a forge or RunPod client that
    forgot to ask had no deadline on its headers)."""
    with httpclients.new_client(timeout=5) as client:
        resp = client.get(f"{server}/body")
        stream = resp.extensions["network_stream"]
        assert isinstance(stream, httpclients._SizedStream) and stream.size == 1 << 16


def test_a_sized_stream_asks_for_its_size_and_exact_readers_exactly_theirs():
    asked: list[int] = []

    class Raw:
        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            asked.append(max_bytes)
            return b""

    raw = Raw()
    sized = httpclients._SizedStream(raw, 1 << 20)
    sized.read(64 * 1024)  # httpcore's read
    sized.read(2 << 20)  # a larger ask stays as asked
    assert asked == [1 << 20, 2 << 20]
    httpclients.exact_stream(sized).read(100)  # exactly what it asks, through the same checks
    assert asked[-1] == 100
    assert httpclients.exact_stream(raw) is raw  # not ours: itself


@pytest.mark.parametrize("aborted", ["client", "scope"])
def test_an_exact_read_woken_by_an_abort_returns_no_bytes(aborted):
    """What a read returns once the client or the scope holding its connection was aborted
    is not the server's (review B, 1): :class:`Aborted`, on a reader's thread with no scope of
    its own too (the first answer's worker)."""
    sized = httpclients._SizedStream(None, 1 << 20)
    scope = sized.scope = httpclients.Scope()
    gate = sized.gate if aborted == "client" else scope

    class Raw:
        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            gate.abort()  # while it waited
            return b"\x17\x03\x03 ciphertext"

        def get_extra_info(self, info: str) -> None:
            return None

    sized.raw = Raw()
    with pytest.raises(httpclients.Aborted):
        httpclients.exact_stream(sized).read(100)


def test_the_policy_no_redirects_no_cookies_one_user_agent(server):
    with httpclients.new_client(timeout=5, agent="probe") as client:
        away = client.get(f"{server}/away")
        assert away.status_code == 302  # not followed
        assert not client.cookies  # not kept
        got = client.get(f"{server}/body")
        assert got.headers["X-Agent"] == f"gpu-ci/{httpclients.__version__} probe"
        assert client.timeout.read == 5


def test_a_redirect_to_a_host_that_is_no_idna_name_is_answered_as_any_other(server):
    """httpx builds the redirect it will not follow, and ``Location: http://xn--/`` made it
    raise idna's error out of ``send`` (review B, 4): the 302 now comes back, its Location
    on another origin as far as :func:`httpclients.origin` tells."""
    with httpclients.new_client(timeout=5) as client:
        away = client.get(f"{server}/no-idna")
    assert away.status_code == 302 and away.headers["Location"] == "http://xn--/"
    assert httpclients.origin(away.url.join(away.headers["Location"])) != httpclients.origin(server)


def test_ssl_cert_file_is_honoured_for_sized_connections_too(tmp_path, monkeypatch):
    """TLS goes through the sized stream's start_tls, and SSL_CERT_FILE names the CA."""
    crt, key = self_signed_cert(tmp_path)
    srv = LoopbackHTTPServer(_Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    httpd = srv._httpd
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    url = f"https://127.0.0.1:{srv.port}/body"
    with srv:
        with httpclients.new_client(timeout=5) as client, pytest.raises(httpx.ConnectError):
            client.get(url)  # certifi's bundle does not know this server
        monkeypatch.setenv("SSL_CERT_FILE", str(crt))
        with httpclients.new_client(timeout=5, read_bytes=1 << 20) as client:
            resp = client.get(url)
            assert resp.content == BODY
            assert isinstance(resp.extensions["network_stream"], httpclients._SizedStream)


def test_the_tls_context_is_built_once_per_setting(monkeypatch, tmp_path):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first = httpclients.tls_context()
    results: list[ssl.SSLContext | bool] = []
    threads = [
        threading.Thread(target=lambda: results.append(httpclients.tls_context())) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is first for r in results)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    assert httpclients.tls_context() is not first


def test_proxies_from_the_environment_read_in_the_clients_size_too(monkeypatch):
    """HTTPS_PROXY (trust_env) makes a transport per proxy: each reads as its client does."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    with httpclients.new_client(timeout=5, read_bytes=1 << 20) as client:
        proxied = [t for t in client._mounts.values() if t is not None]
        assert proxied, "the environment's proxy is used"
        for transport in proxied:
            backend = transport._pool._network_backend  # type: ignore[attr-defined]
            assert isinstance(backend, httpclients._SizedBackend) and backend.size == 1 << 20


def test_a_download_through_a_corporate_proxy_and_private_ca(tmp_path, monkeypatch):
    """The conventions users already set, end to end: HTTPS_PROXY tunnels to a host only the
    proxy can resolve, SSL_CERT_FILE names the private CA of its TLS front, and the body still
    arrives whole through the sized stream inside the tunnel."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test CA")
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "security"))
    from net_fronts import ForwardProxy, TLSFront, make_ca

    name = "files-gpuci.invalid"  # resolves nowhere but in the proxy
    ca, cert, key = make_ca(tmp_path / "ca", (name,))
    for var in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with (
        LoopbackHTTPServer(_Handler) as origin,
        TLSFront(("127.0.0.1", origin.port), cert, key) as front,
        ForwardProxy({name: "127.0.0.1"}) as proxy,
    ):
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        url = f"https://{name}:{front.port}/body"
        result = fetch_file(url, tmp_path / "out.bin", hashlib.sha256(BODY).hexdigest())
    assert (tmp_path / "out.bin").read_bytes() == BODY and result.verified
    assert f"CONNECT {name}:{front.port}" in proxy.seen


def test_a_scopes_abort_shuts_its_own_requests_and_leaves_the_clients_others():
    """Two downloads share a client, each request held without an answer: aborting one's
    :class:`httpclients.Scope` closes its connection at once (its thread ends), while the
    other's stays open, and the client is not aborted."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/held"
    client = download_client(FetchPolicy(timeout=600))
    scopes = [httpclients.Scope(), httpclients.Scope()]
    ended: list[BaseException] = []

    def ask(scope: httpclients.Scope) -> None:
        try:
            with httpclients.deadline(None, scope):
                client.get(url)
        except BaseException as exc:  # Aborted, or the shut connection's read error
            ended.append(exc)

    threads = [threading.Thread(target=ask, args=(s,), daemon=True) for s in scopes]
    held = []
    for thread in threads:  # one at a time: each accepted connection is that thread's
        thread.start()
        conn, _ = listener.accept()
        conn.recv(65536)  # its request: it now waits for headers
        held.append(conn)
    try:
        scopes[0].abort()
        threads[0].join(60)
        assert not threads[0].is_alive() and len(ended) == 1
        held[0].settimeout(60)
        assert held[0].recv(1) == b""  # the aborted scope's connection: closed
        assert select.select([held[1]], [], [], 0)[0] == []  # the other's: still open
        assert threads[1].is_alive() and not httpclients.stopped(client).is_set()
    finally:
        httpclients.abort(client)
        threads[1].join(60)
        client.close()
        for conn in (*held, listener):
            conn.close()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h/x", ("http", "h", 80)),
        ("HTTPS://Example.COM:443/x", ("https", "example.com", 443)),
        ("https://h:8443/x", ("https", "h", 8443)),
        ("http://[::1]/x", ("http", "::1", 80)),
        ("http://[::1]:8080/x", ("http", "::1", 8080)),
        ("http://user:pass@h/x?q=1", ("http", "h", 80)),
        ("http://xn--/x", ("http", "xn--", 80)),  # no IDNA name: a host all the same
        ("https://B\u00fccher.de/", ("https", "xn--bcher-kva.de", 443)),  # as it is sent
        ("https://XN--BCHER-KVA.de/", ("https", "xn--bcher-kva.de", 443)),
    ],
)
def test_one_origin_rule_for_text_and_httpx_urls(url, expected):
    """retry-fetch's redirects (text) and the forges' and health checks' links (httpx.URL)
    decide where credentials may go by the same rule, which never raises on a URL httpx
    accepts (a server picks ``http://xn--/``: idna raised, review B, 4)."""
    assert httpclients.origin(url) == httpclients.origin(httpx.URL(url)) == expected
