"""A shared self-hosted runner in a temp folder: a file store, a runner-local tier, and
``cache-weights save/restore`` run in-process exactly as the CLI does (so a test can stand
between two steps of a save, or pretend to be another user through the tier's uid seam)."""

from __future__ import annotations

import hashlib
import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.cache import _layout as layout
from gpuci.cli import run_command
from gpuci.commands import _cache_weights as cache_weights
from gpuci.runtime import Result, Runtime

BIG = 3 << 20  # a model shard: several copy calls, one hardlink
FROZEN_MTIME = 946684800  # what the tier stamps on every blob: a planted file copies it too
_SUB = {sub.name: sub for sub in cache_weights.COMMAND.subcommands}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Runner:
    """One runner: its store, its tier folder, and a job environment."""

    base: Path
    reflinks: bool = False  # on a filesystem that clones (XFS, btrfs)
    environ: dict[str, str] = field(default_factory=dict)  # e.g. GITHUB_ACTIONS, RUNNER_TEMP

    @property
    def store(self) -> Path:
        return self.base / "store"

    @property
    def tier(self) -> Path:
        return self.base / "tier"

    def env(self) -> dict[str, str]:
        return {
            "GPUCI_JOURNAL": str(self.base / "journal.jsonl"),
            "HOME": str(self.base / "home"),
            "GPUCI_LOCAL_CACHE": "off",  # each call says which tier it uses
            **self.environ,
        }

    def run(self, sub: str, key: str, path: Path, dry_run: bool = False, **flags: str) -> Result:
        values = {"store": self.store.as_uri(), "key": key, "path": str(path), **flags}
        rt = Runtime(
            environ=self.env(), stdout=io.StringIO(), stderr=io.StringIO(), dry_run=dry_run
        )
        return run_command(_SUB[sub], f"cache-weights {sub}", values, rt)

    def save(self, key: str, src: Path, tier: bool = True, **flags: str) -> Result:
        extra = {"local-cache": str(self.tier)} if tier else {}
        result = self.run("save", key, src, **extra, **flags)
        assert result.exit_code == 0, result.headline
        return result

    def restore(self, key: str, dest: Path, **flags: str) -> Result:
        result = self.run("restore", key, dest, **{"local-cache": str(self.tier), **flags})
        assert result.exit_code == 0, result.headline
        return result

    def blob(self, digest: str) -> Path:
        return self.tier / layout.blob_key(digest)


def model_tree(root: Path) -> dict[str, bytes]:
    """A weights file and a small config."""
    root.mkdir(parents=True)
    files = {"model.safetensors": os.urandom(BIG), "config.json": b'{"layers": 2}\n'}
    for name, data in files.items():
        (root / name).write_bytes(data)
    return files


def small_files(root: Path, count: int = 60, size: int = 2_000) -> dict[str, bytes]:
    """A tokenizer-and-configs folder: ``count`` small files under ``sub/``, all packed."""
    (root / "sub").mkdir(parents=True, exist_ok=True)
    files = {f"sub/f{i:03d}.json": os.urandom(size + i) for i in range(count)}
    for name, data in files.items():
        (root / name).write_bytes(data)
    return files


def saved_runner(
    base: Path,
    make_tree: Callable[[Path], dict[str, bytes]] = model_tree,
    tier: bool = True,
    **flags: str,
) -> tuple[Runner, dict[str, bytes]]:
    """A runner in ``base`` whose store holds ``make_tree(base / "src")`` saved as key ``m``
    (its tier filled too unless ``tier`` is False): where most tier tests start."""
    runner = Runner(base)
    files = make_tree(base / "src")
    runner.save("m", base / "src", tier=tier, **flags)
    return runner, files


def restored(job: Path, files: dict[str, bytes]) -> None:
    """Every file is in the job's folder with exactly its bytes."""
    for name, data in files.items():
        assert (job / name).read_bytes() == data, name


def plant(path: Path, data: bytes, mode: int = 0o444) -> None:
    """A file made to look like a tier blob: right size, frozen mtime, read-only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)
    os.utime(path, (FROZEN_MTIME, FROZEN_MTIME), follow_symlinks=False)


def tier_is_honest(tier: Path, store: Path | None = None) -> None:
    """Every blob in the tier hashes to its name; every run (read-only, frozen) holds the bytes
    of its pack it names, checked against the pack in ``store`` (a folder store) when given."""
    base = tier / layout.BLOBS
    for path in base.rglob("*") if base.exists() else []:
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            assert sha(path.read_bytes()) == path.name, f"{path} does not hash to its name"
    for name, path in tier_runs(tier).items():
        st = path.lstat()
        assert stat.S_IMODE(st.st_mode) == 0o444 and int(st.st_mtime) == FROZEN_MTIME, path
        pack, span = name.split(".")
        start, end = map(int, span.split("-"))
        assert st.st_size == end - start, path
        if store is not None:
            whole = (store / layout.pack_key(pack)).read_bytes()
            assert path.read_bytes() == whole[start:end], f"{path} is not its pack's bytes"


def tier_holds(tier: Path, data: bytes) -> bool:
    """Whether the tier holds these bytes: a blob of a large file, or a run of the small
    file's pack."""
    blob = tier / layout.blob_key(sha(data))
    if len(data) >= layout.PACK_THRESHOLD:
        return blob.is_file() and blob.read_bytes() == data
    return not blob.exists() and any(data in p.read_bytes() for p in tier_runs(tier).values())


def tier_runs(tier: Path) -> dict[str, Path]:
    """The tier's runs of packs (packed small files), by name: ``<pack>.<start>-<end>``."""
    base = tier / layout.TIER_RUNS
    return {p.name: p for p in base.rglob("*") if p.is_file()} if base.exists() else {}


def warnings(result: Result) -> list[str]:
    return [a.message for a in result.annotations if a.level == "warning"]
