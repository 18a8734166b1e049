"""The actions are generated from the command specs, and a check keeps them from drifting."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from action_env import REPO

sys.path.insert(0, str(REPO / "src"))
from gpuci.commands import iter_leaf_commands

GEN = REPO / "scripts" / "gen_actions.py"
sys.path.insert(0, str(GEN.parent))
from gen_actions import RUN_GPUCI  # noqa: E402


def gen(*args: str, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "gen_actions.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=root,
    )


def test_committed_actions_match_their_specs() -> None:
    proc = gen("--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _copy_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(GEN, root / "scripts")
    os.symlink(REPO / "src", root / "src")
    shutil.copytree(REPO / "actions", root / "actions")
    shutil.copy(REPO / "action.yml", root)
    return root


def test_check_fails_on_drift_and_names_the_file(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    target = root / "actions" / "gpu-setup" / "action.yml"
    target.write_text(target.read_text().replace("INPUT_MIN_GPUS", "INPUT_MIN_GPU"))
    (root / "actions" / "retry-fetch" / "README.md").unlink()
    proc = gen("--check", root=root)
    assert proc.returncode == 1
    assert "actions/gpu-setup/action.yml: differs from its spec" in proc.stdout
    assert "actions/retry-fetch/README.md: missing" in proc.stdout
    assert "fix: run python scripts/gen_actions.py" in proc.stdout
    # Regenerating repairs it.
    assert gen(root=root).returncode == 0
    assert gen("--check", root=root).returncode == 0


def test_check_flags_a_generated_action_no_command_names(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    stale = root / "actions" / "old-thing"
    stale.mkdir()
    shutil.copy(root / "actions" / "gpu-smoke" / "action.yml", stale)
    proc = gen("--check", root=root)
    assert proc.returncode == 1
    assert (
        "actions/old-thing/action.yml: generated, but no command names this folder" in proc.stdout
    )


def _action_default(spec) -> str | None:
    return spec.action_default if spec.action_default is not None else spec.default


def test_every_command_input_and_output_is_in_its_action() -> None:
    """Every action, none skipped: each leaf command's action offers exactly its inputs and
    outputs, with the command's required flags and defaults."""
    checked = 0
    for _full, cmd in iter_leaf_commands():
        for folder in cmd.actions:
            text = (REPO / folder / "action.yml").read_text()
            assert text.startswith("# Generated"), f"{folder}/action.yml is not generated"
            action = yaml.safe_load(text)
            assert list(action["inputs"]) == [i.name for i in cmd.inputs], folder
            assert list(action.get("outputs") or {}) == [o.name for o in cmd.outputs], folder
            for spec in cmd.inputs:
                meta = action["inputs"][spec.name]
                assert meta["required"] is spec.required
                assert meta.get("default") == _action_default(spec), (folder, spec.name)
            checked += 1
    assert checked >= 7  # metric-gate included


def test_a_dispatching_action_offers_every_input_of_every_sub_command() -> None:
    """actions/gpu-pod: its `action` picks the pods sub-command, and every input and output of
    every sub-command is the action's (smoke, placement-timeout, all... were missing when it
    was written by hand), passed through env:, with no action default to shadow a
    sub-command's own."""
    from gpuci.commands import all_commands

    dispatching = [cmd for cmd in all_commands() if cmd.dispatch]
    assert [cmd.name for cmd in dispatching] == ["pods"]
    for cmd in dispatching:
        for folder in cmd.actions:
            text = (REPO / folder / "action.yml").read_text()
            assert text.startswith("# Generated"), folder
            action = yaml.safe_load(text)
            want = {spec.name for sub in cmd.subcommands for spec in sub.inputs}
            assert set(action["inputs"]) == {cmd.dispatch} | want, folder
            assert action["inputs"][cmd.dispatch]["required"] is True
            assert all("default" not in meta for meta in action["inputs"].values()), folder
            outs = {o.name for sub in cmd.subcommands for o in sub.outputs}
            assert set(action["outputs"]) == outs, folder
            step = next(s for s in action["runs"]["steps"] if s.get("id") == "run")
            for name in action["inputs"]:
                env = "INPUT_" + name.upper().replace("-", "_")
                assert step["env"][env] == f"${{{{ inputs.{name} }}}}", name
            assert f'{RUN_GPUCI} gpu-pod "$INPUT_ACTION"' in step["run"]
            assert "${{" not in step["run"]
    for name in ("smoke", "smoke-attempts", "placement-timeout", "health-store", "all", "grace"):
        assert name in yaml.safe_load((REPO / "actions/gpu-pod/action.yml").read_text())["inputs"]


