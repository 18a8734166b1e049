"""The Python API (gpuci.cache.api): save then restore on a file store, a miss, bad input, and
that it stands under the CLI (it never loads a command)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from treeutil import write_tree

from gpuci.cache import api
from gpuci.errors import InputError
from gpuci.runtime import Runtime
from gpuci_testing import REPO, clean_env, commands_loaded


def _rt(tmp_path: Path) -> Runtime:
    env = clean_env(HOME=str(tmp_path / "home"), GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"))
    return Runtime(env, json_mode=True, stdout=io.StringIO(), stderr=io.StringIO())


def test_save_then_restore_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(b"a" * 70_000)
    (src / "sub" / "b.txt").write_text("hello")
    store = (tmp_path / "store").as_uri()
    kw = {"store": store, "local_cache": "off", "runtime": _rt(tmp_path)}

    saved = api.save("weights-v1", str(src), **kw)  # type: ignore[arg-type]
    assert saved.outcome == "saved" and saved.files == 2 and len(saved.manifest) == 64
    again = api.save("weights-v1", [str(src)], **kw)  # type: ignore[arg-type]
    assert again.outcome == "unchanged" and again.bytes_uploaded == 0

    dest = tmp_path / "dest"
    got = api.restore("weights-v1", str(dest), **kw)  # type: ignore[arg-type]
    assert got.hit and got.matched_key == "weights-v1" and got.manifest == saved.manifest
    assert (dest / "a.bin").read_bytes() == b"a" * 70_000
    assert (dest / "sub" / "b.txt").read_text() == "hello"

    partial = api.restore(
        "weights-v2",
        str(tmp_path / "d2"),
        restore_keys=["weights-"],
        **kw,  # type: ignore[arg-type]
    )
    assert not partial.hit and partial.matched_key == "weights-v1"


def test_a_missing_key_is_a_miss_not_an_error(tmp_path: Path) -> None:
    store = (tmp_path / "store").as_uri()
    got = api.restore("nothing-here", str(tmp_path / "d"), store=store, runtime=_rt(tmp_path))
    assert not got.hit and got.matched_key == "" and got.files == 0
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "call",
    [
        lambda p, rt: api.save("", str(p), store=p.as_uri(), runtime=rt),
        lambda p, rt: api.save("bad\x01key", str(p), store=p.as_uri(), runtime=rt),
        lambda p, rt: api.save("k", [], store=p.as_uri(), runtime=rt),
        lambda p, rt: api.save("k", str(p / "absent"), store=p.as_uri(), runtime=rt),
        lambda p, rt: api.save("k", str(p), layout="zip", runtime=rt),
        lambda p, rt: api.restore("k", str(p), local_cache_mode="share", runtime=rt),
        lambda p, rt: api.restore("k", "", store=p.as_uri(), runtime=rt),
    ],
)
def test_bad_input_raises_input_error(tmp_path: Path, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError):
        call(tmp_path, _rt(tmp_path))


def test_the_api_re_exports_fetch_file() -> None:
    from gpuci.fetch import fetch_file

    assert api.fetch_file is fetch_file
    assert set(api.__all__) >= {"restore", "save", "fetch_file"}


def test_arguments_meet_the_inputs_rules_and_defaults(tmp_path: Path) -> None:
    """One declaration: the API's defaults and checks are the inputs' (RestoreInputs' fields)."""
    import inspect

    from gpuci.cache.options import RestoreInputs, SaveInputs

    said = "input 'local-cache-mode' (argument) is 'share', not one of: copy, verify, link"
    with pytest.raises(InputError, match=re.escape(said)):
        api.restore("k", str(tmp_path), local_cache_mode="share", runtime=_rt(tmp_path))
    with pytest.raises(InputError, match="store is 3, not text"):
        api.save("k", str(tmp_path), store=3, runtime=_rt(tmp_path))  # type: ignore[arg-type]
    for func, cls in ((api.restore, RestoreInputs), (api.save, SaveInputs)):
        for name, param in inspect.signature(func).parameters.items():
            if isinstance(param.default, str):
                assert param.default == getattr(cls(), name), name


# A user's script: save, save again, restore, miss; then which of gpuci's modules it loaded.
_LIBRARY_USER = """
import io, json, sys
from gpuci.cache import api
from gpuci.runtime import Runtime
src, store, dest = sys.argv[1:4]
rt = Runtime(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO())
saved = api.save("weights-v1", src, store=store, local_cache="off", runtime=rt)
again = api.save("weights-v1", src, store=store, local_cache="off", runtime=rt)
got = api.restore("weights-v1", dest, store=store, local_cache="off", runtime=rt)
miss = api.restore("other", dest + "2", store=store, local_cache="off", runtime=rt)
print(json.dumps({
    "outcomes": [saved.outcome, again.outcome, got.hit, miss.hit],
    "headline": got.result.headline,
    "modules": sorted(m for m in sys.modules if m.startswith("gpuci")),
}))
"""


def test_the_library_loads_no_command(tmp_path: Path) -> None:
    """httpx's CLI is built on its Client, not the reverse: a save and a restore through the
    API run the operations and never import a command's module, the registry or the CLI."""
    src = write_tree(tmp_path / "src", {"w.bin": b"w" * 70_000})
    env = clean_env(
        HOME=str(tmp_path / "home"),
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        PYTHONPATH=str(REPO / "src"),
    )
    args = [str(src), (tmp_path / "store").as_uri(), str(tmp_path / "dest")]
    proc = subprocess.run(
        [sys.executable, "-c", _LIBRARY_USER, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["outcomes"] == ["saved", "unchanged", True, False]
    assert got["headline"].startswith("hit: restored weights-v1, 1 files")
    assert commands_loaded(got["modules"]) == []
    assert "gpuci.cache._restore.operation" in got["modules"]  # the probe saw the operations
    assert "gpuci.cache._save.operation" in got["modules"]


def test_results_carry_the_warnings_as_text(tmp_path: Path) -> None:
    """A warning the CLI annotates reaches a Python caller as text, not only in the Result."""
    store = (tmp_path / "store").as_uri()
    rt = _rt(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    api.save("k", str(tmp_path / "src"), store=store, local_cache="off", runtime=rt)
    got = api.restore("k", str(tmp_path / "d"), include=["*.nothing"], store=store, runtime=rt)
    assert got.hit and got.files == 0
    assert len(got.warnings) == 1 and "matches nothing in k" in got.warnings[0]
    assert [a.message for a in got.result.annotations] == list(got.warnings)


@pytest.mark.parametrize(
    "module",
    [
        "gpuci.cache.api",
        "gpuci.gpu.api",
        "gpuci.fetch",
        "gpuci.gpu._setup.operation",
        "gpuci.gpu._setup.command",
        "gpuci.gpu._smoke",
        "gpuci.cache._restore.operation",
        "gpuci.cache._save.operation",
        "gpuci.cache._restore.command",
        "gpuci.cache._save.command",
    ],
)
def test_public_functions_say_args_returns_and_raises(module: str) -> None:
    """What a user (or a command) calls says what it takes, gives back and raises."""
    import importlib
    import inspect

    mod = importlib.import_module(module)
    funcs = [getattr(mod, n) for n in mod.__all__ if inspect.isfunction(getattr(mod, n))]
    assert funcs, f"{module} exports no function"
    for func in funcs:
        doc = inspect.getdoc(func) or ""
        missing = [s for s in ("Args:", "Returns:", "Raises:") if s not in doc]
        assert missing == [], f"{module}.{func.__name__}"


def test_the_api_saves_through_links_out_of_the_tree_only_when_asked(tmp_path: Path) -> None:
    """``follow_symlinks`` is the save input's: by default a link leaving the saved folder is
    skipped with a warning (a link a PR planted must not upload what it points at)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("behind the link")
    src = tmp_path / "src"
    write_tree(src, {"own.txt": "own"})
    (src / "out.txt").symlink_to(outside)
    store = str(tmp_path / "store")
    plain = api.save("k1", str(src), store=store, local_cache="off", runtime=_rt(tmp_path))
    assert plain.files == 1 and any("follow-symlinks: all" in w for w in plain.warnings)
    asked = api.save(
        "k2", str(src), store=store, local_cache="off", follow_symlinks="all", runtime=_rt(tmp_path)
    )
    assert asked.files == 2
    got = api.restore(
        "k2", str(tmp_path / "out"), store=store, local_cache="off", runtime=_rt(tmp_path)
    )
    assert got.hit and (tmp_path / "out" / "out.txt").read_text() == "behind the link"


def test_a_path_object_is_one_path_and_a_string_list_argument_one_item(tmp_path: Path) -> None:
    """``Path("models")`` raised TypeError (iterated); ``restore_keys="weights-"`` became nine
    one-letter prefixes, so ``w`` restored an unrelated key; bytes became numbered paths."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    kw = {"store": (tmp_path / "store").as_uri(), "local_cache": "off", "runtime": _rt(tmp_path)}
    assert api.save("wrong-v1", src, **kw).files == 1  # type: ignore[arg-type]
    got = api.restore("weights-v2", tmp_path / "d", restore_keys="weights-", **kw)  # type: ignore[arg-type]
    assert not got.hit and got.matched_key == ""
    for bad in ({"path": b"src"}, {"path": [1]}, {"path": "a\0b"}, {"include": None}):
        args = {"path": str(src), **bad}
        with pytest.raises(InputError):
            api.restore("k", args.pop("path"), **args, **kw)  # type: ignore[arg-type]
