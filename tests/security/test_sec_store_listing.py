"""A store's listing is untrusted too: pages of long, fresh keys without end must not grow a
restore's memory (restore-keys keeps only the newest few matches), and names no save could write
must not grow its warnings without bound."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

from gpuci.cache._format import refs
from gpuci.cache._stores import open_store
from gpuci.cache._stores.base import ObjectInfo

KEYS = 40_000
KEY_CHARS = 480  # the longest keys a hostile listing sent, page after page


def _store(tmp_path: Path, names: Iterator[str]):
    store = open_store((tmp_path / "store").as_uri(), environ={})
    base = "refs/default/"

    def listed(prefix: str) -> Iterator[ObjectInfo]:
        for i, name in enumerate(names):
            yield ObjectInfo(key=base + name, size=200, modified=float(i % 9_973))

    store.list = listed  # type: ignore[method-assign]  # the listing a hostile server streams
    return store


def _long_keys() -> Iterator[str]:
    for i in range(KEYS):
        yield f"pre-{i:08d}-" + "x" * (KEY_CHARS - 13)


def _peak_in_a_process_of_its_own(tmp_path: Path, lookup: str) -> int:
    """Peak traced memory of one ``lookup`` (``newest`` or ``absent``) over the endless
    listing, in a fresh interpreter: tracemalloc counts every thread's allocations, and an
    earlier test's server thread still relaying in this worker is no part of the lookup."""
    code = (
        "import sys, tracemalloc\n"
        "from pathlib import Path\n"
        "import test_sec_store_listing as t\n"
        f"print(t._peak_of({lookup!r}, Path(sys.argv[1])))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return int(done.stdout.split()[-1])


def _peak_of(lookup: str, tmp_path: Path) -> int:
    store = _store(tmp_path, _long_keys())
    tracemalloc.start()
    try:
        if lookup == "newest":
            found = refs.newest(store, "default", "pre-", refs.NEWEST)
            assert len(found) == refs.NEWEST
            assert found[0].modified == 9_972 and found == sorted(
                found, key=lambda r: (r.modified, r.key), reverse=True
            )
        else:
            assert refs.lookup(store, "default", "absent", ["pre-"]) is None  # none readable
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_restore_keys_keep_only_the_newest_matches_while_the_listing_streams(tmp_path):
    # every key held would be ~40,000 x 1 KiB (key, object key, RefInfo): tens of MiB
    peak = _peak_in_a_process_of_its_own(tmp_path, "newest")
    assert peak < 4 << 20, peak


def test_a_restore_keys_lookup_over_an_endless_listing_stays_small(tmp_path):
    """The lookup itself (it used to sort every key of the listing first)."""
    peak = _peak_in_a_process_of_its_own(tmp_path, "absent")
    assert peak < 4 << 20, peak


def test_names_no_save_could_write_give_a_bounded_number_of_warnings(tmp_path):
    bad = (f"pre-%0A{i}" for i in range(1_000))  # each decodes to a newline
    store = _store(tmp_path, bad)
    ignored: list[str] = []
    assert refs.newest(store, "default", "pre-", refs.NEWEST, ignored) == []
    assert len(ignored) == refs.MAX_IGNORED + 1
    assert ignored[-1].startswith(f"ignored {1_000 - refs.MAX_IGNORED} more refs")
