"""One hostile manifest of many deep paths (anyone who can write the store): nothing that reads
it builds every prefix of every path, O(depth^2) bytes per entry, gigabytes of memory in a
restore and minutes of CPU in parse from one 64 MiB manifest (rv5 F4). Measured as work and
memory, never time: the built-in calls parse's nesting check makes, and the peak memory of the
restore's index of what the manifest lists.
"""

from __future__ import annotations

import sys
import tracemalloc
from typing import Any

import pytest

from gpuci.cache._format import manifest as mf
from gpuci.cache._restore import merge

DEPTH = 250
ENTRIES = 300
DEEP = "/".join(["a"] * DEPTH)


def _deep_entries(kind: str = "file") -> list[mf.Entry]:
    """Entries each DEPTH folders deep, no two sharing a folder (a distinct first one)."""
    return [mf.Entry(type=kind, root=0, path=f"{i:x}/{DEEP}/f") for i in range(ENTRIES)]


def _builtin_calls(run: Any) -> int:
    """The built-in calls (joins, lookups, bisections) ``run`` makes: its work, not its time."""
    calls = 0

    def count(_frame: Any, event: str, _arg: Any) -> None:
        nonlocal calls
        if event == "c_call":
            calls += 1

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def test_parse_checks_nesting_in_work_linear_in_the_entries():
    entries = _deep_entries()
    calls = _builtin_calls(lambda: mf._refuse_nested_under_non_folders("m", entries))
    assert calls < 10 * ENTRIES  # every prefix joined: DEPTH joins and lookups per entry


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_parse_still_refuses_an_entry_under_a_file_or_link(kind):
    entries = [
        mf.Entry(type=kind, root=0, path="a/b", target="x"),
        mf.Entry(type="file", root=0, path="a/b-c"),  # sorts between a/b and a/b/...
        mf.Entry(type="file", root=0, path=f"a/b/{DEEP}/f"),
        mf.Entry(type="file", root=1, path="a/b/other-root"),
    ]
    with pytest.raises(Exception, match=r"a/b/a/.* lies under a"):
        mf._refuse_nested_under_non_folders("m", entries)
    mf._refuse_nested_under_non_folders("m", [entries[0], entries[1], entries[3]])


def test_the_restores_index_of_listed_paths_holds_no_prefixes():
    entries = [*_deep_entries(), mf.Entry(type="symlink", root=0, path="l", target="x")]
    tracemalloc.start()
    try:
        merge._JobsLinks(entries, "/nonexistent")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # every prefix: DEPTH strings of ~DEPTH bytes each, per entry


def test_a_folder_the_manifest_implies_is_not_read_as_the_jobs(tmp_path):
    """The folders under listed paths still count as listed (the merge replaces them)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a-b").symlink_to("elsewhere")
    (tmp_path / "a" / "job").symlink_to("../..")
    entries = [mf.Entry(type="file", root=0, path="a/b/f")]
    with merge._JobsLinks(entries, str(tmp_path)) as disk:
        assert disk.target("a") is None
        assert disk.target("a/b") is None
        assert disk.target("a-b") == "elsewhere"
        assert disk.target("a/job") == "../.."
