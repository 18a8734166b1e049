"""The boto3-free control plane against a hostile S3 endpoint: listings and bodies it sends
are input. Each answer below ends in one line naming the endpoint (exit 3), never a hang, a
gigabyte held in memory or a key from outside the store's prefix."""

from __future__ import annotations

import os
import sys
from http.server import BaseHTTPRequestHandler

import pytest
from cache_testing import CREDS

from gpuci.cache._stores.s3.client import MAX_LISTING_PAGE, parse_listing
from gpuci.cache._stores.s3.store import S3Store
from gpuci.cache._stores.s3.transport import BadResponse
from gpuci.errors import StoreError
from gpuci_testing import wait_until
from loopback_http import LoopbackHTTPServer

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def _page(keys: list[str], token: str = "", encoded: bool = True) -> bytes:
    items = "".join(
        f"<Contents><Key>{k}</Key><Size>10</Size><LastModified>2026-11-30T10:00:00.000Z"
        "</LastModified><ETag>&quot;e&quot;</ETag></Contents>"
        for k in keys
    )
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
    tail = more if token else "<IsTruncated>false</IsTruncated>"
    kind = "<EncodingType>url</EncodingType>" if encoded else ""
    return f"<ListBucketResult {NS}>{kind}{items}{tail}</ListBucketResult>".encode()


class _Quiet(BaseHTTPRequestHandler):
    """The handlers below without their request log, so a failing test's output is its own."""

    def log_message(self, *args) -> None:
        pass


class _Hostile(_Quiet):
    protocol_version = "HTTP/1.1"
    answer = b""
    chunked = False

    def do_GET(self) -> None:
        body = type(self).answer
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        if type(self).chunked == "ok":  # a valid chunked answer, in two chunks and a trailer
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            half = len(body) // 2
            for part in (body[:half], body[half:]):
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: 1\r\n\r\n")
            return
        if type(self).chunked:  # one chunk claiming more than the page cap, then the bytes
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n" % (1 << 40))
            block = b"<a>" + b"x" * (1 << 20)
            for _ in range((MAX_LISTING_PAGE >> 20) + 4):
                try:
                    self.wfile.write(block)
                except OSError:
                    return
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _store(port: int) -> S3Store:
    env = {**CREDS, "AWS_MAX_ATTEMPTS": "1"}
    return S3Store(
        "bkt", "cache", endpoint_url=f"http://127.0.0.1:{port}", region=None, environ=env, mask=None
    )


@pytest.mark.parametrize(
    ("answer", "chunked", "says"),
    [
        (_page(["other/refs/default/k"]), False, "a key outside 'cache/refs/default/'"),
        (_page(["cache/refs/default/k"], token="same"), False, "repeats a continuation token"),
        (b"<ListBucketResult><Contents><Key>", False, "not valid XML"),
        (
            b'<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
            b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;">]>'
            b"<ListBucketResult><Contents><Key>&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;</Key>"
            b"<Size>x</Size></Contents></ListBucketResult>",
            False,
            "invalid response",
        ),
        (b"", True, "over 8 MiB"),
    ],
    ids=["outside-prefix", "token-loop", "bad-xml", "entities", "huge-page"],
)
def test_a_hostile_listing_is_one_line_naming_the_endpoint(answer, chunked, says):
    handler = type("H", (_Hostile,), {"answer": answer, "chunked": chunked})
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        with pytest.raises(StoreError) as caught:
            list(store.list("refs/default/"))
    message = caught.value.message
    assert f"127.0.0.1:{server.port}" in message and "invalid response" in message, message
    assert says in message, message
    assert "\n" not in message


def test_a_chunked_listing_is_decoded():
    answer = _page(["cache/refs/default/a%20b", "cache/refs/default/c"])
    handler = type("H", (_Hostile,), {"answer": answer, "chunked": "ok"})
    with LoopbackHTTPServer(handler) as server:
        got = list(_store(server.port).list("refs/default/"))
    assert [o.key for o in got] == ["refs/default/a b", "refs/default/c"]


def test_listing_keys_are_url_decoded_as_botocore_decodes_them():
    entries, token = parse_listing(_page(["cache/refs/default/a%20b+c%0A"], token="t/1"))
    assert [e.key for e in entries] == ["cache/refs/default/a b c\n"]  # unquote_plus, as boto3
    assert entries[0].size == 10 and entries[0].etag == '"e"' and token == "t/1"
    assert entries[0].modified == 1796032800.0
    plain, _ = parse_listing(_page(["cache/a%20b"], encoded=False))
    assert plain[0].key == "cache/a%20b"


