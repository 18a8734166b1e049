"""``hashFiles()`` at plan time never leaves the checkout: a committed link (``sys -> /``) is
not followed, as the runner does not follow one; the walk stops once the matches pass the
cap; a file that vanishes mid-walk leaves the value to the run instead of ending the plan."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from dryrun.dryrun_testing import runner_hash_files
from gpuci import files
from gpuci.dryrun import _contexts, _hash_files
from gpuci.dryrun._contexts import hash_files
from gpuci.dryrun._expressions import Unknown
from gpuci_testing import count_listed, deep_folder, remove_deep


def checkout(tmp_path: Path) -> tuple[Path, dict]:
    """A checkout with a/x.lock, and the contexts naming it the workspace."""
    root = tmp_path / "checkout"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.lock").write_bytes(b"one")
    return root, {"github": {"workspace": str(root)}}


def real_path(path) -> str:
    """The real path of a folder ``os.scandir`` lists, given by path or by descriptor."""
    return os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else os.path.realpath(path)


def listed_folders(monkeypatch) -> list[str]:
    """Every folder listed from now on (os.scandir, which every walk uses), as its real path."""
    seen: list[str] = []
    real_scandir = os.scandir

    def spy(path=".", *rest):
        seen.append(real_path(path))
        return real_scandir(path, *rest)

    monkeypatch.setattr(os, "scandir", spy)
    return seen


def test_a_link_out_of_the_checkout_is_not_walked(tmp_path, monkeypatch):
    """hashFiles('sys/**') with sys -> / walked the whole machine (41 s) before any filter."""
    root, ctx = checkout(tmp_path)
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.lock").write_bytes(b"secret")
    (root / "sys").symlink_to(outside)
    (root / "b").symlink_to(root / "a")  # a link inside the checkout is not followed either
    seen = listed_folders(monkeypatch)
    for pattern in ("sys/**", "sys/**/*.lock", "sys/deep/*.lock"):
        assert isinstance(hash_files(ctx, [pattern]), Unknown), pattern
    assert all(Path(p) == root or root in Path(p).parents for p in seen), seen
    assert hash_files(ctx, ["**/*.lock"]) == runner_hash_files(b"one")  # a/x.lock only
    assert isinstance(hash_files(ctx, ["b/*"]), Unknown)


def test_a_folder_glob_matches_its_files_as_the_runner_does(tmp_path):
    """``a/**`` matches every file under a/ (minimatch, the runner's glob)."""
    root, ctx = checkout(tmp_path)
    (root / "a" / "sub").mkdir()
    (root / "a" / "sub" / "y.lock").write_bytes(b"two")
    assert hash_files(ctx, ["a/**"]) == runner_hash_files(b"two", b"one")  # a/sub/ first
    assert hash_files(ctx, ["a/**", "!a/sub/**"]) == runner_hash_files(b"one")
    assert hash_files(ctx, ["a/[xy].lock"]) == runner_hash_files(b"one")


def test_the_walk_stops_once_the_matches_pass_the_cap(tmp_path, monkeypatch):
    root, ctx = checkout(tmp_path)
    for n in range(30):
        (root / f"d{n:02}").mkdir()
        (root / f"d{n:02}" / "f.lock").write_bytes(b"x")
    monkeypatch.setattr(_hash_files, "MAX_HASHED_FILES", 3)
    seen = listed_folders(monkeypatch)
    assert isinstance(hash_files(ctx, ["**/*.lock"]), Unknown)
    assert len(seen) < 10, len(seen)  # not all 31 folders


def test_a_file_gone_mid_walk_leaves_the_value_to_the_run(tmp_path, monkeypatch):
    """A /proc entry vanishing during the walk ended the dry run as an internal error."""
    _, ctx = checkout(tmp_path)
    real_scandir = os.scandir

    def vanishing(path=".", *rest):
        if Path(real_path(path)).name == "a":
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_scandir(path, *rest)

    monkeypatch.setattr(os, "scandir", vanishing)
    assert isinstance(hash_files(ctx, ["**/*.lock"]), Unknown)
    assert _contexts.PLAN_FUNCTIONS["hashfiles"] is hash_files


