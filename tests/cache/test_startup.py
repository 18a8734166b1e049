"""Start-up of a warm restore: the whole CLI, every file from the runner-local tier.

Such a restore reads one ref and one manifest, places files from disk and records one use: its
time is the interpreter plus what it imports. What it imports is guarded here, for a file store
and for S3 stores on custom endpoints (the endpoint-url input on moto, AWS_ENDPOINT_URL on
SeaweedFS): no boto3/botocore (the requests are signed by gpuci's own SigV4 code), no httpx or
tenacity (the download machinery), no urllib.request or configparser (proxies and the AWS
config file are read only when set), no other command's modules (``http.client`` and the ``ssl``
it imports carry the fast path's requests). That cannot flake; a time can, on a shared
machine, so the time itself (the 150 ms target) is a benchmark that prints figures:
scripts/bench_startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cache_testing import CREDS, REPO_ROOT, s3_case, seaweedfs_server
from treeutil import make_tree, snapshot

from gpuci_testing import clean_env

# Loaded by a tier-hit restore's code paths only when something else is needed.
NOT_LOADED = (
    "boto3",
    "botocore",
    "s3transfer",
    "httpx",
    "tenacity",
    "yaml",
    "xml.etree.ElementTree",
    "gpuci.cache._transfer.download",
    "gpuci.cache._save.command",
    "gpuci.commands._pods",
    "gpuci.commands._training",
    "gpuci.commands._gpu",
    "urllib.request",
    "configparser",
    # issue 28 round 4: each of these cost a warm hit a few ms of its ~100 ms start-up
    "concurrent.futures",  # and logging: the placing pool starts only for big files
    "logging",
    "gpuci.cache._format.tree",  # save's tree walk
    "gpuci.cache._upkeep.options",  # prune/ls/pin/unpin inputs: four classes to build
    "gpuci.cache._upkeep.prune",
    "gpuci.cache._upkeep.pins",
    "gpuci.cache._upkeep.listing",
    "argparse",  # a plain command line is read without it (gpuci.cli._plain_args)
    # issue 33: a probe name needs no uuid (which imports platform and its nine regexes)
    "uuid",
    "platform",
    "gpuci.cache._format.hf",  # layout: hf only
    # issue 33 round 2: classes a hit never uses (a dataclass's methods are compiled anew in
    # every process; also checked by name, below): save's inputs, built by a save or a populate
    "gpuci.cache.options._save",
    "gpuci.annotation",  # the class of a result's annotations: a clean hit makes none
)
# A file store also makes no request to retry (S3's control requests need the retry policy),
# starts no thread and removes no folder.
# Nor does it convert a time (S3's signer needs datetime, gpuci.units only when converting).
# Nor does an exact hit list refs (heapq keeps the newest under a restore-keys prefix; S3's
# client loads it anyway).
FILE_NOT_LOADED = ("gpuci.retry", "gpuci.adaptive", "threading", "shutil", "datetime", "heapq")
_PROBE = (
    "import sys, json, contextlib, io\n"
    "from gpuci.cli import main\n"
    "out = io.StringIO()\n"
    "with contextlib.redirect_stdout(out):\n"
    "    code = main(sys.argv[1:])\n"
    "print(json.dumps({'code': code, 'out': out.getvalue(), 'modules': sorted(sys.modules),\n"
    "    'names': {m: sorted(vars(sys.modules[m])) for m in ('gpuci.cache.options',"
    " 'gpuci.runtime')}}))\n"
)


@pytest.fixture(params=["file", "moto-endpoint-url", "seaweedfs-AWS_ENDPOINT_URL"])
def warm(request, tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    """(restore arguments without --path, environment, source tree) with the tier filled."""
    env = _child_env(tmp_path, **CREDS)
    if request.param == "file":
        args = ["--store", (tmp_path / "store").as_uri()]
    elif request.param == "moto-endpoint-url":
        case = s3_case("moto", request.getfixturevalue("moto_endpoint"))
        args = ["--store", case.url, "--endpoint-url", str(case.endpoint)]
    else:
        case = s3_case("seaweedfs", seaweedfs_server(request))
        args = ["--store", case.url]
        env["AWS_ENDPOINT_URL"] = str(case.endpoint)
    src = make_tree(tmp_path / "src", big=1_500_000, small=8)
    save = [sys.executable, "-m", "gpuci", "cache-weights", "save", *args, "--key", "warm"]
    proc = subprocess.run(
        [*save, "--path", str(src)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ["cache-weights", "restore", *args, "--key", "warm"], env, src


def _child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A child's environment: this machine's without CI's or AWS's settings, the home, journal
    and tier under ``tmp_path``, and this checkout's gpuci."""
    return clean_env(
        HOME=str(tmp_path / "home"),
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        GPUCI_LOCAL_CACHE=str(tmp_path / "tier"),
        PYTHONPATH=str(REPO_ROOT / "src"),
        **extra,
    )


