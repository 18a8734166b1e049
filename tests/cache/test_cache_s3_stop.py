"""A transfer's stop flag on the S3 store (Ctrl-C, or a task failed for good): the requests in
flight end at once, none is sent after, and no retry waits on (review H, findings 3 and 4).
Staged with a loopback server that holds its answer and counts requests; nothing is timed."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler

import pytest
from cache_testing import CREDS

from gpuci.cache._stores.s3.store import S3Store
from gpuci.errors import StoreError
from gpuci.retry import Interrupted, RetryPolicy
from loopback_http import LoopbackHTTPServer

HELD = 120.0  # how long the silent server holds an answer: far past any test's guard


class _Counting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list[str]
    arrived: threading.Event
    release: threading.Event

    def log_message(self, *args) -> None:
        pass


class _Silent(_Counting):
    """Reads each request and never answers it (until the test ends)."""

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        type(self).arrived.set()
        type(self).release.wait(HELD)


class _SlowDown(_Counting):
    """Answers every request 503 SlowDown: a retry follows each."""

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        body = b"<Error><Code>SlowDown</Code><Message>slow</Message></Error>"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _handler(base: type[_Counting]) -> type[_Counting]:
    attrs = {"requests": [], "arrived": threading.Event(), "release": threading.Event()}
    return type("H", (base,), attrs)


def _store(port: int) -> S3Store:
    env = {**CREDS, "AWS_MAX_ATTEMPTS": "5", "GPUCI_S3_TIMEOUT": "100"}
    url = f"http://127.0.0.1:{port}"
    return S3Store("bkt", "cache", endpoint_url=url, region=None, environ=env, mask=None)


def _in_thread(call) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


@pytest.mark.parametrize("what", ["get", "range"])
def test_the_stop_flag_ends_a_request_the_store_never_answers(what):
    handler = _handler(_Silent)
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        stop = store.stop_flag()
        if what == "get":
            thread, raised = _in_thread(lambda: store.get("refs/default/k"))
        else:
            thread, raised = _in_thread(lambda: store.open_range("blobs/sha256/ab", 0, 10))
        assert handler.arrived.wait(30), "no request"
        stop.set()
        thread.join(30)
        alive = thread.is_alive()
        handler.release.set()
    assert not alive, "the request waited out the store's timeout"
    assert len(raised) == 1 and isinstance(raised[0], Interrupted), raised
    assert len(handler.requests) == 1, handler.requests  # nothing sent after the stop


def test_a_retry_wait_ends_on_the_stop_flag_and_sends_nothing_after():
    handler = _handler(_SlowDown)
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        stop = store.stop_flag()
        store.on_throttle = stop.set  # a Ctrl-C right after the first SlowDown
        with pytest.raises(Interrupted):
            store.get("refs/default/k")
    assert len(handler.requests) == 1, handler.requests


def test_a_retry_wait_begun_under_a_superseded_flag_ends_when_the_store_is_stopped(monkeypatch):
    """A failed save's multipart aborts go out under a fresh flag (its own was set by the
    failure), and a request of the conditional-writes question may begin then and wait out a
    backoff on that flag, which nobody holds to set. The save's end stops the store with a
    newer flag (``_drop_question``): that wait ends too, where it slept out its backoff (up to
    20 s) while the failed save waited for it, and no attempt follows."""
    monkeypatch.setattr(RetryPolicy, "backoff", lambda _self, _attempt, _rand=None: HELD)
    handler = _handler(_SlowDown)
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        store.stop_flag().set()  # the save's flag, set by its failure
        store.stop_flag()  # the aborts' fresh flag, current as the question's request begins
        throttled = threading.Event()
        store.on_throttle = throttled.set
        thread, raised = _in_thread(lambda: store.get("refs/default/k"))
        assert throttled.wait(30), "no SlowDown heard"
        store.stop_flag().set()  # the save's end: the store stopped
        thread.join(30)  # a guard against a hang, not a timing: the wait is HELD seconds
        asleep = thread.is_alive()
    assert not asleep, "the retry wait slept out its backoff after the store was stopped"
    assert len(raised) == 1 and isinstance(raised[0], Interrupted), raised
    assert len(handler.requests) == 1, handler.requests


def test_a_second_ctrl_c_in_the_stop_still_ends_the_retry_waits(monkeypatch):
    """A second Ctrl-C landing in ``Stop.set`` while it ends the requests in flight (the
    watchdog's fire): the retry waits were woken only after that, so they slept out their
    backoff (up to 20 s) with the flag set. They are woken whatever the fire raises."""
    from gpuci.cache._stores.s3 import transport
    from gpuci_testing import wait_until

    monkeypatch.setattr(RetryPolicy, "backoff", lambda _self, _attempt, _rand=None: HELD)
    handler = _handler(_SlowDown)
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        stop = store.stop_flag()
        thread, raised = _in_thread(lambda: store.get("refs/default/k"))
        waiting = store.pool.woken._waiters  # the retry wait, once it has begun
        wait_until(lambda: waiting, what="the retry's wait")

        def interrupted(_owner: object) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(transport.WATCHDOG, "fire", interrupted)
        with pytest.raises(KeyboardInterrupt):
            stop.set()
        thread.join(30)  # a guard against a hang, not a timing: the wait is HELD seconds
        asleep = thread.is_alive()
    assert not asleep, "the retry wait slept out its backoff with the flag set"
    assert len(raised) == 1 and isinstance(raised[0], Interrupted), raised
    assert len(handler.requests) == 1, handler.requests


def test_a_fresh_flag_lets_the_store_work_again():
    handler = _handler(_SlowDown)
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        store.stop_flag().set()
        with pytest.raises(Interrupted):
            store.get("refs/default/k")
        assert handler.requests == []
        store.stop_flag()  # the next transfer (a restore's refetch after a full disk)
        store._rest.attempts = 1
        with pytest.raises(Exception) as caught:
            store.get("refs/default/k")
    assert not isinstance(caught.value, Interrupted)
    assert len(handler.requests) == 1


def _uploads_page(uploads: list[tuple[str, str, str]], next_marker: str = "") -> bytes:
    items = "".join(
        f"<Upload><Key>{key}</Key><UploadId>{upload_id}</UploadId><Initiated>{when}</Initiated>"
        "<Initiator><ID>x</ID></Initiator></Upload>"
        for key, upload_id, when in uploads
    )
    more = (
        f"<IsTruncated>true</IsTruncated><NextKeyMarker>{next_marker}</NextKeyMarker>"
        "<NextUploadIdMarker>u</NextUploadIdMarker>"
        if next_marker
        else "<IsTruncated>false</IsTruncated>"
    )
    ns = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
    return f"<ListMultipartUploadsResult {ns}>{more}{items}</ListMultipartUploadsResult>".encode()


class _Uploads(_Counting):
    """ListMultipartUploads: one page, truncated with the same markers every time (a server
    that would page for ever), holding an old, a young, a foreign and an unusable upload."""

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        old, young = "2020-01-01T00:00:00.000Z", "2999-01-01T00:00:00.000Z"
        body = _uploads_page(
            [
                ("cache/blobs/sha256/ab/old", "id-old_1.x~", old),
                ("cache/blobs/sha256/ab/young", "id-young", young),
                ("cache/other/old", "id-other", old),  # not gpu-ci's
                ("elsewhere/blobs/old", "id-outside", old),  # outside the store's prefix
                ("cache/blobs/sha256/ab/odd", "id with space", old),  # not an id: not sent
                ("cache/blobs/sha256/ab/undated", "id-undated", "yesterday"),
            ],
            next_marker="cache/blobs/sha256/ab/undated",
        )
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_open_uploads_are_those_under_blobs_older_than_the_grace_and_the_listing_ends():
    handler = _handler(_Uploads)
    with LoopbackHTTPServer(handler) as server:
        left = _store(server.port).leftovers(3600)
    assert [o.key for o in left] == ["blobs/sha256/ab/old?uploadId=id-old_1.x~"]
    assert len(handler.requests) == 2, handler.requests  # the repeated markers end it
    assert all("uploads" in r and "prefix=cache%2Fblobs%2F" in r for r in handler.requests)


class _RefusingStore:
    """A store whose every range fails for good (or is interrupted); it counts the stop flags
    it hands out."""

    url = "mem://refusing"
    local_disk = False

    def __init__(self, failure: BaseException) -> None:
        self.failure = failure
        self.flags: list[threading.Event] = []

    def stop_flag(self) -> threading.Event:
        self.flags.append(threading.Event())
        return self.flags[-1]

    def open_range(self, key: str, offset: int, length: int):
        raise self.failure


@pytest.mark.parametrize("failure", [StoreError("refused"), Interrupted("stopped")])
def test_a_failed_fetch_leaves_the_store_usable_an_interrupted_one_stopped(tmp_path, failure):
    """A restore words a failed download and may go on with its store (a fresh flag): a part
    that failed for good must not leave every later request refused. An interrupt does."""
    from gpuci.cache._format.manifest import Entry
    from gpuci.cache._transfer.download import Downloader

    store = _RefusingStore(failure)
    entry = Entry("file", 0, "w.bin", size=1 << 20, sha256="ab" * 32)
    down = Downloader(store, 2, on_bytes=lambda _n: None, attempts=1)  # type: ignore[arg-type]
    with pytest.raises(type(failure)):
        down.fetch([(entry, tmp_path / "w.bin")])
    assert store.flags[0].is_set()  # the failure stopped the transfer's requests
    assert len(store.flags) == (2 if isinstance(failure, Exception) else 1)


class _OneFailsOneStopped(_RefusingStore):
    """Blob ``aa...`` fails for good once blob ``bb...``'s GET is on its way; that GET ends as
    an S3 store's does once the failure set the transfer's flag: Interrupted."""

    def __init__(self) -> None:
        super().__init__(StoreError("refused"))
        self.second_in = threading.Event()

    def open_range(self, key: str, offset: int, length: int):
        if "/aa" in key:
            assert self.second_in.wait(30), "the other GET did not start"
            raise self.failure
        flag = self.flags[-1]
        self.second_in.set()
        assert flag.wait(30), "the failure did not stop the transfer"
        raise Interrupted("the store's requests were stopped")


def test_a_get_stopped_by_another_parts_failure_leaves_that_failure_the_restores(tmp_path):
    """The other GET's Interrupted (a BaseException) comes after the failure that set the flag:
    the fetch raises that failure (one line, exit 3), never the Interrupted (a traceback)."""
    from gpuci.cache._format.manifest import Entry
    from gpuci.cache._transfer.download import Downloader

    store = _OneFailsOneStopped()
    entries = [Entry("file", 0, f"{c}.bin", size=1 << 20, sha256=c * 64) for c in "ab"]
    down = Downloader(store, 2, on_bytes=lambda _n: None, attempts=1)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="refused"):
        down.fetch([(e, tmp_path / e.path) for e in entries])


class _SilentPut(_Counting):
    """Reads each PUT and never answers it (until the test ends)."""

    def do_PUT(self) -> None:
        type(self).requests.append(self.path)
        type(self).arrived.set()
        type(self).release.wait(HELD)


def test_a_transfer_stopped_beside_the_use_record_leaves_it_a_warning():
    """A restore records the key's use on a thread of its own, beside its transfer, on the same
    store. A part that failed for good stops the store's requests in flight, the record's too,
    and the restore may go on (a tier disk that filled: the rest fetched again with a fresh
    flag) and succeed: the record's end is its failure, a warning, never an Interrupted raised
    where the restore waits for it (a traceback and exit 1 after a restore that worked)."""
    from gpuci.cache._format import refs

    handler = _handler(_SilentPut)
    with LoopbackHTTPServer(handler) as server:
        store = _store(server.port)
        stop = store.stop_flag()  # the transfer's flag
        recording = refs.UseRecording(store, "default", "k")
        assert handler.arrived.wait(30), "no request"
        stop.set()  # a part failed for good (WorkPool.fail)
        store.stop_flag()  # the refetch's fresh flag
        try:
            unrecorded = recording.result()
        finally:
            handler.release.set()
    assert unrecorded and "stopped" in unrecorded, unrecorded


def _upload_listing(status: int, body: bytes) -> type[_Counting]:
    """A store that answers every GET (ListMultipartUploads) ``status`` with ``body``."""

    class Answer(_Counting):
        def do_GET(self) -> None:
            type(self).requests.append(self.path)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return _handler(Answer)


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        # credentials that cannot list uploads
        (403, b"<Error><Code>AccessDenied</Code><Message>no</Message></Error>", "AccessDenied"),
        # XML that declares an entity (never parsed): worded as any bad answer, a StoreError
        # naming the endpoint; a bare parse error escaped the prune as a traceback
        (
            200,
            b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><ListMultipartUploadsResult/>',
            "DTD or entities",
        ),
    ],
    ids=["access-denied", "entities"],
)
def test_an_upload_listing_the_prune_cannot_use_is_a_note_not_a_failed_prune(status, body, said):
    from gpuci.cache._upkeep import prune

    notes: list[str] = []
    with LoopbackHTTPServer(_upload_listing(status, body)) as server:
        store = _store(server.port)
        with pytest.raises(StoreError, match=said):
            store.leftovers(3600)
        assert prune._leftovers(store, 3600, notes) == []
    assert len(notes) == 1 and said in notes[0], notes
