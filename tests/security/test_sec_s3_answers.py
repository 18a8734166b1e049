"""What an S3 endpoint says about its objects is input: a listing that ignores the prefix asked
for, a Last-Modified in a form (or absence) the HEAD parser did not expect, a redirect whose
Location cannot be parsed. Each ends as one line or as "age unknown", never as prune deleting
live or young objects, restore-keys matching another key, or an internal error."""

from __future__ import annotations

import calendar
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuci.cache import _layout as layout
from gpuci.cache._format import refs
from gpuci.cache._stores import open_store
from gpuci.cache._stores.base import UNKNOWN_MODIFIED, ObjectInfo
from gpuci.cache._stores.s3.client import Listed, Redirected, Reply, http_time
from gpuci.cache._stores.s3.store import S3Store
from gpuci.cache._upkeep import prune
from gpuci.errors import StoreError
from moto_s3 import FAKE_S3_CREDENTIALS as CREDS

NOW_ISH = calendar.timegm((2026, 12, 5, 1, 21, 51, 0, 0, 0))
BLOB = layout.blob_key("ab" * 32)


def _store() -> S3Store:
    """A store whose requests never leave: each test replaces the client's answers."""
    return S3Store(
        "bkt", "c", endpoint_url="http://127.0.0.1:9", region=None, environ=CREDS, mask=None
    )


def _ignoring_prefix(keys: list[str]):
    """A listing from a server (or proxy) that drops ``prefix=``: every key, whatever asked."""

    def list_pages(_prefix: str) -> Iterator[list[Listed]]:
        yield [Listed(k, 1, NOW_ISH, "") for k in keys]

    return list_pages


def test_a_listed_key_outside_the_prefix_asked_for_is_one_line():
    store = _store()
    store._rest.list_pages = _ignoring_prefix(["c/refs/default/z-2"])  # type: ignore[method-assign]
    with pytest.raises(StoreError) as caught:
        list(store.list("refs/default/k-"))
    message = caught.value.message
    assert "a key outside 'c/refs/default/k-'" in message and "\n" not in message, message


def test_restore_keys_never_match_a_key_the_listing_should_not_have_named():
    store = _store()
    store._rest.list_pages = _ignoring_prefix(["c/refs/default/z-2"])  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="a key outside"):
        refs.newest(store, "default", "k-", refs.NEWEST)


def test_prune_plans_nothing_when_the_blob_listing_names_refs_and_manifests():
    store = _store()
    live = ["c/refs/default/k-1", "c/manifests/" + "2e" * 32 + ".json", "c/meta/x.json"]
    store._rest.list_pages = _ignoring_prefix(live)  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="a key outside"):
        prune.plan(store, "default", "", 86_400.0, 0, 3_600.0)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("Sat, 05 Dec 2026 01:21:51 GMT", NOW_ISH),
        ("Sat, 05 Dec 2026 01:21:51 UTC", NOW_ISH),
        ("2026-12-05T01:21:51.000Z", NOW_ISH),
        ("2026-12-05T03:21:51+02:00", NOW_ISH),
        ("", UNKNOWN_MODIFIED),
        ("0", UNKNOWN_MODIFIED),
        ("yesterday", UNKNOWN_MODIFIED),
        ("Sat, 05 Dec 2026 25:21:51 GMT", UNKNOWN_MODIFIED),
        ("Sat, 05 Dec 2026 01:21:51 PST", UNKNOWN_MODIFIED),
    ],
)
def test_last_modified_is_read_as_botocore_reads_it_or_unknown_never_1970(value, seconds):
    assert http_time(value) == seconds


@pytest.mark.parametrize("headers", [{}, {"last-modified": "2026-12-05T01:21:51.000Z"}])
def test_a_head_says_unknown_or_the_time_it_was_given(headers):
    store = _store()
    answer = Reply(200, {"content-length": "1", **headers}, b"")
    store._rest.call = lambda *a, **k: answer  # type: ignore[method-assign]
    info = store.head(BLOB)
    assert info is not None
    assert info.modified == (NOW_ISH if headers else UNKNOWN_MODIFIED)


