"""A hostile S3 endpoint on 127.0.0.1: a raw-socket proxy in front of moto that relays every
request faithfully except the ones matching its rule, which it answers with one kind of
misbehaviour (endless or lying bodies, trickles, silence, interim answers, odd status lines,
listings that never end or that use another XML namespace).

Raw sockets, not http.server: the point is to send what no well-behaved framework would.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}
S3_NS = b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'

# What each mode does to a matching request (the rest are relayed):
MODES = (
    "http10-endless",  # HTTP/1.0 200, no length, bytes until the client hangs up
    "huge-length-close",  # Content-Length: 1500000000, 64 KiB, then close
    "endless-chunks",  # chunked, 64 KiB chunks for ever
    "endless-trailers",  # chunked: a 0 chunk, then trailer lines for ever
    "trickle-headers",  # the status line, then a header byte a second
    "trickle-body",  # the real headers, then a body byte a second
    "silent",  # reads the request, says nothing
    "fresh-token",  # every listing page truncated, with a fresh continuation token
    "interim",  # 100 Continue and 103 Early Hints before the real answer
    "nonascii-status",  # the status code in full-width digits (U+FF12, U+FF10)
    "ns-no-slash",  # listing namespace without its trailing slash
    "ns-none",  # listing without a namespace
    "too-large",  # 413 (an HTML page, as nginx sends) to a body over Rule.limit bytes
    "no-multipart",  # 400 Bad Request (not XML) to CreateMultipartUpload
    "padded-error",  # 200, then S3's keep-alive whitespace, then an <Error> body (not forwarded)
    "huge-head",  # HEAD: 200, Content-Length 2^62, modified in 2001 (an old, huge object)
)


@dataclass
class Rule:
    mode: str
    method: str = "*"
    contains: str | tuple[str, ...] = ""  # a tuple: any of them
    limit: int = 0  # too-large: the server's body limit
    fired: int = 0

    def matches(self, method: str, target: str, length: int = 0) -> bool:
        if self.mode == "too-large" and length <= self.limit:
            return False
        wanted = (self.contains,) if isinstance(self.contains, str) else self.contains
        return self.method in ("*", method) and any(part in target for part in wanted)


class _Server:
    """A listener on 127.0.0.1 (an ephemeral port) that serves each connection in a thread of
    its own until its ``with`` block ends: the frame of this module's and net_fronts' servers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()

    def __enter__(self: _ServerT) -> _ServerT:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


_ServerT = TypeVar("_ServerT", bound=_Server)