def test_a_tree_deeper_than_the_interpreter_recurses_leaves_the_value_to_the_run(tmp_path):
    """``os.walk`` recursed once per folder (before Python 3.12): a committed tree deeper than
    the recursion limit ended the dry run with a RecursionError."""
    root, ctx = checkout(tmp_path)
    deep_folder(root, "deep", sys.getrecursionlimit() + 100)
    try:
        assert isinstance(hash_files(ctx, ["deep/**"]), Unknown)  # deeper than a walk holds
        assert hash_files(ctx, ["a/**"]) == runner_hash_files(b"one")
    finally:
        remove_deep(root, "deep")


def plan_checkout(tmp_path: Path) -> tuple[Path, dict]:
    """The checkout of :func:`checkout` with the contexts as a plan makes them: one ``github``
    context for the whole plan (:func:`github_context`), which its hashing work lasts with."""
    root, _ = checkout(tmp_path)
    return root, {"github": _contexts.github_context(_contexts.Event(), root)}


def hashing_count(monkeypatch) -> list[Path]:
    """Every file opened to be hashed from now on."""
    hashed: list[Path] = []
    real = files.open_regular

    def spy(path, *rest, **named):
        hashed.append(Path(path))
        return real(path, *rest, **named)

    monkeypatch.setattr(files, "open_regular", spy)
    return hashed


def test_one_plan_hashes_each_file_once_however_many_calls_name_it(tmp_path, monkeypatch):
    """An env: block of 20,000 keys each ${{ hashFiles('data.bin') }} (4 MiB) hashed 78 GiB."""
    root, ctx = plan_checkout(tmp_path)
    hashed = hashing_count(monkeypatch)
    for _ in range(50):
        assert hash_files(ctx, ["a/x.lock"]) == runner_hash_files(b"one")
        assert hash_files(ctx, ["a/*", "a/x.lock"]) == runner_hash_files(b"one")
    assert hashed == [root / "a" / "x.lock"]
    _, other = plan_checkout(tmp_path / "next")  # another plan starts afresh
    assert hash_files(other, ["a/x.lock"]) == runner_hash_files(b"one")
    assert len(hashed) == 2


def test_past_the_bytes_a_plan_hashes_the_value_is_left_to_the_run(tmp_path, monkeypatch):
    root, ctx = plan_checkout(tmp_path)
    (root / "big.bin").write_bytes(b"x" * 1000)
    monkeypatch.setattr(_hash_files, "MAX_HASHED_BYTES", 1500)
    hashed = hashing_count(monkeypatch)
    first = hash_files(ctx, ["big.bin"])
    assert first == runner_hash_files(b"x" * 1000)
    second = hash_files(ctx, ["big.bin", "a/x.lock"])  # the same file counts once: 1003 bytes
    assert second == runner_hash_files(b"x" * 1000, b"one")
    (root / "more.bin").write_bytes(b"y" * 1000)
    past = hash_files(ctx, ["more.bin"])  # 2003 bytes: past the plan's budget
    assert isinstance(past, Unknown) and "past what a plan hashes" in past.why, past
    assert isinstance(hash_files(ctx, ["*.bin"]), Unknown)  # nothing more walked or read
    assert len(hashed) == 2


def test_past_the_entries_a_plan_walks_the_value_is_left_to_the_run(tmp_path, monkeypatch):
    """Each distinct pattern walked the checkout again; the walk of a search path is kept for
    the plan, and the entries listed and names compared are counted against its budget."""
    root, ctx = plan_checkout(tmp_path)
    for n in range(20):
        (root / "a" / f"f{n:02}.lock").write_bytes(b"x")
    seen = listed_folders(monkeypatch)
    for n in range(20):
        assert isinstance(hash_files(ctx, ["a/*.lock", f"!a/f{n:02}.lock"]), str)
    assert len(seen) == 1, seen  # a/ listed once for the 20 calls
    monkeypatch.setattr(_hash_files, "MAX_COMPARED", 100)
    past = hash_files(ctx, ["**/*.lock", "!a/x.lock"])
    assert isinstance(past, Unknown) and "past what a plan hashes" in past.why, past