def _restore(args: list[str], env: dict[str, str], out: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args, "--path", str(out), "--json", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_tier_hit_restore_loads_only_what_it_needs(warm, tmp_path):
    args, env, src = warm
    got = _restore(args, env, tmp_path / "out")
    assert got["code"] == 0, got["out"]
    outputs = json.loads(got["out"])["outputs"]
    assert outputs["cache-hit"] == "true" and int(outputs["bytes-downloaded"]) == 0
    assert int(outputs["bytes-from-local"]) > 1_500_000
    assert snapshot(tmp_path / "out") == snapshot(src)
    banned = NOT_LOADED + (
        FILE_NOT_LOADED if args[args.index("--store") + 1].startswith("file:") else ()
    )
    loaded = [name for name in banned if name in got["modules"]]
    assert loaded == [], f"a tier-hit restore imported {loaded}"
    built = got["names"]
    assert "SaveInputs" not in built["gpuci.cache.options"], "a tier-hit restore built SaveInputs"
    assert "Annotation" not in built["gpuci.runtime"], "a clean tier-hit restore built Annotation"


def test_a_restore_keys_match_lists_without_boto3(warm, tmp_path):
    """The prefix match lists refs (ListObjectsV2 over the fast path), then reads the newest."""
    args, env, src = warm
    exact = args.index("--key") + 1
    args = [*args[:exact], "nothing-saved-under-this", *args[exact + 1 :]]
    got = _restore(args, env, tmp_path / "out", "--restore-keys", "wa")
    assert got["code"] == 0, got["out"]
    outputs = json.loads(got["out"])["outputs"]
    assert outputs["cache-hit"] == "false" and outputs["matched-key"] == "warm"
    assert snapshot(tmp_path / "out") == snapshot(src)
    assert not {"boto3", "botocore", "httpx"} & set(got["modules"])


def test_a_warm_link_restore_of_big_files_starts_no_thread(tmp_path):
    """``link`` mode links a big file as it links a small one (an inode written, no bytes), so
    a warm restore of model shards has nothing to copy in parallel: no placing pool, none of
    its modules (concurrent.futures, logging, threading)."""
    env = _child_env(tmp_path)
    src = make_tree(tmp_path / "src", big=9 << 20, small=8)  # over place.PARALLEL_MIN
    args = ["cache-weights", "restore", "--store", (tmp_path / "store").as_uri(), "--key", "big"]
    args += ["--local-cache-mode", "link"]
    save = [sys.executable, "-m", "gpuci", "cache-weights", "save", *args[2:6], "--path", str(src)]
    saved = subprocess.run(save, env=env, capture_output=True, text=True, timeout=120)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    _restore(args, env, tmp_path / "warm")  # the tier keeps a blob per file
    got = _restore(args, env, tmp_path / "out")
    placed = json.loads(got["out"])["report"]["placed"]
    if "reflink" in placed:
        pytest.skip("this filesystem clones: link mode reflinks")
    assert placed.get("hardlink", 0) >= 9, placed  # the big file and the small ones

    def contents(root: Path) -> dict[str, object]:  # linked files are the tier's 0444 inodes
        return {path: (what[0], what[-1]) for path, what in snapshot(root).items()}

    assert contents(tmp_path / "out") == contents(src)
    loaded = [m for m in ("concurrent.futures", "logging", "threading") if m in got["modules"]]
    assert loaded == [], f"a warm link restore of big files imported {loaded}"
