"""notify's webhook POST goes through the one client factory: no redirect followed, and only
the status is read, so an endless answer cannot hold the job."""

from __future__ import annotations

from gpuci.pods import _notify as notify
from loopback_http import JsonAPIHandler, LoopbackHTTPServer

SEEN: list[str] = []


class _Hook(JsonAPIHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        SEEN.append(f"{self.path} {self.headers.get('User-Agent')}")
        if self.path == "/moved":
            self.send_response(307)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(10 << 30))  # 10 GiB announced, none sent
        self.end_headers()
        self.wfile.flush()
        self.server.stop.wait(30)  # type: ignore[attr-defined]


def _send(url: str) -> tuple[int, list[str]]:
    warnings: list[str] = []
    target = notify.Target("webhook", url, "http://127.0.0.1")
    sent = notify.send_all([target], "s", "t", {}, lambda x: x, warnings.append)
    return sent, warnings


def test_only_the_status_is_read_and_redirects_are_not_followed(monkeypatch):
    monkeypatch.setattr(notify, "TIMEOUT_S", 2.0)  # before, the endless body ran into it
    srv = LoopbackHTTPServer(_Hook)
    srv._httpd.stop = srv.stop  # type: ignore[attr-defined]
    SEEN.clear()
    with srv:
        base = f"http://127.0.0.1:{srv.port}"
        assert _send(f"{base}/hook") == (1, [])
        sent, warnings = _send(f"{base}/moved")
    assert sent == 0 and "HTTP 307" in warnings[0]
    assert [s.split()[0] for s in SEEN] == ["/hook", "/moved"]  # /elsewhere never asked
    assert SEEN[0].split()[1].startswith("gpu-ci/")