def python_lines_run(module, call) -> int:
    """How many lines of ``module`` ran during ``call()``: its work, counted, not timed."""
    count = 0
    code_file = module.__file__

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_filename != code_file:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def test_a_pattern_of_many_globstars_costs_no_more_than_one(tmp_path):
    """hashFiles('**/**/.../nomatch') (6,900 '**', within GitHub's 21,000 characters) walked
    every state's run of '**' for every name: O(parts^2) per name, a dry run of hours."""
    _, ctx = checkout(tmp_path)
    many = python_lines_run(_hash_files, lambda: hash_files(ctx, ["**/" * 300 + "nomatch"]))
    one = python_lines_run(_hash_files, lambda: hash_files(ctx, ["**/nomatch"]))
    assert many < one + 3 * 300, (many, one)  # reading the parts, once: no work per name
    long = "/".join(["*", "**"] * 100) + "/x"  # no run to collapse: past the parts a plan reads
    assert isinstance(hash_files(ctx, [long]), Unknown)


def test_the_files_come_in_the_runners_order(tmp_path):
    """@actions/glob: search path by search path in the patterns' order (not all sorted), each
    walked depth first in byte order of the names."""
    root, ctx = checkout(tmp_path)
    (root / "a" / "sub").mkdir()
    (root / "a" / "sub" / "y.lock").write_bytes(b"two")
    (root / "b").mkdir()
    (root / "b" / "z.lock").write_bytes(b"three")
    assert hash_files(ctx, ["b/**", "a/**"]) == runner_hash_files(b"three", b"two", b"one")
    assert hash_files(ctx, ["b/z.lock\na/x.lock"]) == runner_hash_files(b"three", b"one")
    assert hash_files(ctx, ["b/z.lock", "a/x.lock"]) == runner_hash_files(b"three", b"one")
    # a search path below another's is walked with it: one walk of the root, in byte order
    both = runner_hash_files(b"two", b"one", b"three")
    assert hash_files(ctx, ["b/z.lock", "**/*.lock"]) == both


def test_a_pattern_also_matches_what_lies_below_it(tmp_path):
    """implicitDescendants (on by default): 'a' and 'a/*' hash every file under a/, a '#'
    line is a comment, each '!' flips, and an exclusion takes the folder's files with it."""
    root, ctx = checkout(tmp_path)
    (root / "a" / "sub").mkdir()
    (root / "a" / "sub" / "y.lock").write_bytes(b"two")
    both = runner_hash_files(b"two", b"one")
    for patterns in (["a"], ["a/"], ["a/*"], ["./a"], ["# a comment\na"], ["!!a"]):
        assert hash_files(ctx, patterns) == both, patterns
    assert hash_files(ctx, ["a", "!a/sub"]) == runner_hash_files(b"one")
    assert hash_files(ctx, ["a", "!a/sub", "a/sub/y.lock"]) == both  # the last that decides
    assert hash_files(ctx, ["a/x.lock/**"]) == runner_hash_files(b"one")


def test_what_the_runner_reads_and_a_plan_does_not_is_left_to_the_run(tmp_path):
    """A definite key must be the runner's: a link it reads out of the checkout, a walk it
    makes through a link, links it follows on request, are left to the run."""
    root, ctx = checkout(tmp_path)
    outside = tmp_path / "outside.lock"
    outside.write_bytes(b"secret")
    (root / "a" / "out.lock").symlink_to(outside)
    (root / "c").symlink_to(root / "a")
    (root / "a" / "in.lock").symlink_to(root / "a" / "x.lock")
    assert isinstance(hash_files(ctx, ["a/*.lock"]), Unknown)
    assert hash_files(ctx, ["a/*.lock", "!a/out.lock"]) == runner_hash_files(b"one", b"one")
    assert isinstance(hash_files(ctx, ["c/x.lock", "a/x.lock"]), Unknown)
    assert isinstance(hash_files(ctx, ["--follow-symbolic-links", "a/x.lock"]), Unknown)
    assert isinstance(hash_files(ctx, ["a/./x.lock"]), Unknown)  # the runner refuses it
    assert isinstance(hash_files(ctx, ["~/x.lock"]), Unknown)  # the runner's home
    for nul in ("a/x\0.lock", "a\0/*"):  # no path holds one: not an internal error
        assert isinstance(hash_files(ctx, [nul]), Unknown)