class _ClosingHead(_Quiet):
    """Says ``Connection: close`` after a HEAD, then holds its end open (as Werkzeug, moto's
    server, does): a client that reuses the connection waits for an answer that never comes.
    It records what the client did with that connection next: closed it (``b""``) or sent
    another request on it."""

    protocol_version = "HTTP/1.1"
    after_head: list[bytes] = []

    def do_HEAD(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        self.connection.settimeout(60)  # a client that neither closes nor reuses: a hang guard
        type(self).after_head.append(self.connection.recv(1))

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("ETag", '"put"')
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_connection_the_server_closes_after_a_head_is_not_reused():
    _ClosingHead.after_head.clear()
    with LoopbackHTTPServer(_ClosingHead) as server:
        store = _store(server.port)
        assert store.head("pins/x.json") is None
        assert store.put("pins/x.json", b"{}") == '"put"'
        wait_until(lambda: _ClosingHead.after_head, 60, "the client closed the HEAD's connection")
        assert _ClosingHead.after_head == [b""]  # closed, and the PUT went on a new connection


class _NoLength(_Quiet):
    """HTTP/1.0 style: no Content-Length, the body ends when the server closes."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Type", "application/xml")
        self.end_headers()
        self.wfile.write(b"<Error><Code>NoSuchBucket</Code><Message>gone</Message></Error>")


def test_an_error_body_that_ends_with_the_connection_is_read():
    """Else its code is lost and a missing bucket reads as a missing key: a silent miss."""
    with LoopbackHTTPServer(_NoLength) as server:
        store = _store(server.port)
        with pytest.raises(StoreError, match="bucket 'bkt' does not exist"):
            store.get("refs/default/k")


# ----- XML as servers send it (issue 21) ------------------------------------------------------


@pytest.mark.parametrize(
    "ns",
    [NS, 'xmlns="http://s3.amazonaws.com/doc/2006-03-01"', 'xmlns="urn:other"', ""],
    ids=["s3", "no-trailing-slash", "another", "none"],
)
def test_a_listing_is_read_in_any_namespace(ns):
    page = _page(["c/refs/default/k"]).replace(NS.encode(), ns.encode())
    entries, token = parse_listing(page)
    assert [e.key for e in entries] == ["c/refs/default/k"] and token == ""


@pytest.mark.parametrize("drop", ["<Key>c/k</Key>", "<Size>10</Size>", "<LastModified>"])
def test_contents_that_cannot_be_read_are_refused_not_skipped(drop):
    page = _page(["c/k"])
    if drop == "<LastModified>":
        page = page.replace(b"2026-11-30T10:00:00.000Z", b"yesterday")
    else:
        page = page.replace(drop.encode(), b"")
    with pytest.raises(BadResponse, match="no readable Key, Size or LastModified"):
        parse_listing(page)


def test_a_page_that_is_not_a_listing_is_refused():
    with pytest.raises(BadResponse, match="not <ListBucketResult>"):
        parse_listing(b"<Error><Code>Oops</Code></Error>")


# ----- the network as botocore sees it ------------------------------------------------------


@pytest.mark.parametrize(
    "environ",
    [
        {"HTTP_PROXY": "http://up:1", "http_proxy": "http://low:2", "NO_PROXY": "a.example"},
        {"HTTPS_PROXY": "proxy:3128", "no_proxy": "*"},
        {"http_proxy": "", "HTTP_PROXY": "http://up:1"},
        {"REQUEST_METHOD": "GET", "HTTP_PROXY": "http://cgi:1"},
    ],
)
def test_proxies_are_read_as_urllib_reads_them(environ, monkeypatch):
    import urllib.request

    from gpuci.cache._stores.s3.network import environ_proxies

    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert environ_proxies(environ) == urllib.request.getproxies_environment()


@pytest.mark.parametrize(
    "url",
    [
        "http://minio.internal:9000/",
        "http://a.minio.internal/",
        "http://10.0.0.1:9000/",
        "http://10.0.0.2:9000/",
        "http://s3.example.com/",
        "https://s3.example.com/",
    ],
)
def test_no_proxy_bypasses_as_botocore_does(url, monkeypatch):
    """The proxy (and its credentials) the store uses for ``url`` is the one botocore itself
    picks from the same environment, asked of botocore, not written out by hand."""
    from urllib.parse import urlsplit

    from botocore.httpsession import ProxyConfiguration
    from botocore.utils import get_environ_proxies

    from gpuci.cache._stores.s3.network import route_for

    env = {"HTTP_PROXY": "http://u%40x:p@proxy:8080", "NO_PROXY": ".internal,10.0.0.1"}
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    botocore = ProxyConfiguration(proxies=get_environ_proxies(url))
    proxy = botocore.proxy_url_for(url)
    route = route_for(url, env)
    if proxy is None:
        assert route.proxy_host == "", route
        return
    parts = urlsplit(proxy)
    assert (route.proxy_host, route.proxy_port) == (parts.hostname, parts.port)
    assert dict(route.proxy_headers) == botocore.proxy_headers_for(proxy)


# ----- numbers a server sends (issue 33) -----------------------------------------------------


@pytest.mark.parametrize(
    "text", ["", " ", "5_0", "+5", "-1", "\u00b2", "\u0661\u0662", "1e3", "9" * 20]
)
def test_a_byte_count_is_ascii_digits_only(text):
    from gpuci.cache._stores.s3.transport import count

    with pytest.raises(ValueError):
        count(text)


@pytest.mark.parametrize(
    "text",
    [
        "bytes 0-9/\u00b2",
        "bytes 0-9/1\u00b2",
        "bytes \u0660-9/10",
        "bytes 9-0/10",
        "bytes 0-10/10",
        "items 0-9/10",
        "bytes 0-9",
        "bytes */10",
    ],
)
def test_a_content_range_is_read_strictly(text):
    from gpuci.cache._stores.s3.transport import content_range

    with pytest.raises(ValueError):
        content_range(text)


def test_a_content_range_is_read():
    from gpuci.cache._stores.s3.transport import content_range

    assert content_range("bytes 0-9/10") == (0, 9, 10)
    assert content_range(" bytes 5-9/* ") == (5, 9, None)


def test_a_listing_size_in_other_digits_is_refused():
    page = _page(["c/k"]).replace(b"<Size>10</Size>", "<Size>\u0661\u0660</Size>".encode())
    with pytest.raises(BadResponse, match="no readable Key, Size or LastModified"):
        parse_listing(page)


# ----- redirects (issue 33) ------------------------------------------------------------------


class _Redirecting(_Quiet):
    """Every answer a 301 to another host; with ``region``, naming the bucket's region."""

    protocol_version = "HTTP/1.1"
    region = ""
    scopes: list[str] = []

    def do_GET(self) -> None:
        type(self).scopes.append(self.headers.get("Authorization", "").split("/")[2])
        body = b"<Error><Code>PermanentRedirect</Code><Message>elsewhere</Message></Error>"
        self.send_response(301)
        self.send_header("Location", "http://evil.invalid/steal")
        if type(self).region:
            self.send_header("x-amz-bucket-region", type(self).region)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(
    ("region", "says"),
    [
        ("", "without naming a region"),
        ("eu-west-1", "is in region eu-west-1"),
        ("evil.invalid/x", "without naming a region"),
    ],
)
def test_a_redirect_is_signed_again_once_for_the_named_region_else_refused(region, says):
    handler = type("H", (_Redirecting,), {"region": region, "scopes": []})
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        with pytest.raises(StoreError) as caught:
            store.get("refs/default/k")
    message = caught.value.message
    assert says in message and "\n" not in message, message
    assert "evil.invalid/x" not in message
    # The same endpoint, asked again only when a region was named: signed for it.
    assert handler.scopes == (
        ["us-east-1", "eu-west-1"] if region == "eu-west-1" else ["us-east-1"]
    )


def test_a_redirect_on_aws_goes_to_that_regions_host_for_the_bucket():
    from gpuci.cache._stores.s3.signer import Address

    here = Address.of("b", "", "us-east-1")
    assert here.moved("b", "eu-west-1") == Address.of("b", "", "eu-west-1")
    assert here.moved("b", "eu-west-1").base_url == "https://b.s3.eu-west-1.amazonaws.com"
    assert here.moved("b", "evil.com") is None
    custom = Address.of("b", "http://minio:9000", "us-east-1")
    assert custom.moved("b", "garage").base_url == "http://minio:9000/b"
    assert custom.moved("b", "a b") is None


# ----- a touch over CopyObject's 5 GiB (issue 33: on the one client, no boto3) ---------------


class _BigObject(_Quiet):
    """An object of 6 GiB: CopyObject refuses it, UploadPartCopy takes its ranges."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str, bytes]] = []

    def _answer(self, status: int, body: bytes = b"", length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _note(self) -> None:
        sent = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        copied = self.headers.get("x-amz-copy-source-range", "")
        if copied:  # S3 refuses x-amz-* headers it was not shown in the signature
            assert "x-amz-copy-source-range" in self.headers.get("Authorization", "")
        type(self).seen.append((self.command, self.path, copied, sent))

    def do_HEAD(self) -> None:
        self._note()
        self._answer(200, length=6 << 30)

    def do_PUT(self) -> None:
        self._note()
        if "partNumber=" in self.path:
            self._answer(200, b"<CopyPartResult><ETag>&quot;e&quot;</ETag></CopyPartResult>")
        else:
            self._answer(
                400, b"<Error><Code>InvalidRequest</Code><Message>too big</Message></Error>"
            )

    def do_POST(self) -> None:
        self._note()
        if "uploads" in self.path:
            self._answer(200, b"<InitiateMultipartUploadResult><UploadId>u1</UploadId>"
                         b"</InitiateMultipartUploadResult>")  # fmt: skip
        else:
            self._answer(200, b"<CompleteMultipartUploadResult/>")


def test_a_touch_over_5_gib_copies_in_parts_on_the_same_client():
    _BigObject.seen = []
    with LoopbackHTTPServer(_BigObject) as server:
        _store(server.port).touch("blobs/sha256/ab/x")
    ranges = [copied for _, _, copied, _ in _BigObject.seen if copied]
    gib = 1 << 30
    assert ranges == [f"bytes={i * gib}-{(i + 1) * gib - 1}" for i in range(6)]
    complete = [sent for method, path, _, sent in _BigObject.seen if "uploadId=u1" in path
                and method == "POST"]  # fmt: skip
    assert complete and complete[0].count(b'<ETag>"e"</ETag>') == 6


# ----- credentials from botocore's chain (issue 33) ------------------------------------------


def test_role_credentials_are_frozen_again_at_each_signing_and_each_secret_masked():
    """botocore's refreshable credentials change under the store: each request is signed with
    the ones current then, and every new secret is masked before it is used."""
    from types import SimpleNamespace

    from gpuci.cache._stores.s3.config import _Refreshing
    from gpuci.cache._stores.s3.signer import Address, Presigner

    keys = iter([("AKIA1", "secret-one", "token-one"), ("AKIA2", "secret-two", "token-two")])

    class Refreshable:
        def get_frozen_credentials(self):
            access, secret, token = next(keys)
            return SimpleNamespace(access_key=access, secret_key=secret, token=token)

    masked: list[str] = []
    signer = Presigner(
        Address.of("b", "http://h:1", "us-east-1"), _Refreshing(Refreshable(), masked.append, "")
    )
    first = signer.url("k", 60)
    second = signer.url("k", 60)
    assert "AKIA1%2F" in first and "token-one" in first
    assert "AKIA2%2F" in second and "token-two" in second
    assert {"secret-one", "token-one", "secret-two", "token-two"} <= set(masked)


def test_a_profile_with_credential_process_resolves_through_botocore(tmp_path):
    from gpuci.cache._stores.s3.config import resolve

    helper = tmp_path / "creds.py"
    helper.write_text(
        "import json\nprint(json.dumps({'Version': 1, 'AccessKeyId': 'AKIAPROC',"
        " 'SecretAccessKey': 'proc-secret', 'SessionToken': 'proc-token'}))\n"
    )
    config = tmp_path / "config"
    config.write_text(
        f"[profile lab]\nregion = eu-west-3\nendpoint_url = http://127.0.0.1:9\n"
        f"credential_process = {sys.executable} {helper}\n"
    )
    env = {
        "AWS_PROFILE": "lab",
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    masked: list[str] = []
    got = resolve("b", None, None, env, masked.append)
    assert got.creds().access_key == "AKIAPROC" and "proc-secret" in masked
    assert got.address.region == "eu-west-3"
    assert got.address.base_url == "http://127.0.0.1:9/b"
    assert got.endpoint_source == "endpoint_url of AWS profile 'lab'"
