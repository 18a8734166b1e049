"""The runtime renders one Result per platform; these tests read what a runner would read."""

import io
import json
import re

import pytest

from gpuci.errors import ExitCode, InfraError
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci_testing import parse_file_command


@pytest.fixture
def gh_env(tmp_path):
    files = {
        n: tmp_path / n.lower()
        for n in (
            "GITHUB_OUTPUT",
            "GITHUB_ENV",
            "GITHUB_PATH",
            "GITHUB_STATE",
            "GITHUB_STEP_SUMMARY",
        )
    }
    for f in files.values():
        f.write_text("")
    env = {"GITHUB_ACTIONS": "true", **{k: str(v) for k, v in files.items()}}
    return env, files


def sample() -> Result:
    result = Result(command="gpu-setup", headline="2 GPUs")
    result.outputs = {
        "gpu-count": 2,
        "ok": True,
        "empty": False,
        "names": "H100\nH100",
        "none": None,
    }
    result.env = {"CUDA_VISIBLE_DEVICES": "GPU-1,GPU-2"}
    result.path = ["/opt/tool/bin"]
    result.summary.append(markdown_table(["gpu", "memory"], [["H100", "80 GB"]]))
    result.warning("low: power, limit", title="Power: capped")
    return result


def test_github_file_commands_and_annotations(gh_env):
    env, files = gh_env
    out = io.StringIO()
    code = Runtime(env, stdout=out).render(sample())
    assert code == 0
    outputs = parse_file_command(files["GITHUB_OUTPUT"].read_text(), "GITHUB_OUTPUT")
    assert outputs == {
        "gpu-count": "2",
        "ok": "true",
        "empty": "false",
        "names": "H100\nH100",
        "none": "",
    }
    delimiters = re.findall(r"<<(\S+)", files["GITHUB_OUTPUT"].read_text())
    assert len(set(delimiters)) == len(delimiters) == 5  # a fresh delimiter per value
    assert parse_file_command(files["GITHUB_ENV"].read_text(), "GITHUB_ENV") == {
        "CUDA_VISIBLE_DEVICES": "GPU-1,GPU-2"
    }
    assert files["GITHUB_PATH"].read_text() == "/opt/tool/bin\n"
    assert "| H100 | 80 GB |" in files["GITHUB_STEP_SUMMARY"].read_text()
    # properties escape ':' and ','; data escapes nothing of those
    assert "::warning title=Power%3A capped::low: power, limit" in out.getvalue()
    assert "::set-output" not in out.getvalue()


def test_github_missing_file_variable_fails_loudly(gh_env):
    env, _ = gh_env
    del env["GITHUB_OUTPUT"]
    with pytest.raises(InfraError, match=r"\$GITHUB_OUTPUT is not set"):
        Runtime(env, stdout=io.StringIO()).render(sample())


def test_render_failure_is_one_escaped_redacted_annotation(gh_env):
    env, _ = gh_env
    del env["GITHUB_OUTPUT"]
    out = io.StringIO()
    rt = Runtime(env, stdout=out)
    rt.mask("s3cr3t")
    with pytest.raises(InfraError) as caught:
        rt.render(sample())
    out.truncate(0)
    out.seek(0)
    caught.value.message += " 100% (token s3cr3t)"
    assert rt.render_failure(caught.value) == 3
    assert out.getvalue() == (
        "::error title=gpu-ci%3A infrastructure error::running in GitHub Actions but "
        "$GITHUB_OUTPUT is not set 100%25 (token ***) (fix: run on a current runner "
        "(file commands replaced ::set-output in 2022))\n"
    )
    out = io.StringIO()
    assert Runtime({}, stdout=out).render_failure(InfraError("down", hint="retry")) == 3
    assert out.getvalue() == "error: down (fix: retry)\n"


def test_annotation_data_escaping(gh_env):
    env, _ = gh_env
    out = io.StringIO()
    result = Result(command="x", exit_code=ExitCode.CHECK_FAILED)
    result.error("100% broken\nsecond line")
    Runtime(env, stdout=out).render(result)
    assert "::error::100%25 broken%0Asecond line" in out.getvalue()


def test_mask_emits_add_mask_and_redacts(gh_env):
    env, files = gh_env
    out, err = io.StringIO(), io.StringIO()
    rt = Runtime(env, stdout=out, stderr=err)
    rt.mask("hunter2-token")
    rt.log("log line with hunter2-token")
    result = Result(command="x", headline="used hunter2-token")
    result.summary.append("token hunter2-token")
    rt.render(result)
    # The mask goes with the log (stderr, which the runner also parses), ahead of any line.
    assert err.getvalue() == "::add-mask::hunter2-token\nlog line with ***\n"
    assert "hunter2-token" not in out.getvalue() and "used ***" in out.getvalue()
    assert "hunter2-token" not in files["GITHUB_STEP_SUMMARY"].read_text()