def test_prune_keeps_an_old_listed_blob_whose_head_does_not_say_its_age(tmp_path: Path):
    store = open_store((tmp_path / "store").as_uri(), environ={})
    store.put(BLOB, b"x")
    store.head = lambda key: ObjectInfo(key, 1, UNKNOWN_MODIFIED)  # type: ignore[method-assign]
    work = prune.Plan(data=[ObjectInfo(BLOB, 1, 0.0)])  # listed as decades old
    done = prune.execute(store, work, 3_600.0, "default")
    assert done.data == [] and done.kept == [BLOB]
    assert store.get(BLOB) is not None


def test_a_restore_or_save_of_unknown_age_keeps_a_stale_ref():
    stale = prune.StaleRef("refs/default/k-1", 0.0, 0.0)
    unknown = ObjectInfo("x", 1, UNKNOWN_MODIFIED)
    assert not prune._still_stale(stale, unknown, None, 86_400.0)
    assert not prune._still_stale(stale, None, unknown, 86_400.0)


@pytest.mark.parametrize("where", ["http://[evil/x", "https://[::1/x", "http://a:b:c/"])
def test_a_redirect_to_an_unparseable_location_is_the_redirect_line(where):
    body = b"<Error><Code>PermanentRedirect</Code><Message>moved</Message></Error>"
    store = _store()
    error = store._redirected(Redirected(Reply(301, {"location": where}, body), ""), "get", "k", "")
    assert "redirected" in error.message and "without naming a region" in error.message
    ranged = store._status_error(301, body, "k", {"location": where})
    assert isinstance(ranged, StoreError) and "without naming a region" in ranged.message


def _blob_listing(tmp_path: Path, count: int):
    """A file store whose blob listing is ``count`` old objects nothing names (as a hostile
    listing inside the client's caps, or a big honest store, sends them)."""
    store = open_store((tmp_path / "store").as_uri(), environ={})

    def listed(prefix: str) -> Iterator[ObjectInfo]:
        if prefix == f"{layout.BLOBS}/":
            for i in range(count):
                yield ObjectInfo(f"{layout.BLOBS}/{i:06d}{i % 1000:03d}", 1, 978_307_200.0)

    store.list = listed  # type: ignore[method-assign]
    return store


def test_a_prune_plan_holds_a_bounded_number_of_objects_however_long_the_listing(tmp_path):
    store = _blob_listing(tmp_path, 600_000)
    tracemalloc.start()
    try:
        work = prune.plan(store, "default", "", 86_400.0, 0, 3_600.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(work.data) == 200_000 and work.cut == 200_000
    assert peak < 64 << 20, peak  # all 600,000 held: over 100 MiB


def test_a_cut_prune_deletes_what_it_planned_and_the_next_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(prune, "MAX_PLANNED", 3)
    store = open_store((tmp_path / "store").as_uri(), environ={})
    blobs = [layout.blob_key(f"{i:02x}" * 32) for i in range(5)]
    for key in blobs:
        store.put(key, b"x")
    for path in (tmp_path / "store").rglob("*"):
        os.utime(path, (978_307_200, 978_307_200))  # saved in 2001
    work = prune.plan(store, "default", "", 60.0, 0, 3_600.0)
    assert work.cut == 3 and len(prune.execute(store, work, 3_600.0, "default").data) == 3
    assert len(list(store.list(f"{layout.BLOBS}/"))) == 2
    work = prune.plan(store, "default", "", 60.0, 0, 3_600.0)
    assert work.cut == 0 and len(prune.execute(store, work, 3_600.0, "default").data) == 2
    assert list(store.list(f"{layout.BLOBS}/")) == []
