"""GitLab's dotenv report: the documented default set, configurable, merged, at most 20."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpuci import dotenv
from gpuci.errors import InputError
from gpuci.runtime import Result, Runtime


def render(env: dict[str, str], outputs: dict[str, object], **extra_env: str) -> str:
    result = Result(command="x", headline="done", outputs=outputs)
    result.env = dict(extra_env)
    out, err = io.StringIO(), io.StringIO()
    Runtime({"GITLAB_CI": "true", **env}, stdout=out, stderr=err).render(result)
    return out.getvalue() + err.getvalue()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_only_the_default_set_is_written(tmp_path):
    report = tmp_path / "out.env"
    render(
        {"GPUCI_DOTENV": str(report)},
        {"pod-id": "p1", "url": "http://x", "status": "RUNNING", "data-center": "EU"},
        CUDA_VISIBLE_DEVICES="GPU-1",  # this machine's GPUs: wrong in a later job elsewhere
    )
    assert lines(report) == ["GPUCI_POD_ID=p1", "GPUCI_URL=http://x"]


def test_a_smoke_names_its_skipped_checks_to_later_jobs(tmp_path):
    """A check the smoke skipped (budget, environment) is never silent, in a later job too."""
    report = tmp_path / "out.env"
    render(
        {"GPUCI_DOTENV": str(report)},
        {"passed": "true", "failed-checks": "", "skipped-checks": "gpu7:pcie", "seconds": 29},
    )
    assert lines(report) == [
        "GPUCI_PASSED=true",
        "GPUCI_FAILED_CHECKS=",
        "GPUCI_SKIPPED_CHECKS=gpu7:pcie",
    ]


def test_a_later_command_replaces_a_name_instead_of_adding_a_line(tmp_path):
    report = tmp_path / "out.env"
    env = {"GPUCI_DOTENV": str(report)}
    render(env, {"passed": True, "cache-hit": False})
    render(env, {"passed": False})
    assert lines(report) == ["GPUCI_PASSED=false", "GPUCI_CACHE_HIT=false"]


def test_the_set_is_configurable_by_output_or_variable_name(tmp_path):
    report = tmp_path / "out.env"
    env = {"GPUCI_DOTENV": str(report), "GPUCI_DOTENV_OUTPUTS": "data-center, CUDA_VISIBLE_DEVICES"}
    render(env, {"pod-id": "p1", "data-center": "EU"}, CUDA_VISIBLE_DEVICES="GPU-1")
    assert lines(report) == ["GPUCI_DATA_CENTER=EU", "CUDA_VISIBLE_DEVICES=GPU-1"]


def test_never_more_than_the_limit_and_it_says_what_it_dropped(tmp_path):
    report = tmp_path / "out.env"
    env = {"GPUCI_DOTENV": str(report), "GPUCI_DOTENV_OUTPUTS": "all"}
    err = render(env, {f"out-{i}": i for i in range(34)})
    assert len(lines(report)) == 20
    assert lines(report)[0] == "GPUCI_OUT_0=0"
    assert "GPUCI_OUT_33" in err and "GPUCI_DOTENV_OUTPUTS" in err


def test_the_default_set_fits_gitlabs_limit():
    assert len(dotenv.DEFAULT_OUTPUTS) <= dotenv.DEFAULT_LIMIT
    assert len(set(dotenv.DEFAULT_OUTPUTS)) == len(dotenv.DEFAULT_OUTPUTS)


def test_a_train_job_writes_at_most_twenty(tmp_path):
    """Every output of a gated training job's commands, as the GitLab template runs them."""
    from gpuci.commands import iter_leaf_commands

    report = tmp_path / "out.env"
    env = {"GPUCI_DOTENV": str(report)}
    used = ("gpu-setup", "cache-weights restore", "cache-weights save", "gpu-smoke", "gate")
    for name, cmd in iter_leaf_commands():
        if name in used:
            render(env, {o.name: "v" for o in cmd.outputs})
    written = lines(report)
    assert 0 < len(written) <= 20
    assert "GPUCI_CACHE_HIT=v" in written and "GPUCI_PASSED=v" in written


@pytest.mark.parametrize("name", ["X\nGPUCI_PASSED", "GPUCI_X\n"])
def test_a_name_that_would_forge_another_variable_is_refused(tmp_path, name):
    """A newline inside a name, or at its end (``re.match``'s ``$`` lets one through)."""
    report = tmp_path / "out.env"
    with pytest.raises(InputError, match="refusing to write the variable name"):
        dotenv.write(
            {"GPUCI_DOTENV": str(report), "GPUCI_DOTENV_OUTPUTS": "all"},
            {name: "true"},
            lambda message: None,
        )
    assert not report.exists()


def test_a_report_an_earlier_step_broke_is_one_line_not_a_traceback(tmp_path):
    """Any step of the job may write the report: bytes that are not UTF-8, or megabytes."""
    report = tmp_path / "out.env"
    for body in (b"GPUCI_X=\xff\xfe\n", b"A=1\n" * (1 << 19)):
        report.write_bytes(body)
        with pytest.raises(InputError, match=r"^the dotenv report .* is not usable: it is"):
            dotenv.write({"GPUCI_DOTENV": str(report)}, {"GPUCI_POD_ID": "p1"}, print)
