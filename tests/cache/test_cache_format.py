"""The format itself: canonical manifests, key quoting, pack runs, and lazy boto3."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from cache_testing import REPO_ROOT

from gpuci.cache import _layout as layout
from gpuci.cache._format import manifest as mf
from gpuci.cache._format import refs
from gpuci.cache._format.packs import plan_runs
from gpuci.errors import InputError

SHA = hashlib.sha256(b"x").hexdigest()


def _manifest(entries: list[dict], roots=None) -> bytes:
    return mf.canonical_json(
        {
            "format": 1,
            "key": "k",
            "roots": roots or [{"path": "m", "kind": "dir"}],
            "entries": entries,
        }
    )


def test_canonical_json_is_stable_and_names_the_manifest():
    a = mf.Manifest(
        "k",
        [{"path": "m", "kind": "dir"}],
        [mf.Entry("file", 0, "a", size=1, sha256=SHA)],
        created="t",
    )
    b = mf.parse(a.canonical(), "test")
    b.created = "t"
    assert b.canonical() == a.canonical()
    assert a.digest() == hashlib.sha256(a.canonical()).hexdigest()
    assert a.canonical().startswith(b'{"bytes":1,"created":"t","entries":[')


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"type": "file", "root": 0, "path": "a/../b", "size": 1, "mode": 420}, "'..'"),
        ({"type": "file", "root": 0, "path": "./a", "size": 1, "mode": 420}, "normalised"),
        ({"type": "file", "root": 0, "path": "a\\b", "size": 1, "mode": 420}, "backslash"),
        ({"type": "file", "root": 1, "path": "a", "size": 1, "mode": 420}, "root 1"),
        ({"type": "file", "root": 0, "path": "a", "size": -1, "mode": 420}, "size"),
        ({"type": "symlink", "root": 0, "path": "a", "target": ".."}, "escapes"),
        ({"type": "device", "root": 0, "path": "a"}, "unknown"),
    ],
)
def test_unsafe_entries_are_refused(entry, why):
    entry = {**entry, "sha256": SHA} if entry["type"] == "file" else entry
    with pytest.raises(InputError, match="unsafe") as info:
        mf.parse(_manifest([entry]), "m1")
    assert why in info.value.message


def test_writing_under_a_symlink_is_refused():
    entries = [
        {"type": "symlink", "root": 0, "path": "d", "target": "e"},
        {"type": "file", "root": 0, "path": "d/x", "size": 1, "mode": 420, "sha256": SHA},
    ]
    with pytest.raises(InputError, match="under a symlink"):
        mf.parse(_manifest(entries), "m1")


def test_newer_format_is_refused_with_upgrade_hint():
    with pytest.raises(InputError, match="format 2") as info:
        mf.parse(b'{"format":2}', "m1")
    assert "upgrade" in (info.value.hint or "")


def test_key_quoting_keeps_prefixes_and_round_trips():
    for key in ["a/b c", "model:v1=x", "%41", "ü-key"]:
        obj = layout.ref_key("ns", key)
        assert layout.key_from_ref("ns", obj) == key
        assert obj.startswith(layout.ref_key("ns", key[:2]))
        assert obj.count("/") == 2


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x1f", "\x7f", "\x85", "\x9f"])
def test_a_key_with_a_control_character_is_refused_in_one_line(char):
    """C0, DEL and C1 (U+0085 ends a line for some readers): a listed or given key holding one
    is refused, escaped in the message, so it can neither start a line nor fake one."""
    with pytest.raises(InputError) as info:
        refs.check_key(f"model{char}::error::x")
    assert "holds control characters" in str(info.value)
    assert char not in str(info.value) and "\n" not in str(info.value)


def test_a_key_with_printable_non_ascii_is_kept():
    for key in ["ü-key", "model\xa0v1", "模型", "a" * refs.MAX_KEY]:
        assert refs.check_key(key) == key


def test_pack_runs_group_neighbours_and_respect_limits():
    entries = [
        mf.Entry("file", 0, f"f{i}", size=100, sha256=SHA, pack="a" * 64, offset=i * 100)
        for i in range(10)
    ]
    entries.append(mf.Entry("file", 0, "far", size=10, sha256=SHA, pack="a" * 64, offset=10**7))
    runs = plan_runs(entries, limit=450)
    assert [(r.start, r.length) for r in runs] == [(0, 400), (400, 400), (800, 200), (10**7, 10)]
    assert sum(len(r.members) for r in runs) == 11


def test_local_store_save_never_imports_boto3(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a").write_text("a")
    code = (
        "import sys; from gpuci.cli import main; "
        f"rc = main(['cache-weights', 'save', '--key', 'k', '--path', '{tmp_path / 't'}', "
        f"'--store', '{(tmp_path / 's').as_uri()}']); "
        "print('BOTO3' if 'boto3' in sys.modules else 'NO-BOTO3', rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUCI_JOURNAL": str(tmp_path / "j")},
        timeout=60,
    )
    assert proc.stdout.strip().endswith("NO-BOTO3 0"), proc.stdout + proc.stderr


def test_a_digest_with_a_trailing_newline_is_not_a_sha256():
    """``$`` matches before a final newline: the check is the whole text, 64 hex digits."""
    digest = "a" * 64
    assert layout.is_sha256(digest)
    assert not layout.is_sha256(digest + "\n")