def test_gitlab_dotenv_and_sections(tmp_path):
    dotenv = tmp_path / "out.env"
    env = {
        "GITLAB_CI": "true",
        "GPUCI_DOTENV": str(dotenv),
        "GPUCI_DOTENV_OUTPUTS": "gpu-count ok,names CUDA_VISIBLE_DEVICES",
    }
    out, err = io.StringIO(), io.StringIO()
    rt = Runtime(env, stdout=out, stderr=err)
    with rt.group("Checking GPUs"):
        rt.log("inside")
    rt.render(sample())
    text = err.getvalue()  # sections belong to the log, on stderr; GitLab shows both streams
    assert "section_start" not in out.getvalue()
    assert re.search(r"section_start:\d+:gpuci_1_checking_gpus\[collapsed=true\]", text)
    assert "section_end:" in text
    lines = dotenv.read_text().splitlines()
    assert "GPUCI_GPU_COUNT=2" in lines
    assert "GPUCI_OK=true" in lines
    assert "GPUCI_NAMES=H100,H100" in lines  # dotenv is one line per variable
    assert "CUDA_VISIBLE_DEVICES=GPU-1,GPU-2" in lines


def test_json_render_is_pure_json_on_stdout():
    out, err = io.StringIO(), io.StringIO()
    rt = Runtime({}, json_mode=True, stdout=out, stderr=err)
    rt.log("progress goes to stderr")
    rt.render(sample())
    body = json.loads(out.getvalue())
    assert body["outputs"]["ok"] == "true"
    assert body["exit_code"] == 0
    assert "progress goes to stderr" in err.getvalue()


def test_terminal_has_no_colour_when_not_a_tty():
    out = io.StringIO()
    result = Result(command="x", exit_code=ExitCode.CHECK_FAILED, headline="too small")
    Runtime({}, stdout=out).render(result)
    assert "\033[" not in out.getvalue()
    assert out.getvalue().startswith("x: check failed: too small")


def test_markdown_table_escapes_pipes():
    table = markdown_table(["a", "b"], [["x|y", True]])
    assert "x\\|y" in table and "| true |" in table


MIB = 1 << 20
WIDE_LINE = "| " + "é" * 300 + " |"  # 604 bytes, 304 characters: a byte limit is not a length


def huge_summary() -> Result:
    """A summary of about 3 MiB, ending inside an open ``<details>`` and code fence."""
    result = Result(command="dry-run")
    result.summary.append("## plan\n\n" + "\n".join([WIDE_LINE] * 2000))
    result.summary.append(
        "<details><summary>all</summary>\n\n```\n" + "\n".join(["x" * 80] * 25000)
    )
    return result


def _assert_cut_whole(text: str) -> None:
    assert text.endswith("\n\n_(truncated)_\n\n"), text[-200:]
    lines = text.split("\n")
    assert all(ln in ("", "## plan", WIDE_LINE, "x" * 80, "_(truncated)_") for ln in lines[5:-8])
    assert sum(ln.startswith("```") for ln in lines) % 2 == 0  # every fence closed
    assert text.count("<details>") == text.count("</details>")


def test_a_summary_over_githubs_1_mib_is_cut_at_whole_lines_with_its_blocks_closed(gh_env):
    """GitHub drops a step summary over 1 MiB whole: gpu-ci writes at most 1 MiB, in bytes,
    counting what earlier commands of the step wrote."""
    env, files = gh_env
    summary = files["GITHUB_STEP_SUMMARY"]
    Runtime(env, stdout=io.StringIO()).render(huge_summary())
    assert MIB - 1000 < summary.stat().st_size <= MIB
    _assert_cut_whole(summary.read_text(encoding="utf-8"))
    summary.write_text("earlier\n" * 1000)  # an earlier command of the same step
    Runtime(env, stdout=io.StringIO()).render(huge_summary())
    assert summary.stat().st_size <= MIB
    _assert_cut_whole(summary.read_text(encoding="utf-8")[8000:])


def test_a_gitlab_summary_is_cut_the_same_way(tmp_path):
    summary = tmp_path / "summary.md"
    env = {"GITLAB_CI": "true", "GPUCI_SUMMARY": str(summary)}
    Runtime(env, stdout=io.StringIO(), stderr=io.StringIO()).render(huge_summary())
    assert summary.stat().st_size <= MIB
    _assert_cut_whole(summary.read_text(encoding="utf-8"))


