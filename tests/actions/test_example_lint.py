"""The runner example checked as its readers will use it: actionlint against the real action
metadata (every input it passes must exist), zizmor for injection and unpinned actions.

actionlint cannot read ``my-org/gpu-ci/actions/<name>@v1`` offline, so the example is copied
into a throw-away repository holding this checkout's actions, with those references rewritten
to ``./actions/<name>``: a misspelt input (``runner-label``) then fails here. Each check is also
fed a broken copy, to prove it can fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_action_checks import run, tool

from gpuci_testing import REPO

EXAMPLE = REPO / "examples" / "workflows" / "gpu-runner.yml"
# The cache examples, held to the same two checks (their broken copies are the runner's above).
CACHE_EXAMPLES = [
    REPO / "examples" / "workflows" / name for name in ("cuda-ext-ccache.yml", "wheels-cache.yml")
]
# The examples pin other people's actions to a release tag and gpu-ci to @v1, as a reader
# copies them: every `uses:` must carry a ref (zizmor's ref-pin), not necessarily a hash.
ZIZMOR_CONFIG = 'rules:\n  unpinned-uses:\n    config:\n      policies:\n        "*": ref-pin\n'


def _local_copy(root: Path, text: str, name: str = EXAMPLE.name) -> Path:
    """A repository with this checkout's actions and ``text`` as its workflow."""
    (root / ".git").mkdir(parents=True)  # actionlint finds the project root by it
    shutil.copytree(REPO / "actions", root / "actions")
    workflows = root / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (root / ".github" / "actionlint.yaml").write_text(
        "self-hosted-runner:\n  labels: [gpu-large]\n"
    )
    local = re.sub(r"my-org/gpu-ci/(actions/[a-z/-]+)@v1", r"./\1", text)
    assert "my-org/gpu-ci" not in local
    (workflows / name).write_text(local)
    return root


def _zizmor(config: Path, workflow: Path) -> subprocess.CompletedProcess[str]:
    return run(
        tool("zizmor"),
        "--offline",
        "--no-progress",
        "--color=never",
        "--config",
        str(config),
        str(workflow),
    )


def test_actionlint_passes_with_the_real_action_inputs(tmp_path: Path) -> None:
    root = _local_copy(tmp_path / "repo", EXAMPLE.read_text())
    proc = run(tool("actionlint"), "-no-color", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_misspelt_runner_input(tmp_path: Path) -> None:
    text = EXAMPLE.read_text()
    assert "runner-labels:" in text
    root = _local_copy(tmp_path / "repo", text.replace("runner-labels:", "runner-label:"))
    proc = run(tool("actionlint"), "-no-color", cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'input "runner-label" is not defined' in proc.stdout


@pytest.mark.parametrize("broken", [False, True])
def test_zizmor_finds_no_injection_and_no_unpinned_action(tmp_path: Path, broken: bool) -> None:
    config = tmp_path / "zizmor.yml"
    config.write_text(ZIZMOR_CONFIG)
    text = EXAMPLE.read_text()
    if broken:  # a branch name straight into a shell: template injection
        anchor = "      - name: Train\n"
        assert anchor in text
        text = text.replace(anchor, '      - run: echo "${{ github.head_ref }}"\n' + anchor)
    workflow = tmp_path / EXAMPLE.name
    workflow.write_text(text)
    proc = _zizmor(config, workflow)
    if broken:
        assert proc.returncode != 0 and "template-injection" in proc.stdout + proc.stderr
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("example", CACHE_EXAMPLES, ids=lambda p: p.name)
def test_cache_examples_pass_actionlint_and_zizmor(tmp_path: Path, example: Path) -> None:
    root = _local_copy(tmp_path / "repo", example.read_text(), example.name)
    proc = run(tool("actionlint"), "-no-color", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = tmp_path / "zizmor.yml"
    config.write_text(ZIZMOR_CONFIG)
    proc = _zizmor(config, example)
    assert proc.returncode == 0, proc.stdout + proc.stderr