def test_the_root_action_offers_every_input_of_its_parts() -> None:
    from gpuci.commands import _all_in_one as all_in_one

    leaves = dict(iter_leaf_commands())
    action = yaml.safe_load((REPO / "action.yml").read_text())
    want = [s.name for s in all_in_one.SWITCHES] + [
        part.public(spec.name) for part in all_in_one.PARTS for spec in leaves[part.command].inputs
    ]
    assert list(action["inputs"]) == want
    outs = [part.public(o.name) for part in all_in_one.PARTS for o in leaves[part.command].outputs]
    assert list(action["outputs"]) == outs


def test_every_action_folder_is_generated() -> None:
    found = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("actions/**/action.yml"))
    assert found and all((REPO / p).read_text().startswith("# Generated") for p in found)
    assert (REPO / "action.yml").read_text().startswith("# Generated")


def test_root_action_is_gpu_setup_then_cache_then_smoke() -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    steps = action["runs"]["steps"]
    runs = [s["run"].strip() for s in steps if s.get("run", "").startswith(RUN_GPUCI)]
    assert runs == [
        f"{RUN_GPUCI} gpu-setup",
        f"{RUN_GPUCI} cache-weights restore",
        f"{RUN_GPUCI} gpu-smoke",
    ]
    inputs = action["inputs"]
    assert {"report", "smoke-report", "cache-key", "cache-path", "smoke", "min-memory-gb"} <= set(
        inputs
    )
    assert inputs["cache-key"]["required"] is False  # the cache part is optional here
    assert inputs["smoke"]["default"] == "false"
    cache = next(s for s in steps if s.get("id") == "cache")
    assert cache["env"]["INPUT_KEY"] == "${{ inputs.cache-key }}"
    assert cache["env"]["INPUT_PATH"] == "${{ inputs.cache-path }}"
    assert (
        action["outputs"]["cache-hit"]["value"] == "${{ steps.cache.outputs.cache-hit || 'false' }}"
    )
    for name in ("cache-populated", "smoke-passed"):  # a skipped part still gives booleans
        assert action["outputs"][name]["value"].endswith(" || 'false' }}"), name


def test_each_action_has_a_readme_with_usage_inputs_and_outputs() -> None:
    for _full, cmd in iter_leaf_commands():
        for folder in cmd.actions:
            text = (REPO / folder / "README.md").read_text()
            assert f"uses: my-org/gpu-ci/{folder}@v1" in text
            assert "## Inputs" in text
            for spec in cmd.inputs:
                assert f"| `{spec.name}` |" in text
            for output in cmd.outputs:
                assert f"| `{output.name}` |" in text
    index = (REPO / "actions" / "README.md").read_text()
    assert "uses: my-org/gpu-ci@v1" in index and "| `smoke-report` |" in index
    for folder in sorted(p.parent.name for p in (REPO / "actions").glob("*/action.yml")):
        assert f"(actions/{folder}@v1)" not in index  # links are relative
        assert f"/actions/{folder}@v1`]({folder}/README.md)" in index, f"{folder} not indexed"


def test_the_dry_run_can_map_root_action_inputs_back_to_commands() -> None:
    from gpuci.commands import _all_in_one as all_in_one

    inputs_of = {name: cmd.inputs for name, cmd in iter_leaf_commands()}
    given = {
        "min-memory-gb": "40",
        "report": "gpu.json",
        "cache-key": "k",
        "cache-path": "models",
        "smoke-budget-seconds": "10",
        "smoke-report": "smoke.json",
    }
    assert all_in_one.split_inputs(given, inputs_of) == [
        ("gpu-setup", {"min-memory-gb": "40", "report": "gpu.json"}),
        ("cache-weights restore", {"key": "k", "path": "models"}),
    ]
    plan = all_in_one.split_inputs({**given, "smoke": "True", "cache-key": ""}, inputs_of)
    assert [command for command, _ in plan] == ["gpu-setup", "gpu-smoke"]
    assert plan[1][1] == {"budget-seconds": "10", "report": "smoke.json"}


def test_root_action_restores_by_manifest_alone() -> None:
    from gpuci.commands import iter_leaf_commands
    from gpuci.commands._all_in_one import PARTS, split_inputs

    leaves = dict(iter_leaf_commands())
    inputs_of = {part.command: leaves[part.command].inputs for part in PARTS}
    plan = dict(split_inputs({"cache-manifest": "ab" * 32, "cache-path": "data"}, inputs_of))
    assert plan["cache-weights restore"] == {"manifest": "ab" * 32, "path": "data"}
    action = yaml.safe_load((REPO / "action.yml").read_text())
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "cache")
    assert "inputs.cache-manifest != ''" in step["if"]
