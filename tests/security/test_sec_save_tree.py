"""What a pull request's job can plant in a folder a later trusted save reads (a Hugging Face
cache kept on a self-hosted runner), and what a hostile writer can plant in a store's manifest.

Save: a link out of the saved paths is skipped unless ``follow-symlinks: all`` (and said either
way); an hf repo folder that is a link is refused; names restore would refuse, names that are
not UTF-8, folders too deep, unreadable files and folders are skipped with a warning, never an
internal error. Restore: a manifest whose links take unbounded work to resolve, whose paths are
too deep, or that names a file and a path under it is refused as malformed (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

from hostile_store_kit import (  # noqa: F401  (fixtures are used by name)
    cache_cmd,
    env,
    file_store,
    plant,
)


def _hub(tmp_path: Path) -> Path:
    hub = tmp_path / "hub"
    hub.mkdir()
    return hub


def _hf_repo(hub: Path) -> Path:
    repo = hub / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "aaa").write_bytes(b"weights")
    (repo / "snapshots" / "c1").mkdir(parents=True)
    os.symlink("../../blobs/aaa", repo / "snapshots" / "c1" / "model.bin")
    (repo / "refs").mkdir()
    return repo


def test_a_ref_is_read_from_a_small_regular_file_only(tmp_path):
    from gpuci.cache._format import hf

    repo = _hf_repo(_hub(tmp_path))
    ref = repo / "refs" / "main"
    ref.write_text("c1\n")
    notes: list[str] = []
    assert hf.commit_of(repo, "main", notes) == "c1" and notes == []
    ref.unlink()
    os.symlink("../snapshots/c1/model.bin", ref)
    assert hf.commit_of(repo, "main", notes) == "main"
    assert len(notes) == 1 and "symlink" in notes[0]
    ref.unlink()
    with open(ref, "wb") as handle:  # sparse: a MiB that takes no disk, read 4 KiB at most
        handle.truncate(1 << 20)
    assert hf.commit_of(repo, "main", notes) == "main"
    assert len(notes) == 2 and "over 4096 bytes" in notes[1]
