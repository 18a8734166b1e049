"""What a plan prints is bounded: a PR writes the workflow, and a ``with:`` value of megabytes
(a 12 KB ``format()`` builds 5 Mi characters) was quoted whole in the plan, once a step."""

from __future__ import annotations

import json

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, write
from gpuci.commands import command_for_action
from gpuci.dryrun._workflow import calls_for
from gpuci.errors import InputError

LONG = "x" * 20_000
PATTERN = "x" * 900  # a regex input takes at most 1,000 characters (gpuci.inputs.MAX_REGEX)
MAX_PLAN_LINE = 1_000  # gpuci.dryrun._report.MAX_PLAN_LINE: characters of one plan line

ECHOING = f"""\
on: push
jobs:
  j:
    runs-on: x
    steps:
      - name: {LONG}
        run: echo
      - uses: acme/gpu-ci/actions/gpu-setup@v1
        with:
          gpu-name: {PATTERN}
      - uses: acme/gpu-ci/actions/gpu-pod@v1
        with:
          action: {LONG}
"""


def test_a_bad_dispatch_value_is_quoted_cut():
    folder, cmd = command_for_action("actions/gpu-pod") or ("", None)
    with pytest.raises(InputError) as raised:
        calls_for(folder, cmd, {"action": LONG})
    assert raised.value.message.startswith("input 'action' is 'xxx")
    assert len(raised.value.message) < 200, len(raised.value.message)


@pytest.mark.parametrize("form", ["text", "json"])
def test_no_line_of_the_plan_quotes_a_with_value_whole(tmp_path, form):
    wf = write(tmp_path, ECHOING, f"{WORKFLOWS}/wf.yml")
    args = ["--json"] if form == "json" else []
    proc = dry_run(tmp_path, wf, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]  # gpu-pod's action is bad input
    assert "x" * (MAX_PLAN_LINE + 1) not in proc.stdout + proc.stderr
    if form == "text":
        assert max(map(len, proc.stdout.splitlines())) <= MAX_PLAN_LINE + 3
        (setup,) = [line for line in proc.stdout.splitlines() if "gpu-setup: dry run" in line]
        assert "gpu-name (matches /xxx" in setup and len(setup) < 500, setup  # named, cut
        return
    result = json.loads(proc.stdout)
    assert max(map(len, result["report"]["plan"])) <= MAX_PLAN_LINE + 3
    assert max(map(len, texts_in(result))) <= MAX_PLAN_LINE + 3


def texts_in(value) -> list[str]:
    """Every text in a decoded JSON value."""
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [text for item in items for text in texts_in(item)]
