"""Build sample trees and describe trees for comparison."""

from __future__ import annotations

import hashlib
import os
import random
import stat
from pathlib import Path


def make_tree(root: Path, seed: int = 1, big: int = 2_500_000, small: int = 20) -> Path:
    rng = random.Random(seed)
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "big.bin").write_bytes(rng.randbytes(big))
    for i in range(small):
        folder = root / "sub" if i % 2 else root / "sub" / "deep"
        (folder / f"f{i:02d}.txt").write_bytes(rng.randbytes(1000 + 997 * i))
    (root / "empty.txt").write_bytes(b"")
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    os.symlink("sub/f01.txt", root / "link-to-f01")
    os.symlink("../big.bin", root / "sub" / "up-link")
    return root


def write_tree(root: Path, files: dict[str, bytes | str]) -> Path:
    """``root``, made here (it must not exist yet), holding each of ``files`` by name: bytes
    written as bytes, text as text. A test's few-file tree in one statement."""
    root.mkdir()
    for name, data in files.items():
        if isinstance(data, bytes):
            (root / name).write_bytes(data)
        else:
            (root / name).write_text(data)
    return root


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root with type, permission bits and content hash or link target."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                digest = hashlib.sha256(full.read_bytes()).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), digest)
    return out


def leftovers(parent: Path) -> list[str]:
    """Staging folders or incomplete files left next to a target."""
    if not parent.exists():
        return []
    return sorted(
        p.name for p in parent.iterdir() if ".gpuci-staging-" in p.name or ".incomplete" in p.name
    )
