"""Local servers that receive notifications: an HTTP sink and a tiny SMTP server with STARTTLS.

The SMTP server speaks just enough of RFC 5321/3207/4954 for smtplib: EHLO, STARTTLS (with a
self-signed certificate the client is told to trust through SSL_CERT_FILE), AUTH PLAIN only
after TLS, MAIL, RCPT, DATA, QUIT. It records what it saw, including whether AUTH came in clear.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

from loopback_http import JsonAPIHandler, LoopbackHTTPServer


class HttpSink(LoopbackHTTPServer):
    """Records every POST (path, headers, JSON body); answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.posts: list[dict[str, Any]] = []
        sink = self

        class Handler(JsonAPIHandler):
            def do_POST(self) -> None:
                entry = {"path": self.path, "headers": dict(self.headers), "body": self._body()}
                sink.posts.append(entry)
                self._reply(sink.status, {})

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Mail:
    sender: str = ""
    recipients: list[str] = field(default_factory=list)
    data: str = ""
    auth: tuple[str, str] | None = None
    auth_over_tls: bool = False


class SmtpServer:
    def __init__(self, cert: str | None, key: str | None) -> None:
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER) if cert else None
        if self.tls is not None:
            self.tls.load_cert_chain(cert, key)
        self.mails: list[Mail] = []
        self.auth_in_clear = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        mail, secure = Mail(), False
        reader = conn.makefile("rb")

        def say(line: str) -> None:
            conn.sendall(line.encode() + b"\r\n")

        try:
            say("220 localhost ESMTP test")
            while True:
                raw = reader.readline()
                if not raw:
                    return
                line = raw.decode().rstrip("\r\n")
                verb = line[:4].upper()
                if verb in ("EHLO", "HELO"):
                    offers = ["250-localhost"]
                    if self.tls is not None and not secure:
                        offers.append("250-STARTTLS")
                    offers.append("250-AUTH PLAIN")
                    offers.append("250 8BITMIME")
                    for offer in offers:
                        say(offer)
                elif line.upper() == "STARTTLS" and self.tls is not None:
                    say("220 go ahead")
                    conn = self.tls.wrap_socket(conn, server_side=True)
                    reader, secure = conn.makefile("rb"), True
                elif line.upper().startswith("AUTH PLAIN"):
                    blob = line.split()[2] if len(line.split()) > 2 else ""
                    _, user, password = base64.b64decode(blob).decode().split("\0")
                    mail.auth, mail.auth_over_tls = (user, password), secure
                    self.auth_in_clear += not secure
                    say("235 ok")
                elif verb == "MAIL":
                    mail.sender = line.partition(":")[2].strip("<> ")
                    say("250 ok")
                elif verb == "RCPT":
                    mail.recipients.append(line.partition(":")[2].strip("<> "))
                    say("250 ok")
                elif verb == "DATA":
                    say("354 end with .")
                    lines = []
                    while (chunk := reader.readline().decode()) not in (".\r\n", ""):
                        lines.append(chunk)
                    mail.data = "".join(lines)
                    self.mails.append(mail)
                    mail = Mail(auth=mail.auth, auth_over_tls=mail.auth_over_tls)
                    say("250 queued")
                elif verb == "QUIT":
                    say("221 bye")
                    return
                else:
                    say("250 ok")
        except (OSError, ValueError):
            return
        finally:
            conn.close()

    def stop(self) -> None:
        # shutdown() wakes the thread blocked in accept(); close() alone does not, and the
        # socket would go on listening (and answering) on its port until a client came.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
