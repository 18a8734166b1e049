"""What corporate networks put in front of an S3 store, on 127.0.0.1: a TLS front signed by a
private CA (made with ``openssl`` by the test) and a plain HTTP forward proxy that alone can
resolve the store's made-up host name.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import threading
from pathlib import Path

from hostile_s3 import HOP, _frame, _read_head, _Server


def make_ca(folder: Path, names: tuple[str, ...] = ("localhost",)) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a CA and a server certificate for ``names``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (
        folder / n for n in ("ca.key", "ca.pem", "s.key", "s.csr", "s.pem")
    )

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    new = ["req", "-newkey", "rsa:2048", "-nodes"]
    run(
        *new,
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=gpuci-test-ca",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    run(*new, "-subj", "/CN=" + names[0], "-keyout", str(key), "-out", str(csr))
    ext = folder / "ext.cnf"
    alt = ",".join([f"DNS:{n}" for n in names] + ["IP:127.0.0.1"])
    ext.write_text(f"subjectAltName={alt}\n")
    sign = ["x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key)]
    run(*sign, "-CAcreateserial", "-days", "2", "-out", str(cert), "-extfile", str(ext))
    return ca, cert, key


def _pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (a, b):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _splice_both(a: socket.socket, b: socket.socket) -> None:
    threading.Thread(target=_pipe, args=(a, b), daemon=True).start()
    threading.Thread(target=_pipe, args=(b, a), daemon=True).start()


class TLSFront(_Server):
    """Terminates TLS with ``cert``/``key`` and relays the bytes to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], cert: Path, key: Path) -> None:
        super().__init__()
        self.upstream = upstream
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            tls = self.context.wrap_socket(conn, server_side=True)
            tls.settimeout(None)
        except OSError:  # the client refused our certificate
            conn.close()
            return
        _splice_both(tls, socket.create_connection(self.upstream))


class ForwardProxy(_Server):
    """An HTTP/1.1 forward proxy: ``CONNECT`` tunnels and absolute-form requests, to hosts
    looked up in ``hosts`` only (name -> "127.0.0.1"); records what it was asked."""

    def __init__(self, hosts: dict[str, str]) -> None:
        super().__init__()
        self.hosts = hosts
        self.seen: list[str] = []
        self.url = f"http://127.0.0.1:{self.port}"

    def _address(self, authority: str) -> tuple[str, int]:
        host, _, port = authority.rpartition(":")
        return self.hosts[host], int(port)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(60)
        reader = conn.makefile("rb")
        tunnel = False
        try:
            while head := _read_head(reader):
                method, target, headers = head
                self.seen.append(f"{method} {target}")
                if method == "CONNECT":
                    upstream = socket.create_connection(self._address(target))
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    conn.settimeout(None)
                    tunnel = True  # the socket is the tunnel's now
                    _splice_both(conn, upstream)
                    return
                body = reader.read(int(headers.get("content-length", "0") or 0))
                rest = target.removeprefix("http://")
                authority, _, path = rest.partition("/")
                up = http.client.HTTPConnection(*self._address(authority), timeout=60)
                sent = {k: v for k, v in headers.items() if k not in HOP}
                up.request(method, "/" + path, body or None, sent)
                resp = up.getresponse()
                data = resp.read()
                answer = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
                up.close()
                conn.sendall(_frame(resp.status, resp.reason, answer, data, method))
        except (OSError, KeyError, ValueError):
            pass
        finally:
            reader.close()
            if not tunnel:
                conn.close()