def test_a_link_to_a_fifo_is_left_to_the_run_not_waited_on(tmp_path):
    """A committed link a/y.lock -> ../pipe, a FIFO in the checkout: the file was opened with a
    plain open(), which waits for a writer for ever, and with it the dry run."""
    root, ctx = checkout(tmp_path)
    os.mkfifo(root / "pipe")
    (root / "a" / "y.lock").symlink_to("../pipe")
    got: list = []
    worker = threading.Thread(target=lambda: got.append(hash_files(ctx, ["a/*.lock"])))
    worker.daemon = True
    worker.start()
    worker.join(20)
    if not got:  # release the reader still waiting in open(), then fail
        os.close(os.open(root / "pipe", os.O_RDWR | os.O_NONBLOCK))
    assert got, "still waiting on the FIFO after 20 s"
    assert isinstance(got[0], Unknown), got
    assert hash_files(ctx, ["a/x.lock"]) == runner_hash_files(b"one")


def test_a_call_holding_a_nul_is_left_to_the_run_after_the_call_it_spells(tmp_path):
    """The memo keyed a call on its texts joined by NUL: hashFiles('a/x.lock', 'a') and then
    hashFiles('a/x.lock\\0a') shared one key, so the second got the first's definite value."""
    _, ctx = plan_checkout(tmp_path)
    assert hash_files(ctx, ["a/x.lock", "a"]) == runner_hash_files(b"one")
    assert isinstance(hash_files(ctx, ["a/x.lock\0a"]), Unknown)
    assert isinstance(hash_files(ctx, ["a/x.lock\0", "a"]), Unknown)


def test_a_pattern_longer_than_a_plan_compiles_is_left_to_the_run(tmp_path, monkeypatch):
    """A 400,000-character pattern from env was compiled by fnmatch on every call, counted
    nowhere: a line past MAX_PATTERN is left to the run, and compiling one counts against the
    names a plan compares."""
    _, ctx = plan_checkout(tmp_path)
    long = "a/" + "*" * _hash_files.MAX_PATTERN + ".lock"  # it would match a/x.lock
    assert isinstance(hash_files(ctx, [long]), Unknown)
    assert isinstance(hash_files(ctx, ["a/x.lock\n" + long]), Unknown)
    monkeypatch.setattr(_hash_files, "MAX_COMPARED", 5_000)
    past = hash_files(ctx, ["a/" + "*" * 600 + "x.lock"])  # 607 characters to compile
    assert isinstance(past, Unknown) and "past what a plan hashes" in past.why, past
    _, fresh = plan_checkout(tmp_path / "next")
    assert hash_files(fresh, ["a/" + "*" * 60 + "x.lock"]) == runner_hash_files(b"one")


def test_a_folder_of_more_names_than_a_plan_walks_is_not_read_whole(tmp_path, monkeypatch):
    """The walk counted a folder's names against MAX_WALKED only once all of them were read
    and sorted: a checkout's folder of millions of empty files was held whole in memory before
    the value was left to the run. The names are counted as they are listed."""
    root, ctx = plan_checkout(tmp_path)
    (root / "many").mkdir()
    for i in range(200):
        (root / "many" / f"f{i:03}").write_bytes(b"")
    monkeypatch.setattr(_hash_files, "MAX_WALKED", 50)
    read = count_listed(monkeypatch)
    value = hash_files(ctx, ["many/**"])
    assert isinstance(value, Unknown) and "past what a plan hashes" in value.why, value
    assert len(read) <= 51
    assert isinstance(hash_files(ctx, ["a/x.lock"]), Unknown)  # the plan's walk is spent
