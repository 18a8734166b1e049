"""The CLI as a user meets it: help, exit codes, one-line errors, lazy imports."""

import contextlib
import io
import json
import subprocess
import sys

import pytest

from gpuci.commands import all_commands, iter_leaf_commands
from gpuci_testing import clean_env, gh_env, parse_file_command, run_cli, run_cli_here

ACTION_COMMANDS = ("gpu-setup", "cache-weights", "retry-fetch", "gpu-smoke", "dry-run")


def test_help_lists_every_command():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for name in ACTION_COMMANDS:
        assert name in proc.stdout
    for cmd in all_commands():
        assert cmd.name in proc.stdout
    assert "exit codes: 0 ok, 1 a check failed, 2 bad input" in proc.stdout


def test_help_does_not_import_heavy_libraries():
    code = (
        "import sys, contextlib, io\n"
        "from gpuci.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "print(','.join(m for m in ('boto3','botocore','httpx','pynvml','yaml','tenacity')"
        " if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_every_input_is_a_flag_of_the_same_name():
    for full_name, cmd in iter_leaf_commands():
        proc = run_cli_here(*full_name.split(), "--help")
        assert proc.returncode == 0, proc.stderr
        for spec in cmd.inputs:
            assert f"--{spec.name}" in proc.stdout, (full_name, spec.name)


def test_malformed_input_exit_2_names_the_input():
    proc = run_cli_here("gpu-setup", "--min-memory-gb", "lots")
    assert proc.returncode == 2
    assert "min-memory-gb" in proc.stdout and "'lots'" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    proc = run_cli_here("gpu-setup", env=clean_env(**{"INPUT_MIN-MEMORY-GB": "lots"}))
    assert proc.returncode == 2
    assert "INPUT_MIN-MEMORY-GB" in proc.stdout


def test_malformed_input_in_actions_is_an_error_annotation(tmp_path):
    proc = run_cli("gpu-setup", env=gh_env(tmp_path, INPUT_MIN_GPUS="two"))
    assert proc.returncode == 2
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("::error")]
    assert len(lines) == 1
    assert "min-gpus" in lines[0] and "title=gpu-ci" in lines[0]


def test_json_error_shape():
    proc = run_cli("retry-fetch", "--json")  # url is required
    assert proc.returncode == 2
    body = json.loads(proc.stdout)
    assert body["ok"] is False
    assert body["report"]["error"]["type"] == "InputError"
    assert "'url' is required" in body["report"]["error"]["message"]


def test_actions_without_github_output_fail_before_any_work(tmp_path):
    metrics = tmp_path / "m.json"
    metrics.write_text('{"eval": {"accuracy": 0.9}}')
    env = clean_env(GITHUB_ACTIONS="true")
    out_dir = tmp_path / "o"
    proc = run_cli(
        "gate", "--metrics", str(metrics), "--min", "eval.accuracy=0.5",
        "--output-dir", str(out_dir), env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == [
        "::error title=gpu-ci%3A infrastructure error::running in GitHub Actions but "
        "$GITHUB_OUTPUT is not set (fix: run on a current runner (file commands replaced "
        "::set-output in 2022))"
    ]
    assert not out_dir.exists(), "no work before the platform check"


def test_usage_errors_are_one_line_naming_the_command_and_the_fix():
    for args, where, needle in (
        (("gpu-setup", "--nosuch", "1"), "gpu-setup", "unrecognized arguments: --nosuch 1"),
        (("pods",), "pods", "required: SUB-COMMAND"),
        (("cache-weights", "restore", "--key"), "cache-weights restore", "expected one argument"),
        (("nosuch",), "", "invalid choice: 'nosuch'"),
    ):
        proc = run_cli_here(*args)
        assert proc.returncode == 2
        prog = f"python -m gpuci {where}".strip()
        assert proc.stderr.splitlines() == [
            f"{prog}: bad input: {proc.stderr.split(': bad input: ')[1].strip()}"
        ]
        assert needle in proc.stderr and f"(fix: see {prog} --help)" in proc.stderr
    proc = run_cli_here("gpu-setup", "--nosuch", env=clean_env(GITHUB_ACTIONS="true"))
    assert proc.returncode == 2
    assert proc.stdout == (
        "::error title=gpu-ci%3A bad input::python -m gpuci gpu-setup: unrecognized arguments: "
        "--nosuch (fix: see python -m gpuci gpu-setup --help)\n"
    )


def test_a_closed_pipe_is_no_traceback(tmp_path):
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # like `gpuci ... | head` after head has exited: every write fails
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpuci", "gpu-setup", "--require-gpu", "false"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(GPUCI_FAKE_NVML="h200"),
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    # The check ran; only its report had no reader: the check's own exit code, no traceback.
    assert proc.returncode == 0
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr


def test_an_unwritable_journal_is_one_infra_line_not_an_internal_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    metrics = tmp_path / "m.json"
    metrics.write_text('{"eval": {"accuracy": 0.9}}')
    env = clean_env(GPUCI_JOURNAL=str(blocker / "journal.jsonl"))  # a folder that is a file
    proc = run_cli(
        "gate", "--metrics", str(metrics), "--min", "eval.accuracy=0.5",
        "--output-dir", str(tmp_path / "o"), env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 3
    first = proc.stdout.splitlines()[0]
    assert first.startswith("gate: infrastructure error: cannot write the job journal ")
    assert "(fix: set GPUCI_JOURNAL to a writable file" in first
    assert "internal error" not in proc.stdout and "Traceback" not in proc.stderr


def test_boolean_outputs_are_false_not_empty_after_an_error(tmp_path):
    restore = ("cache-weights", "restore", "--key", "k", "--path", "p", "--store", "ftp://x")
    for args, name in (
        (("gpu-smoke", "--checks", "bogus"), "passed"),
        (("gate", "--metrics", "m.json"), "passed"),  # no rules: bad input
        (restore, "cache-hit"),
    ):
        body = json.loads(run_cli_here(*args, "--json", cwd=tmp_path).stdout)
        assert body["exit_code"] == 2, body
        assert body["outputs"][name] == "false", (args, body["outputs"])
    out = tmp_path / "out"
    out.write_text("")
    env = clean_env(GITHUB_ACTIONS="true", GITHUB_OUTPUT=str(out))
    assert run_cli_here("gpu-smoke", "--checks", "bogus", env=env, cwd=tmp_path).returncode == 2
    assert parse_file_command(out.read_text(), "GITHUB_OUTPUT") == {"passed": "false"}


def _help(parser, words: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args([*words, "--help"])
    return out.getvalue()


def test_a_command_parsed_alone_reads_as_in_the_whole_cli():
    """main() builds only the invoked command's parser (start-up): same flags, same help."""
    from gpuci.cli import build_parser
    from gpuci.commands import command_named

    whole = build_parser()
    assert command_named("no-such-command") is None
    for full_name, _ in iter_leaf_commands():
        words = full_name.split()
        top = command_named(words[0])
        assert top is not None and top.name == words[0]
        assert _help(build_parser(top), words) == _help(whole, words), full_name
        if len(words) > 1:  # main() narrows a sub-command's parser to that sub-command
            assert _help(build_parser(top, words[1]), words) == _help(whole, words), full_name


def _plain_lines(full_name: str, cmd, rng) -> list[list[str]]:
    """Command lines of the kind actions and scripts write, in many spellings."""
    values = ["v", "", "a b", "s3://bucket/prefix", "x=y", "a--b", "1", "true", "\u00e9t\u00e9"]
    lines = []
    for _ in range(40):
        words = full_name.split()
        for spec in rng.sample(list(cmd.inputs), k=min(len(cmd.inputs), rng.randint(0, 6))):
            for _ in range(2 if spec.kind == "lines" else rng.randint(1, 2)):
                value = rng.choice(values)
                form = rng.choice(
                    ["split", "equals", "bare"] if spec.kind == "bool" else ["split", "equals"]
                )
                if form == "split":
                    words += [spec.flag, value]
                elif form == "equals":
                    words.append(f"{spec.flag}={value}")
                else:
                    words.append(spec.flag)
            if rng.random() < 0.3:
                words.append(rng.choice(["--json", "--dry-run", "--probe"]))
        lines.append(words)
    return lines


def test_a_plain_command_line_reads_as_argparse_reads_it():
    """main() reads plain command lines without argparse (start-up): the same namespace, and
    anything else is left to argparse (help, errors, abbreviations, values that start with -)."""
    import random

    from gpuci.cli import _plain_args, build_parser

    whole = build_parser()
    rng = random.Random(28)
    read = 0
    for full_name, cmd in iter_leaf_commands():
        for words in _plain_lines(full_name, cmd, rng):
            fast = _plain_args(words)
            if cmd.positional or cmd.target is None:
                assert fast is None, words
                continue
            assert fast is not None, words
            parsed, extra = whole.parse_known_args(words)
            assert extra == [] and vars(parsed) == vars(fast), words
            read += 1
    assert read > 500
    restore = ["cache-weights", "restore", "--key", "k"]
    for words in (
        [*restore, "--ke", "k"],  # an abbreviation argparse would accept
        [*restore, "--path", "-p"],  # a value that looks like a flag
        [*restore, "--path"],  # no value
        [*restore, "--json=yes"],
        [*restore, "--help"],
        [*restore, "stray"],
        ["cache-weights", "--json", "restore"],
        ["cache-weights", "bogus"],
        ["cache-weights"],
        ["--version"],
        [],
        [*restore, "--fail-on-miss", "-1"],
    ):
        assert _plain_args(words) is None, words


def test_a_plain_restore_does_not_import_argparse():
    code = (
        "import sys, contextlib, io\n"
        "from gpuci.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['cache-weights', 'restore', '--key', 'k', '--store', 'file:///nonexistent/x',"
        " '--lookup-only', '--json'])\n"
        "print(','.join(m for m in ('argparse', 'shutil', 'shlex') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "", proc.stdout


def test_every_action_is_a_command_of_the_same_name(tmp_path):
    """The README's promise: `python -m gpuci <action>` runs the action's command, for every
    folder under actions/ (metric-gate is gate, gpu-pod is pods), on both parsing paths."""
    from pathlib import Path

    from gpuci.commands import command_named

    repo = Path(__file__).resolve().parents[1]
    names = sorted(
        {p.relative_to(repo / "actions").parts[0] for p in repo.glob("actions/**/action.yml")}
    )
    assert {"gpu-pod", "metric-gate"} <= set(names)
    for name in names:
        assert command_named(name) is not None, name
        proc = run_cli_here(name, "--help")
        assert proc.returncode == 0 and "usage:" in proc.stdout, (name, proc.stderr)
    assert command_named("metric-gate") is command_named("gate")
    assert command_named("gpu-pod") is command_named("pods")
    # Same command, same result: the plain reading (no argparse) and argparse's.
    for words in (["ls", "--dry-run", "--json"], ["ls", "--dry-run", "--json", "--all"]):
        env = clean_env(GPUCI_PODS_LEDGER=str(tmp_path / "ledger"))
        alias, real = (run_cli_here(name, *words, env=env) for name in ("gpu-pod", "pods"))
        assert alias.returncode == real.returncode == 0, alias.stdout + alias.stderr
        assert json.loads(alias.stdout) == json.loads(real.stdout)
    metrics = tmp_path / "m.json"
    metrics.write_text('{"acc": 0.5}')
    env = clean_env()
    args = ("--metrics", str(metrics), "--min", "acc=0.9", "--output-dir", str(tmp_path), "--json")
    gate = run_cli_here("metric-gate", *args, env=env, cwd=tmp_path)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert json.loads(gate.stdout)["outputs"]["passed"] == "false"
    assert json.loads(gate.stdout)["command"] == "gate"
    help_text = run_cli_here("--help").stdout
    assert "gate (metric-gate)" in help_text and "pods (gpu-pod)" in help_text


def test_a_fetch_imports_neither_the_s3_stack_nor_httpx_s_own_cli(tmp_path):
    """retry-fetch runs on httpx alone: no botocore (S3's), and not the click, rich and
    pygments that ``import httpx`` loads for the ``httpx`` program (a third of the start-up)."""
    import functools
    import hashlib
    from http.server import SimpleHTTPRequestHandler

    from loopback_http import LoopbackHTTPServer

    (tmp_path / "blob").write_bytes(b"x" * 4096)
    digest = hashlib.sha256(b"x" * 4096).hexdigest()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    heavy = ("boto3", "botocore", "click", "rich", "pygments", "gpuci.charts", "gpuci.cache")
    with LoopbackHTTPServer(handler) as server:  # type: ignore[arg-type]
        url = f"http://127.0.0.1:{server.port}/blob"
        code = (
            "import sys, contextlib, io\n"
            "from gpuci.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    code = main(['retry-fetch', '--url', {url!r}, '--sha256', {digest!r},"
            f" '--dest', {str(tmp_path / 'got')!r}, '--json'])\n"
            f"print(code, ','.join(m for m in {heavy!r} if m in sys.modules))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
        )
    assert proc.stdout.split(" ") == ["0", "\n"], proc.stdout + proc.stderr
    assert (tmp_path / "got").read_bytes() == b"x" * 4096


def test_httpx_s_own_cli_still_runs_when_called(tmp_path):
    """The stand-in for httpx._main imports the real one when called (nothing breaks)."""
    code = (
        "import sys\n"
        "from gpuci.cli import _spare_httpx_cli\n"
        "_spare_httpx_cli()\n"
        "import httpx\n"
        "assert 'click' not in sys.modules\n"
        "sys.argv = ['httpx', '--help']\n"
        "httpx.main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: httpx" in proc.stdout


def _stopped_restore(tmp_path, **extra: str) -> subprocess.CompletedProcess[str]:
    """A restore whose command raises gpuci.retry.Interrupted with no Ctrl-C (another thread's
    failure set a stop flag, and no failure was recorded as the cause), through ``main``."""
    code = (
        "import sys\n"
        "import gpuci.cache._restore.command as command\n"
        "from gpuci.cli import main\n"
        "from gpuci.retry import Interrupted\n"
        "def run(*_args):\n"
        '    raise Interrupted("the store\'s requests were stopped")\n'
        "command.run = run\n"
        "sys.exit(main(['cache-weights', 'restore', '--key', 'k', '--store',"
        f" {(tmp_path / 's').as_uri()!r}]))\n"
    )
    env = clean_env(**extra)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )


def test_an_interrupted_with_no_ctrl_c_is_one_infra_line_not_a_traceback(tmp_path):
    """Interrupted is a BaseException (a retry's wait ends at once): one that reaches the
    command with no Ctrl-C behind it went past every ``except Exception``, out of
    ``python -m gpuci`` as a traceback and exit 1. It is one line and exit 3 (a Ctrl-C, a
    KeyboardInterrupt, keeps its "interrupted" and 130: test_sec_s3_interrupt.py)."""
    proc = _stopped_restore(tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "interrupted\n" not in proc.stderr, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if "stopped" in x]
    assert "the command did not finish: the store's requests were stopped" in line
    assert "with no failure recorded as the cause" in line and "GPUCI_DEBUG=1" in line
    debug = _stopped_restore(tmp_path, GPUCI_DEBUG="1")  # kept debuggable
    assert "Traceback" in debug.stderr and "Interrupted" in debug.stderr, debug.stderr
