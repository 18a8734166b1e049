"""The skeleton every HTTP test server here shares: a threading server on 127.0.0.1 with an
ephemeral port, served from a daemon thread, started and stopped by ``with``.

Subclasses (tests/fetch/fetch_server.py's ``FaultyServer``, tests/security/hostile_http.py's
``HostileServer``) add what they serve and what they record; ``lock`` guards that record and
``stop`` is set at exit so handlers that stall or stream forever return promptly.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

_S = TypeVar("_S", bound="LoopbackHTTPServer")


class LoopbackHTTPServer:
    def __init__(
        self,
        handler: type[BaseHTTPRequestHandler],
        server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer,
    ) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self._httpd = server_class(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def __enter__(self: _S) -> _S:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class JsonAPIHandler(BaseHTTPRequestHandler):
    """A quiet handler for the fake JSON APIs (GitHub, GitLab): a JSON reply, a JSON body."""

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _reply(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        if code == 204:  # No Content: no body, no length
            self.send_response(204)
            self.end_headers()
            return
        data = body if isinstance(body, bytes) else json.dumps(body).encode()  # bytes: as is
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")


class RoutedAPIHandler(JsonAPIHandler):
    """A fake REST API (GitHub's, GitLab's): every method goes to ``_handle(method)``, and
    ``state`` is what its server records and serves (see :class:`StatefulAPIServer`)."""

    state: Any

    def _handle(self, method: str) -> None:
        raise NotImplementedError

    def _form_or_json(self) -> Any:
        """The body as the forges' clients send it: JSON, or a form (one value per field);
        None for JSON that does not parse."""
        from urllib.parse import parse_qs

        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if "json" in (self.headers.get("Content-Type") or ""):
            try:
                return json.loads(raw or b"{}")
            except ValueError:
                return None
        return {k: v[0] for k, v in parse_qs(raw.decode()).items()}

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _paged(
        self, items: list[Any], query: str, size: int, key: str = "", link: str | None = None
    ) -> None:
        """One page of ``items`` (``page`` and ``per_page`` from ``query``, at most ``size``),
        the next linked by an absolute ``Link: rel="next"`` as GitHub and GitLab do (or by
        ``link`` when given: a hostile next page); under ``key`` with ``total_count`` when
        given (GitHub's ``{"total_count", "runners"}``)."""
        from urllib.parse import parse_qs, urlencode, urlsplit

        asked = parse_qs(query)
        page = int(asked.get("page", ["1"])[0])
        size = min(int(asked.get("per_page", [str(size)])[0]), size)
        chunk = items[(page - 1) * size : page * size]
        headers = {}
        if link is None and page * size < len(items):  # the same query, the next page
            kept = {k: v[0] for k, v in asked.items() if k not in ("page", "per_page")}
            query = urlencode({**kept, "per_page": size, "page": page + 1})
            host = f"http://127.0.0.1:{self.server.server_address[1]}"
            link = f"{host}{urlsplit(self.path).path}?{query}"
        if link is not None:
            headers["Link"] = f'<{link}>; rel="next"'
        self._reply(200, {"total_count": len(items), key: chunk} if key else chunk, headers)


class StatefulAPIServer(LoopbackHTTPServer):
    """A server whose handlers share one ``state``, its own (two servers never share one)."""

    def __init__(self, handler: type[RoutedAPIHandler], state: Any) -> None:
        self.state = state
        super().__init__(type(handler.__name__, (handler,), {"state": state}))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"