def test_a_summary_within_the_limit_is_written_whole(gh_env):
    env, files = gh_env
    result = Result(command="dry-run")
    result.summary.append("\n".join([WIDE_LINE] * 1700))  # 1,028,499 bytes: under 1 MiB
    Runtime(env, stdout=io.StringIO()).render(result)
    text = files["GITHUB_STEP_SUMMARY"].read_text(encoding="utf-8")
    assert text == result.summary[0] + "\n\n"


def _unencodable() -> Result:
    """A result quoting text no UTF-8 can hold: a PR's "\\ud800" escape, a name not UTF-8."""
    result = Result(command="dry-run", exit_code=ExitCode.CHECK_FAILED, headline="a\ud800b")
    result.outputs = {"path": "models/\udcff.bin"}
    result.summary.append("| \ud800 |")
    result.warning("pattern \udfff", title="hashFiles \ud83d")
    return result


def _strict_utf8() -> tuple[io.TextIOWrapper, io.BytesIO]:
    """A stream as sys.stdout is under a UTF-8 locale (a lone surrogate fails to encode), and
    the bytes it holds."""
    raw = io.BytesIO()
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True), raw


@pytest.mark.parametrize("platform", ["terminal", "github", "gitlab"])
def test_text_no_stream_can_encode_is_written_escaped(gh_env, tmp_path, platform):
    """Writing the result raised UnicodeEncodeError: an internal error, the result unsaid."""
    env, files = gh_env
    env = {
        "terminal": {},
        "github": env,
        "gitlab": {
            "GITLAB_CI": "true",
            "GPUCI_SUMMARY": str(tmp_path / "summary.md"),
            "GPUCI_DOTENV": str(tmp_path / "out.env"),
            "GPUCI_DOTENV_OUTPUTS": "path",
        },
    }[platform]
    (out, out_bytes), (err, err_bytes) = _strict_utf8(), _strict_utf8()
    rt = Runtime(env, stdout=out, stderr=err)
    with rt.group("step \ud800"):
        rt.log("log \ud800")
    assert rt.render(_unencodable()) == 1
    printed = out_bytes.getvalue().decode()
    assert "a\\ud800b" in printed and "\\udfff" in printed
    assert "step \\ud800" in err_bytes.getvalue().decode()
    if platform == "github":
        outputs = parse_file_command(files["GITHUB_OUTPUT"].read_text(), "GITHUB_OUTPUT")
        assert outputs == {"path": "models/\\udcff.bin"}
        assert "| \\ud800 |" in files["GITHUB_STEP_SUMMARY"].read_text()
    if platform == "gitlab":
        assert "GPUCI_PATH=models/\\udcff.bin" in (tmp_path / "out.env").read_text()
        assert "| \\ud800 |" in (tmp_path / "summary.md").read_text()


@pytest.fixture
def fifo_with_a_reader(tmp_path):
    """A FIFO something reads (so opening it to write does not wait): the fix refuses it."""
    import os

    path = tmp_path / "fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    yield path
    os.close(reader)


@pytest.mark.parametrize("what", ["fifo", "folder"])
@pytest.mark.parametrize("var", ["GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"])
def test_a_file_command_path_that_is_no_regular_file_is_one_line(
    gh_env, tmp_path, fifo_with_a_reader, var, what
):
    """The runner's files sit where a job's earlier step can replace them: before, a FIFO
    there was written (or, with no reader, held ``open`` for ever) and a folder was an
    internal error (IsADirectoryError out of render)."""
    env, _ = gh_env
    env[var] = str(fifo_with_a_reader if what == "fifo" else tmp_path)
    with pytest.raises(InfraError) as info:
        Runtime(env, stdout=io.StringIO()).render(sample())
    line = info.value.one_line()
    assert f"cannot write ${var}" in line and "\n" not in line


def test_a_gitlab_summary_path_that_is_a_fifo_is_one_line(tmp_path, fifo_with_a_reader):
    env = {"GITLAB_CI": "true", "GPUCI_SUMMARY": str(fifo_with_a_reader)}
    env["GPUCI_DOTENV"] = str(tmp_path / "out.env")
    with pytest.raises(InfraError, match="cannot write GPUCI_SUMMARY"):
        Runtime(env, stdout=io.StringIO()).render(sample())


def test_a_file_command_name_ending_in_a_newline_is_refused():
    """``re.match`` with ``$`` passed ``name\\n``: the entry's first line would be ``name``."""
    from gpuci.errors import InputError

    with pytest.raises(InputError, match="refusing to write the variable name"):
        Runtime._heredoc("name\n", "value")