class HostileS3(_Server):
    """``with HostileS3(moto_endpoint) as hostile: hostile.rule = Rule(...)``; ``url``."""

    def __init__(self, upstream: str) -> None:
        super().__init__()
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.rule: Rule | None = None
        self.seen: list[tuple[str, str]] = []
        self.url = f"http://127.0.0.1:{self.port}"
        # each listing's first page (by its request, less the token), as upstream answered it
        self._first_pages: dict[str, tuple[int, str, list[tuple[str, str]], bytes]] = {}

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(120)
        reader = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                head = _read_head(reader)
                if head is None:
                    return
                method, target, headers = head
                length = int(headers.get("content-length", "0") or 0)
                body = reader.read(length) if length else b""
                self.seen.append((method, target))
                rule = self.rule
                if rule is not None and rule.matches(method, target, length):
                    rule.fired += 1
                    if not self._misbehave(rule.mode, conn, method, target, headers, body):
                        return
                else:
                    conn.sendall(self._relay(method, target, headers, body))
        except OSError:
            pass
        finally:
            reader.close()
            conn.close()

    def _relay(
        self, method: str, target: str, headers: dict[str, str], body: bytes, fix=None
    ) -> bytes:
        """The upstream's answer, re-framed with a Content-Length; ``fix`` edits the body."""
        try:
            status, reason, answer, data = self._upstream(method, target, headers, body)
        except OSError:  # as a real proxy does when its upstream fails (moto on a loaded machine)
            return _frame(502, "Bad Gateway", [], b"upstream failed", method)
        if fix is not None:
            data = fix(data)
        return _frame(status, reason, answer, data, method)

    def _first_page_again(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> bytes:
        """This listing's first page as upstream answered it (asked once per listing, then
        kept: the thousands of pages a client may ask for need no new listing), truncated,
        with a fresh continuation token each time. Kept by the request less its token: a
        listing of another prefix gets its own first page, as when each page was asked."""
        target = re.sub(r"&?continuation-token=[^&]*", "", target)
        if target not in self._first_pages:
            try:
                answer = self._upstream(method, target, headers, body)
            except OSError:  # as _relay answers when its upstream fails
                return _frame(502, "Bad Gateway", [], b"upstream failed", method)
            if answer[0] != 200:
                return _frame(*answer, method)
            self._first_pages[target] = answer
        status, reason, answer, data = self._first_pages[target]
        return _frame(status, reason, answer, _fresh_token(data), method)

    def _upstream(self, method, target, headers, body):  # type: ignore[no-untyped-def]
        up = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            sent = {k: v for k, v in headers.items() if k not in HOP}
            up.request(method, target, body or None, sent)
            resp = up.getresponse()
            data = resp.read()
            answer = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
            return resp.status, resp.reason, answer, data
        finally:
            up.close()

    def _misbehave(self, mode, conn, method, target, headers, body) -> bool:  # type: ignore[no-untyped-def]
        """Answer one matching request; True when the connection may serve the next."""
        if mode == "http10-endless":
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
            _pour(conn, b"x" * 65536)
            return False
        if mode == "huge-length-close":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1500000000\r\n\r\n" + b"x" * 65536)
            return False
        if mode == "endless-chunks":
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            _pour(conn, b"10000\r\n" + b"x" * 65536 + b"\r\n")
            return False
        if mode == "endless-trailers":
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n")
            _pour(conn, b"X-Trailer: more\r\n" * 1000)
            return False
        if mode == "trickle-headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            _trickle(conn, b"X-Slow: " + b"y" * 100_000, self._stop)
            return False
        if mode == "trickle-body":
            status, reason, answer, data = self._upstream(method, target, headers, body)
            framed = _frame(status, reason, answer, data, method)
            split = framed.index(b"\r\n\r\n") + 4
            conn.sendall(framed[:split])
            _trickle(conn, framed[split:], self._stop)
            return False
        if mode == "silent":
            self._stop.wait(600)
            return False
        if mode == "interim":
            conn.sendall(
                b"HTTP/1.1 100 Continue\r\n\r\n"
                b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            )
            conn.sendall(self._relay(method, target, headers, body))
            return True
        if mode == "nonascii-status":
            conn.sendall("HTTP/1.1 \uff12\uff10\uff10 OK\r\nContent-Length: 0\r\n\r\n".encode())
            return False
        if mode == "fresh-token":  # upstream's first page again, whatever token came
            conn.sendall(self._first_page_again(method, target, headers, body))
            return True
        if mode == "ns-no-slash":
            fix = lambda data: data.replace(S3_NS, S3_NS.replace(b'01/"', b'01"'))  # noqa: E731
            conn.sendall(self._relay(method, target, headers, body, fix=fix))
            return True
        if mode == "ns-none":
            fix = lambda data: data.replace(b" " + S3_NS, b"")  # noqa: E731
            conn.sendall(self._relay(method, target, headers, body, fix=fix))
            return True
        if mode == "too-large":
            page = b"<html><body><h1>413 Request Entity Too Large</h1></body></html>"
            conn.sendall(_frame(413, "Request Entity Too Large", [], page, method))
            return True
        if mode == "no-multipart":
            conn.sendall(_frame(400, "Bad Request", [], b"Bad Request", method))
            return True
        if mode == "huge-head":
            answer = [("Content-Length", str(1 << 62)), ("ETag", '"x"')]
            answer.append(("Last-Modified", "Mon, 01 Jan 2001 00:00:00 GMT"))
            conn.sendall(_frame(200, "OK", answer, b"", "HEAD"))
            return True
        if mode == "padded-error":  # as S3 answers a slow CompleteMultipartUpload that failed
            body = b'<?xml version="1.0" encoding="UTF-8"?>\n' + b" " * 1024
            body += b"<Error><Code>InternalError</Code><Message>try again</Message></Error>"
            conn.sendall(_frame(200, "OK", [("Content-Type", "application/xml")], body, method))
            return True
        raise ValueError(mode)


def _read_head(reader) -> tuple[str, str, dict[str, str]] | None:  # type: ignore[no-untyped-def]
    line = reader.readline(65537)
    if not line:
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        line = reader.readline(65537)
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, target, headers


def _frame(status, reason, answer, data: bytes, method: str) -> bytes:  # type: ignore[no-untyped-def]
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{k}: {v}" for k, v in answer if k.lower() != "content-length"]
    if method != "HEAD":
        lines.append(f"Content-Length: {len(data)}")
    else:
        lines += [f"{k}: {v}" for k, v in answer if k.lower() == "content-length"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if method == "HEAD" else data)


def _pour(conn: socket.socket, piece: bytes) -> None:
    """Send ``piece`` again and again until the client hangs up (or 10 minutes pass)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        conn.sendall(piece)


def _trickle(conn: socket.socket, data: bytes, stop: threading.Event) -> None:
    for i in range(len(data)):
        conn.sendall(data[i : i + 1])
        if stop.wait(1.0):
            return


def _fresh_token(data: bytes) -> bytes:
    token = uuid.uuid4().hex.encode()
    data = re.sub(rb"<IsTruncated>false</IsTruncated>", b"<IsTruncated>true</IsTruncated>", data)
    data = re.sub(rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"", data)
    return data.replace(
        b"</ListBucketResult>",
        b"<NextContinuationToken>" + token + b"</NextContinuationToken></ListBucketResult>",
    )


# ----- running the CLI with its peak memory measured ----------------------------------------

_MEASURED = (
    "import sys\n"
    "from gpuci.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    # VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
    "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
    "print('peak-rss-kib', peak, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


@dataclass
class Run:
    code: int
    output: str
    peak_kib: int


def run_measured(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240) -> Run:
    """``python -m gpuci ARGS`` in a fresh interpreter; its exit code, output and peak RSS."""
    from gpuci_testing import run_python

    done = run_python("-c", _MEASURED, *args, env=env, cwd=cwd, timeout=timeout)
    err, _, peak = done.stderr.rpartition("peak-rss-kib")
    return Run(done.returncode, done.stdout + err, int(peak.split()[0]) if peak else -1)


def one_error_line(run: Run, code: int, *words: str, peak_kib: int | None = None) -> None:
    """``run`` ended with exit ``code``, no traceback, and exactly one line naming an error,
    holding each of ``words``: what a hostile answer or a broken setup must come down to.
    With ``peak_kib``, its measured peak memory stayed under that bound too."""
    assert run.code == code, run.output
    assert "Traceback" not in run.output and "internal error" not in run.output, run.output
    errors = [line for line in run.output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, run.output
    for word in words:
        assert word in errors[0], run.output
    if peak_kib is not None:
        assert 0 < run.peak_kib < peak_kib, f"{run.peak_kib} KiB"


def s3_cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``python -m gpuci`` run against a local S3 front: fake credentials,
    no runner-local tier, its own journal, two attempts, this checkout's ``src``, and none of
    the machine's proxy or CA settings (each test sets the ones it is about in ``extra``)."""
    from gpuci_testing import REPO, clean_env
    from moto_s3 import FAKE_S3_CREDENTIALS

    env = clean_env(
        **FAKE_S3_CREDENTIALS,
        HOME=str(tmp_path / "home"),
        GPUCI_LOCAL_CACHE="off",
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        AWS_MAX_ATTEMPTS="2",
        PYTHONPATH=str(REPO / "src"),
    )
    for name in list(env):
        if name.lower().endswith("_proxy") or name in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
            del env[name]
    env.update(extra)
    return env


def run_s3(
    sub: str, bucket: str, endpoint: str, env: dict[str, str], *args: str, timeout: float = 240
) -> Run:
    """``python -m gpuci cache-weights SUB`` on the store ``s3://BUCKET/c`` at ``endpoint``,
    with ``args``: :func:`run_measured`."""
    from gpuci_testing import REPO

    store = ["--store", f"s3://{bucket}/c", "--endpoint-url", endpoint]
    return run_measured(["cache-weights", sub, *store, *args], env, REPO, timeout)


def hostile_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """:func:`s3_cli_env` with the 2 s time limit the hostile-store tests run under (``extra``
    may set another)."""
    return s3_cli_env(tmp_path, **{"GPUCI_S3_TIMEOUT": "2", **extra})


def fake_s3_client(endpoint: str):  # type: ignore[no-untyped-def]
    """A boto3 S3 client for ``endpoint`` with the fake credentials, whatever the environment
    holds."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret-key",
    )


def new_s3_bucket(endpoint: str, prefix: str) -> str:
    """Create a fresh bucket named ``prefix`` plus random hex on ``endpoint``; returns its name."""
    bucket = prefix + os.urandom(4).hex()
    fake_s3_client(endpoint).create_bucket(Bucket=bucket)
    return bucket


def save_tree(endpoint: str, tmp: Path, bucket_prefix: str, size: int, env: dict[str, str]):
    """A fresh bucket holding a small file and a ``size``-byte one saved under key ``k-1``
    through the CLI: (bucket, source tree)."""
    bucket = new_s3_bucket(endpoint, bucket_prefix)
    src = tmp / "src"
    src.mkdir()
    (src / "small.txt").write_bytes(b"small file\n")
    (src / "w.bin").write_bytes(os.urandom(size))
    done = run_s3("save", bucket, endpoint, env, "--key", "k-1", "--path", str(src))
    assert done.code == 0, done.output
    return bucket, src
