"""What a PR's code writes into the gate is input: metrics, baselines, an edited gate report.

Hostile files end in one line (never a traceback or "internal error"): the metrics file fails
the gate (exit 1, recorded and reported, like any unusable metrics), a baseline or a report's
input is bad input (exit 2). Text from those files reaches the summary, which becomes the PR
comment or MR note, only as inert Markdown: no HTML, links, mentions or references.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from training_cli import run_gate, write_json

from gpuci import journal, markdown, untrusted_json
from gpuci.runtime import markdown_table
from gpuci.training import _ci as ci
from gpuci.training import _provenance as provenance
from gpuci.training import _report as report
from gpuci_testing import clean_env, gh_env, run_cli_here

DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = '{"eval": {"accuracy": ' + "9" * 5001 + "}}"
# Each would be live Markdown in a PR comment if printed as is.
HOSTILE = (
    '<img src="http://tracker.invalid/p.png"> [click](http://evil.invalid) '
    "![x](http://evil.invalid/i.png) @octocat #1 www.evil.invalid https://evil.invalid/a "
    "`code` | pipe \\| \nsecond line <!-- hidden --> &#64;octocat GH-2 !3 &4"
)
# Each is refused however it is read: the reason names the cap it breaks.
HOSTILE_JSON = pytest.mark.parametrize(
    ("content", "why"),
    [(DEEP, "nested more than 64 levels deep"), (HUGE_INT, "an integer of 5001 digits")],
    ids=["deep", "huge-int"],
)


def _live(text: str) -> list[str]:
    """The live constructs in Markdown text, outside code spans, as a renderer would see them."""
    outside = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)  # drop well-formed code spans
    outside = outside.replace("&#8203;", "\u200b")  # a zero-width space breaks what it is in
    outside = outside.replace("&amp;", "&")  # as GitLab's reference filters read the text
    found = []
    for pattern in (
        r"(?<!\\)<[A-Za-z!/]",  # an HTML tag, comment or autolink
        r"(?<!\\)\]\(",  # the middle of a link or image
        r"@[A-Za-z0-9]",  # a mention
        r"#[0-9]",  # an issue reference
        r"(?i)https?://|www\.",  # a bare link
        r"&#[0-9]",  # an entity (a mention or tag spelled as one)
        r"(?i)gh-[0-9]",  # an issue reference on GitHub
        r"[!&][0-9]",  # a merge request or epic reference on GitLab
    ):
        found += re.findall(pattern, outside)
    return found


def gate(tmp_path: Path, metrics: str, baseline: str | None = None):
    regression = () if baseline is None else ("--max-regression", "accuracy=0.1")
    flags = ("--min", "accuracy=0.5", *regression)
    return run_gate(tmp_path, metrics, *flags, env=gh_env(tmp_path), baseline=baseline)


def _one_line_no_traceback(proc, expected: str) -> None:
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and "internal error" not in text, text
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("::error")]
    assert any(expected in ln for ln in errors), text


@HOSTILE_JSON
def test_hostile_metrics_fail_the_gate_in_one_line(tmp_path, content, why):
    proc = gate(tmp_path, content)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _one_line_no_traceback(proc, why)
    record = json.loads((tmp_path / "o" / "gate.json").read_text())
    assert record["passed"] is False and why in record["metrics_error"]


@HOSTILE_JSON
def test_hostile_baseline_is_bad_input_in_one_line(tmp_path, content, why):
    proc = gate(tmp_path, '{"eval": {"accuracy": 0.9}}', baseline=content)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    _one_line_no_traceback(proc, why)


def test_metrics_over_the_size_cap_are_refused_unread(tmp_path):
    path = tmp_path / "m.json"
    with path.open("wb") as handle:  # sparse: the cap, not the disk, is what is tested
        handle.write(b'{"accuracy": 0.9}')
        handle.truncate(untrusted_json.MAX_BYTES + 1)
    proc = run_gate(tmp_path, path, "--min", "accuracy=0.5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"is not usable metrics: it is over {untrusted_json.MAX_BYTES >> 20} MiB" in proc.stdout


def test_a_long_log_is_read_from_its_end(tmp_path):
    """A JSON-lines log longer than the cap is not refused: only its last lines matter (its
    digest is the whole file's, read once)."""
    import hashlib

    from gpuci.training._metrics import load_hashed

    path = tmp_path / "train.jsonl"
    with path.open("wb") as handle:
        handle.write(b'{"accuracy": 0.2, "torn": "' + b"x" * (3 << 20))  # cut inside this line
        handle.truncate(untrusted_json.MAX_BYTES + 10)  # a long run's early steps
        handle.seek(0, 2)
        handle.write(b'\n{"accuracy": 0.1}\n{"accuracy": 0.9}\n')
    proc = run_gate(tmp_path, path, "--min", "accuracy=0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert load_hashed(path) == ({"accuracy": 0.9}, hashlib.sha256(path.read_bytes()).hexdigest())


def test_string_values_and_hostile_names_are_inert_in_the_summary(tmp_path):
    metrics = {"accuracy": HOSTILE, HOSTILE: 0.7, "eval": {"`x` | <b>@me</b>": 0.9}}
    baseline = {"accuracy": 0.9, HOSTILE: 0.6, "eval": {"`x` | <b>@me</b>": 0.8}}
    proc = gate(tmp_path, json.dumps(metrics), baseline=json.dumps(baseline))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = (tmp_path / "summary").read_text()
    assert "FAIL: not a number (str)" in summary and "| (string) |" in summary
    assert "tracker.invalid" not in summary  # the value is shown by its type only
    assert _live(summary) == [], summary
    # Every table row still has its 6 cells: no unescaped pipe split one.
    rows = [ln for ln in summary.splitlines() if ln.startswith("| ")]
    assert all(len(re.split(r"(?<!\\)\|", ln)) == 8 for ln in rows), rows


def test_report_comment_is_inert_whatever_the_gate_report_holds(tmp_path):
    """``report`` takes a gate.json by path, so an edited one is input too."""
    row = {"metric": HOSTILE, "value": HOSTILE, "rule": HOSTILE, "passed": False,
           "skipped": False, "baseline": [HOSTILE], "delta": {"x": HOSTILE},
           "verdict": HOSTILE}  # fmt: skip
    record = {
        "passed": False,
        "rows": [row, {"metric": "only a name"}],
        "failed_rules": [HOSTILE],
        "deltas": [[HOSTILE, 0.5, 0.25], [HOSTILE, HOSTILE, 1], "junk"],
    }
    body = report.render("t", record, None, (None, "n/a"), ci.RunContext(platform="local"))
    ours = r"<!-- gpuci-report:t -->|</?(details|summary|sub)>"  # the tags gpu-ci writes
    assert _live(re.sub(ours, "", body)) == [], body
    assert "+0.25" in body  # the numeric delta row is kept, the others left out

    path = write_json(tmp_path / "gate.json", record)
    proc = run_cli_here("report", "--gate-report", str(path), env=clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("content", [DEEP, HUGE_INT, "{"], ids=["deep", "huge-int", "torn"])
def test_report_inputs_that_are_not_usable_exit_2_in_one_line(tmp_path, content):
    for flag in ("--gate-report", "--provenance"):
        path = tmp_path / "in.json"
        path.write_text(content)
        proc = run_cli_here("report", flag, str(path), env=clean_env(), cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "is not usable: it " in proc.stdout
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stdout


@pytest.mark.parametrize(
    "value",
    [
        HOSTILE,
        "a|b",
        "`",
        "``x``",
        "\\",
        "\\|",
        "<script>",
        "x\r\n| evil | row |",
        "[a]: http://evil.invalid",
    ],
)
def test_every_table_cell_is_inert(value):
    """markdown.table (runtime.markdown_table) is the one path for every table gpu-ci writes."""
    out = markdown_table(["a", "b", "c"], [(value, markdown.Code(value), markdown.Link(value))])
    assert len(out.splitlines()) == 3, out
    assert _live(out) == [], out
    assert len(re.split(r"(?<!\\)\|", out.splitlines()[2])) == 5, out


def test_a_plain_url_gpu_ci_chose_stays_clickable():
    assert markdown.cell(markdown.Link("https://abc-8000.proxy.runpod.net/")) == (
        "<https://abc-8000.proxy.runpod.net/>"
    )


@pytest.mark.parametrize(
    "event",
    ['{"pull_request": "7"}', '{"issue": [1], "pull_request": null}', DEEP, "[1, 2]"],
)
def test_an_event_file_rewritten_by_the_job_is_input(tmp_path, event):
    """GITHUB_EVENT_PATH is the runner's, but an earlier step may rewrite it: a shape or a
    nesting that is not an event's falls back to GITHUB_REF, never a traceback."""
    path = tmp_path / "event.json"
    path.write_text(event)
    env = {"GITHUB_EVENT_PATH": str(path), "GITHUB_REF": "refs/pull/12/merge"}
    assert ci._github_pr(env) == 12


def test_a_package_list_that_is_no_object_is_not_recorded(tmp_path):
    """The training interpreter's answer is untrusted: a list is no package list."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '[1, 2, 3]'\n")
    fake.chmod(0o755)
    found, why = provenance.python_environment(str(fake))
    assert found is None and "package versions not recorded" in why


def _failing_rows(count: int, name: str) -> list[dict]:
    row = {"kind": "min", "value": 0.5, "passed": False, "skipped": False}
    return [
        {**row, "metric": f"{i} {name}", "rule": f"{i} {name} >= 0.9", "verdict": "FAIL: below 0.9"}
        for i in range(count)
    ]


def test_a_long_comment_is_cut_between_lines_with_every_block_closed():
    """Cut mid-line, a code span could stay open and the PR's text after it be live Markdown."""
    name = HOSTILE.replace("\n", " ") + " a" * 300
    deltas = [[f"{i} {name}", 0.5, 0.25] for i in range(60)]
    record = {"passed": False, "rows": _failing_rows(150, name), "deltas": deltas}
    body = report.render("t", record, None, (None, "n/a"), ci.RunContext(platform="local"))
    assert len(body) <= report.MAX_BODY
    assert body.startswith("<!-- gpuci-report:t -->\n\n") and body.endswith("\n\n_(truncated)_")
    ours = r"<!-- gpuci-report:t -->|</?(details|summary|sub)>|```mermaid\n.*?\n```"
    assert _live(re.sub(ours, "", body, flags=re.S)) == [], body[-2000:]
    rows = [ln for ln in body.splitlines() if ln.startswith("| ")]
    assert rows and all(ln.endswith(" |") for ln in rows), rows[-1]  # whole rows only
    assert body.count("<details>") == body.count("</details>")
    assert sum(ln.startswith("```") for ln in body.splitlines()) % 2 == 0


def test_a_name_in_a_table_cell_is_shortened():
    name = "x" * 70_000
    record = {"passed": False, "rows": _failing_rows(1, name), "deltas": [[name, 0.5, 0.25]]}
    body = report.render("t", record, None, (None, "n/a"), ci.RunContext(platform="local"))
    assert "_(truncated)_" not in body
    assert max(len(ln) for ln in body.splitlines()) < 1000


def test_a_cut_closes_the_details_and_fence_it_leaves_open():
    details = "<details><summary>all</summary>\n\n" + "| a | b |\n" * 100 + "\n</details>"
    body = report.fit("<!-- m -->", details, limit=300)
    assert len(body) <= 300 and body.endswith("| a | b |\n\n</details>\n\n_(truncated)_")
    fence = "```mermaid\n" + "    x\n" * 100 + "```"
    assert report.fit("<!-- m -->", fence, limit=300).endswith("    x\n```\n\n_(truncated)_")


def test_the_provenance_line_is_inert_whatever_the_record_holds():
    prov = {"statement_digest": HOSTILE, "artifacts": [], "datasets": [{"key": HOSTILE}]}
    body = report.render("t", None, prov, (None, "n/a"), ci.RunContext(platform="local"))
    line = next(ln for ln in body.splitlines() if ln.startswith("- **Provenance:**"))
    assert _live(line) == [], line
    assert "; 0 artifact(s); data: " in line


@pytest.mark.parametrize(
    ("prov", "shown"),
    [
        ({"statement_digest": "d", "artifacts": 5, "datasets": []}, "`d`; ? artifact(s)"),
        ({"statement_digest": "d", "artifacts": [], "datasets": ["s", 7]}, "`d`; 0 artifact(s)"),
        ({"statement_digest": 5, "artifacts": {}, "datasets": "s"}, "`5`; ? artifact(s)"),
    ],
)
def test_a_provenance_record_of_another_shape_is_reported_not_a_crash(tmp_path, prov, shown):
    gate_path = write_json(tmp_path / "gate.json", {"passed": True, "rows": []})
    prov_path = write_json(tmp_path / "p.json", prov)
    args = ("--gate-report", str(gate_path), "--provenance", str(prov_path))
    proc = run_cli_here("report", *args, env=clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"- **Provenance:** {shown}\n" in proc.stdout + "\n"


@pytest.mark.parametrize(
    "record",
    [
        {"passed": False, "rows": "abc"},
        {"passed": False, "rows": [1, 2]},
        {"passed": False, "rows": {"a": 1}},
        {"passed": False, "rows": [], "failed_rules": 7},
        {"passed": True, "rows": [], "deltas": 5},
    ],
)
def test_a_gate_report_of_another_shape_is_reported_not_a_crash(tmp_path, record):
    path = write_json(tmp_path / "gate.json", record)
    proc = run_cli_here("report", "--gate-report", str(path), env=clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = "gate passed" if record["passed"] else "gate failed"
    assert proc.stdout.startswith(f"report: ok: {verdict}; comment skipped"), proc.stdout


@pytest.mark.parametrize("started", ["abc", None, -1e308, 1e308, True, 1000.0 - 40 * 86400])
def test_a_gpu_setup_time_that_is_no_time_in_this_job_is_not_measured(tmp_path, started):
    """The journal is the job's, so the PR's code may have written the gpu-setup record."""
    env = {"GPUCI_JOURNAL": str(tmp_path / "journal.jsonl")}
    journal.record("gpu-setup", {"gpus": [{}], "time": started}, env)
    minutes, why = report.gpu_minutes(env, None, now=1000.0)
    assert minutes is None and "gpu-setup record's time" in why


def test_a_gpu_setup_time_in_the_journal_never_stops_report(tmp_path):
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"))
    journal.record("gpu-setup", {"gpus": [{}], "time": "abc"}, env)
    proc = run_cli_here("report", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "**GPU time:** not measured (the gpu-setup record's time is missing" in proc.stdout


@pytest.mark.parametrize("reader", ["read_text", "read_tail"])
def test_a_fifo_planted_as_a_metrics_file_is_refused_not_waited_on(tmp_path, reader):
    """A PR's step can make ``metrics.json`` (or the log the gate reads from its end) a FIFO:
    ``open`` would wait for a writer for ever. It is no regular file, so it is not usable."""
    import os

    from gpuci_testing import outcome_in_thread

    fifo = tmp_path / "metrics.json"
    os.mkfifo(fifo)
    got = outcome_in_thread(lambda: getattr(untrusted_json, reader)(fifo))
    if not got:  # release the reader still waiting in open(), then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert got, "still waiting on the FIFO after 60 s"
    (error,) = got
    assert isinstance(error, untrusted_json.Unusable) and "not a regular file" in str(error)


# A name longer than a file system allows: Path.is_file() raised ENAMETOOLONG (and EACCES for a
# link into /proc/1/cwd), where a missing file is False.
TOO_LONG = "m" * 300 + ".json"


def test_a_metrics_path_that_cannot_be_looked_at_fails_the_gate_in_one_line(tmp_path):
    """The metrics file is the PR's to place: one the system refuses to stat ended the gate in
    an internal error, with no gate.json; it is unusable metrics (exit 1), a baseline so is
    bad input (exit 2)."""
    proc = gate(tmp_path, tmp_path / TOO_LONG)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _one_line_no_traceback(proc, "is not usable metrics: it cannot be read (File name too long)")
    assert json.loads((tmp_path / "o" / "gate.json").read_text())["passed"] is False
    flags = ("--min", "accuracy=0.5", "--baseline", str(tmp_path / TOO_LONG))
    proc = run_gate(tmp_path, '{"eval": {"accuracy": 0.9}}', *flags, env=gh_env(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    _one_line_no_traceback(proc, "baseline file")
    too_long = str(tmp_path / TOO_LONG)
    flags = ("--metrics", too_long, "--baseline", too_long, "--min", "a=1")
    proc = run_cli_here("gate", *flags, env=clean_env(GPUCI_DRY_RUN="true"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not there yet (training writes it)" in proc.stdout, proc.stdout


@pytest.mark.parametrize("path", [5, ["a"], {"a": 1}, TOO_LONG])
def test_a_journal_record_naming_no_usable_path_is_passed_over(tmp_path, path):
    """The journal lies in RUNNER_TEMP, where the PR's code writes too: a provenance record
    whose ``record`` (or a gate record whose ``metrics_path``) is no path, or one too long,
    ended report and provenance in an internal error (Path(5): TypeError)."""
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"))
    journal.record("provenance", {"record": path}, env)
    proc = run_cli_here("report", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    journal.record("gate", {"passed": False, "rows": [], "metrics_path": path}, env)
    (tmp_path / "model.pt").write_bytes(b"w")
    proc = run_cli_here("provenance", "--artifacts", "model.pt", env=env, cwd=tmp_path)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "internal error" not in text and "Traceback" not in text, text


@pytest.mark.parametrize("name", ["m.json", "m.jsonl"])
def test_a_metrics_file_swapped_once_read_is_hashed_as_judged(tmp_path, monkeypatch, name):
    """The PR's training may leave a process behind that swaps ``metrics.json`` (or the log)
    once the gate has opened it: for other numbers, for nothing, for a FIFO. gate.json's
    metrics_sha256 came from a second open (another file's digest beside this one's verdict,
    or none); it is the sha256 of the very bytes judged. Provenance, reading later, records
    one read's values and digest and says the file is not the one the gate judged."""
    import hashlib
    import os

    from gpuci.training import _gate
    from gpuci.training.options import GateInputs

    path, judged, other = tmp_path / name, b'{"a": 2}\n', b'{"a": 0}\n'
    real_open = untrusted_json.open_regular

    def replace() -> None:
        (tmp_path / "new").write_bytes(other)
        os.replace(tmp_path / "new", path)

    inp = GateInputs(metrics=str(path), min=["a=1"])
    for swap in (replace, path.unlink, lambda: (path.unlink(), os.mkfifo(path))):
        path.unlink(missing_ok=True)
        path.write_bytes(judged)
        swapped: list[bool] = []

        def opened(named, swap=swap, swapped=swapped, **kwargs):
            handle = real_open(named, **kwargs)
            if Path(named).name == path.name and not swapped:  # opened in its folder
                swapped.append(swap() or True)
            return handle

        monkeypatch.setattr(untrusted_json, "open_regular", opened)
        record, _ = _gate.evaluate(inp, _gate.parse_all(inp))
        assert swapped and record["passed"] is True
        assert record["metrics_sha256"] == hashlib.sha256(judged).hexdigest()
    monkeypatch.setattr(untrusted_json, "open_regular", real_open)
    path.unlink()
    replace()
    monkeypatch.setattr(provenance, "python_environment", lambda python: (None, ""))
    prov, warnings = provenance.build_record(
        [], environ=clean_env(), metrics_path=str(path), gate=record, python=None
    )
    assert prov["metrics"]["sha256"] == hashlib.sha256(other).hexdigest()
    assert prov["metrics"]["values"] == {"a": 0}
    assert any("changed since the gate judged it" in w for w in warnings), warnings


def test_a_metrics_file_that_links_out_of_its_workspace_is_not_read(tmp_path):
    """Training (in a container with the checkout mounted, say) makes ``metrics.json`` a link
    to a JSON of the runner's credentials: the gate judged it, and provenance recorded and
    attested every value in it. A link out of the workspace is unusable metrics (one line,
    exit 1, nothing of it recorded); one that stays inside is read as before."""
    secret = tmp_path / "home" / "creds.json"
    secret.parent.mkdir()
    secret.write_text('{"accuracy": 0.9, "refresh_token": "s3cr3t-value"}')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "metrics.json").symlink_to(secret)
    (workspace / "out.json").write_text('{"accuracy": 0.9}')
    (workspace / "latest.json").symlink_to("out.json")
    (workspace / "model.pt").write_bytes(b"w")
    flags = ("--min", "accuracy=0.5", "--artifacts", str(workspace / "model.pt"))
    proc = run_gate(workspace, workspace / "metrics.json", *flags, env=gh_env(workspace))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _one_line_no_traceback(proc, "metrics.json is not usable metrics: it is a link out of")
    written = "".join(p.read_text() for p in (workspace / "o").iterdir() if p.is_file())
    assert "s3cr3t" not in written + proc.stdout + proc.stderr
    assert '"metrics_sha256": ""' in written
    proc = run_gate(workspace, workspace / "latest.json", *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_metrics_in_a_folder_linked_out_of_the_workspace_name_the_path_to_give(
    tmp_path, monkeypatch
):
    """``outputs/`` a link to a scratch disk (a self-hosted runner's): the metrics file in it
    is a link out of the workspace, refused as one to a secret would be. The line said only
    that, of a file that is no link itself: it now names where it leads, the path to give
    instead, and that path is read."""
    from gpuci.errors import CheckFailed, InputError
    from gpuci.training import _gate
    from gpuci.training._metrics import load
    from gpuci.training.options import GateInputs

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    write_json(scratch / "metrics.json", {"accuracy": 0.9})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "outputs").symlink_to(scratch)
    monkeypatch.chdir(workspace)
    real = os.path.realpath(scratch / "metrics.json")
    with pytest.raises(CheckFailed) as err:
        load("outputs/metrics.json")
    assert f"it is a link out of {os.getcwd()}, to {real}" in err.value.one_line()
    assert f"name its real path, {real}" in (err.value.hint or "")
    assert load(real) == {"accuracy": 0.9}
    inp = GateInputs(metrics=real, baseline="outputs/metrics.json", min=["accuracy=0.5"])
    with pytest.raises(InputError, match=f"baseline file .* to {re.escape(real)}"):
        _gate.evaluate(inp, _gate.parse_all(inp))


@pytest.mark.parametrize("swapped", ["file", "folder"])
def test_a_link_swapped_in_after_the_workspace_check_is_not_followed(
    tmp_path, monkeypatch, swapped
):
    """A process the training left behind swaps ``outputs/metrics.json`` (or ``outputs/``)
    for a link to a JSON of the runner's credentials once it was found inside the workspace:
    the open followed it, and the gate judged (provenance recorded) the secret's values. The
    path resolved is opened never through a link."""
    from gpuci.errors import CheckFailed
    from gpuci.training import _metrics

    secret = tmp_path / "home" / "metrics.json"
    secret.parent.mkdir()
    secret.write_text('{"accuracy": 0.9, "refresh_token": "s3cr3t-value"}')
    workspace = tmp_path / "ws"
    (workspace / "outputs").mkdir(parents=True)
    write_json(workspace / "outputs" / "metrics.json", {"accuracy": 0.5})
    monkeypatch.chdir(workspace)
    real_check = _metrics.in_workspace

    def check_then_swap(named):
        found = real_check(named)
        if swapped == "file":
            (workspace / "outputs" / "metrics.json").unlink()
            (workspace / "outputs" / "metrics.json").symlink_to(secret)
        else:
            (workspace / "outputs").rename(workspace / "was")
            (workspace / "outputs").symlink_to(secret.parent)
        return found

    monkeypatch.setattr(_metrics, "in_workspace", check_then_swap)
    with pytest.raises(CheckFailed) as err:
        _metrics.load_hashed("outputs/metrics.json")
    assert "link" in err.value.one_line() and "s3cr3t" not in err.value.one_line()


def test_metrics_under_a_folder_that_cannot_be_listed_are_still_read(tmp_path, monkeypatch):
    """A folder on the way that is searchable, not readable (a home of mode 0711): the walk
    down by descriptors cannot open it, so the file is opened by its path, never through a
    link at its end, as before."""
    from gpuci import files
    from gpuci.training._metrics import load

    write_json(tmp_path / "metrics.json", {"accuracy": 0.9})

    def unreadable(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files, "open_below", unreadable)
    assert load(tmp_path / "metrics.json") == {"accuracy": 0.9}


def test_a_log_of_lines_that_are_no_json_is_given_up_on_after_its_last_lines(tmp_path, monkeypatch):
    """Every line of a log was tried as JSON, from its end: 16 MiB of short lines that are
    no JSON took 90 s and 500 MB to refuse. Only the last MAX_LOG_LINES are looked at; a
    record after a torn line or a few lines of text is still found."""
    from gpuci.errors import CheckFailed
    from gpuci.training._metrics import MAX_LOG_LINES, load

    path = tmp_path / "train.jsonl"
    path.write_text('{"accuracy": 0.9}\n' + "no json\n" * 100_000)
    tried: list[int] = []
    real = untrusted_json.loads
    monkeypatch.setattr(untrusted_json, "loads", lambda *a, **k: tried.append(1) or real(*a, **k))
    with pytest.raises(CheckFailed, match=f"has no JSON line in its last {MAX_LOG_LINES:,} lines"):
        load(path)
    assert len(tried) <= MAX_LOG_LINES
    path.write_text('{"accuracy": 0.1}\n{"accuracy": 0.9}\n' + "step done\n" * 10 + '{"accu')
    assert load(path) == {"accuracy": 0.9}
