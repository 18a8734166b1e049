"""AWS configuration edges: each one is one line naming the cause, the endpoint actually used
and the fix; read-only credentials restore with one warning."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_testing import CREDS, REPO_ROOT, StoreCase, cache_cmd, s3_case, seaweedfs
from treeutil import make_tree, snapshot

from gpuci_testing import clean_env, refused_url, run_cli


@pytest.fixture
def dead() -> Iterator[str]:
    """An endpoint that refuses connections, for the whole test."""
    with refused_url() as url:
        yield url


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = clean_env(
        HOME=str(tmp_path / "home"),
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        PYTHONPATH=str(REPO_ROOT / "src"),
        AWS_MAX_ATTEMPTS="1",
        **{**CREDS, **env},
    )
    return run_cli(*args, env=full, cwd=tmp_path)


def _restore_args(tmp_path: Path) -> list[str]:
    return ["cache-weights", "restore", "--store", "s3://bucket-x/c", "--key", "k",
            "--path", str(tmp_path / "out")]  # fmt: skip


def test_an_unknown_aws_profile_is_one_line_of_bad_input(tmp_path):
    got = _cli(tmp_path, *_restore_args(tmp_path), AWS_PROFILE="nosuch")
    assert got.returncode == 2, got.stdout + got.stderr
    first = got.stdout.splitlines()[0]
    assert "AWS profile 'nosuch'" in first and "AWS_PROFILE" in first
    assert "internal error" not in got.stdout and "Traceback" not in got.stderr


def test_a_dead_endpoint_from_the_environment_is_named(dead, tmp_path):
    got = _cli(tmp_path, *_restore_args(tmp_path), AWS_ENDPOINT_URL=dead)
    assert got.returncode == 3, got.stdout + got.stderr
    first = got.stdout.splitlines()[0]
    assert f"cannot reach the S3 endpoint {dead} (set by AWS_ENDPOINT_URL)" in first
    assert "AWS S3" not in first


def test_a_dead_endpoint_from_the_profile_is_named(dead, tmp_path):
    config = tmp_path / "aws-config"
    config.write_text(f"[profile lab]\nregion = us-east-1\nendpoint_url = {dead}\n")
    got = _cli(tmp_path, *_restore_args(tmp_path), AWS_PROFILE="lab", AWS_CONFIG_FILE=str(config))
    assert got.returncode == 3, got.stdout + got.stderr
    first = got.stdout.splitlines()[0]
    assert f"{dead} (set by endpoint_url of AWS profile 'lab')" in first


def test_read_only_credentials_restore_and_warn_once(s3_store, proxy, env, tmp_path):
    src = make_tree(tmp_path / "src", small=2)
    flags = {**s3_store.flags(), "key": "k", "path": str(src)}
    assert cache_cmd("save", flags, env)[0].ok
    proxy.add("PUT", "/uses/", "403", times=100)  # may read, may not write
    via = StoreCase("s3", s3_store.url, proxy.url)
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", {**via.flags(), "key": "k", "path": str(out)}, env)
    assert got.ok, got.headline
    assert snapshot(out) == snapshot(src)
    warned = [a.message for a in got.annotations if a.level == "warning"]
    assert len(warned) == 1 and "last use of k was not recorded" in warned[0], warned
    assert "AccessDenied" in warned[0]
    assert proxy.count("PUT", "/uses/") >= 1


def test_an_endpoint_from_the_default_profile_is_used_for_every_request(s3_store, env, tmp_path):
    """botocore sends requests to the config's endpoint_url; the boto3-free fast path for GETs
    must not sign them for AWS instead (with environment credentials and no AWS_PROFILE)."""
    src = make_tree(tmp_path / "src", small=2)
    assert cache_cmd("save", {**s3_store.flags(), "key": "k", "path": str(src)}, env)[0].ok
    config = tmp_path / "aws-config"
    config.write_text(f"[default]\nendpoint_url = {s3_store.endpoint}\n")
    out = tmp_path / "out"
    args = ["cache-weights", "restore", "--store", s3_store.url, "--key", "k", "--path", str(out)]
    got = _cli(tmp_path, *args, AWS_CONFIG_FILE=str(config), GPUCI_LOCAL_CACHE="off")
    assert got.returncode == 0, got.stdout
    assert snapshot(out) == snapshot(src)


def test_requests_never_go_to_aws_when_the_config_names_an_endpoint(tmp_path):
    """Else a GET for s3://bucket goes to AWS's bucket of that name, with these credentials."""
    from gpuci.cache._stores.s3.config import resolve

    config = tmp_path / "aws-config"
    env = {**CREDS, "AWS_CONFIG_FILE": str(config)}
    config.write_text("[default]\nregion = us-east-1\n")
    assert resolve("bucket-x", None, None, env, None).address.on_aws
    config.write_text("[default]\nendpoint_url = http://127.0.0.1:9\n")
    got = resolve("bucket-x", None, None, env, None)
    assert got.address.base_url == "http://127.0.0.1:9/bucket-x"
    assert got.endpoint_source == "endpoint_url of AWS profile 'default'"
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "config").write_text(
        "[default]\nservices = lab\n[services lab]\ns3 =\n  endpoint_url = http://x:9\n"
    )
    no_file = {k: v for k, v in CREDS.items() if k != "AWS_CONFIG_FILE"}
    got = resolve("bucket-x", None, None, {**no_file, "HOME": str(home)}, None)
    assert got.address.base_url == "http://x:9/bucket-x"
    # An explicit endpoint-url beats the config, as in botocore.
    got = resolve("bucket-x", "http://127.0.0.1:9", None, env, None)
    assert got.endpoint_source == "the endpoint-url input"


def test_read_only_credentials_on_seaweedfs_restore_and_warn_once(
    seaweedfs_endpoint, env, tmp_path
):
    """SeaweedFS enforces its identities: a Read/List-only key restores and cannot write uses/."""
    case = s3_case("seaweedfs", seaweedfs_endpoint)
    src = make_tree(tmp_path / "src", small=2)
    assert cache_cmd("save", {**case.flags(), "key": "k", "path": str(src)}, env)[0].ok
    out = tmp_path / "out"
    access, secret = seaweedfs.READER
    args = ["cache-weights", "restore", "--store", case.url, "--endpoint-url", case.endpoint,
            "--key", "k", "--path", str(out), "--json"]  # fmt: skip
    got = _cli(tmp_path, *args, AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret,
               GPUCI_LOCAL_CACHE="off")  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    body = json.loads(got.stdout)
    assert body["outputs"]["cache-hit"] == "true"
    warned = [a["message"] for a in body["annotations"] if a["level"] == "warning"]
    assert len(warned) == 1 and "last use of k was not recorded" in warned[0], warned
    assert snapshot(out) == snapshot(src)
    assert not [k for k in case.object_keys() if k.startswith("uses/")]


def _both_paths(flags: dict[str, str], env: dict[str, str], tmp_path: Path) -> tuple:
    """(result with keys in the environment, result with the same keys from a profile) of one
    restore: the second resolves its credentials through botocore's chain, then takes the same
    path. A profile of plain keys, read without botocore, must give the same result too."""
    keys, _ = cache_cmd("restore", flags, env)
    plain, _ = cache_cmd("restore", flags, _profile_env(env, tmp_path, ""))
    profile = _profile_env(env, tmp_path, "cli_pager = \n")  # not plain: botocore's
    from_profile, _ = cache_cmd("restore", flags, profile)
    assert (plain.exit_code, plain.headline) == (keys.exit_code, keys.headline)
    return keys, from_profile


def _profile_env(env: dict[str, str], tmp_path: Path, extra: str) -> dict[str, str]:
    """``env`` with its keys moved into an AWS profile ``lab`` (AWS_PROFILE and the files),
    whose config section also holds ``extra``."""
    creds = tmp_path / "aws-credentials"
    creds.write_text(
        f"[lab]\naws_access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n"
    )
    config = tmp_path / f"aws-config{len(extra)}"
    config.write_text(f"[profile lab]\nregion = us-east-1\n{extra}")
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    moved = {k: v for k, v in env.items() if k not in keys}
    return {
        **moved,
        "AWS_PROFILE": "lab",
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(creds),
    }


def test_a_profile_names_a_missing_bucket_as_env_keys_do(seaweedfs_endpoint, env, tmp_path):
    case = StoreCase("s3", "s3://gpuci-no-such-bucket/c", seaweedfs_endpoint)
    flags = {**case.flags(), "key": "k", "path": str(tmp_path / "out")}
    fast, slow = _both_paths(flags, env, tmp_path)
    assert fast.exit_code == slow.exit_code == 3
    assert "bucket 'gpuci-no-such-bucket' does not exist at" in fast.headline
    assert fast.headline == slow.headline
    assert fast.report == slow.report


def test_a_profile_names_refused_credentials_as_env_keys_do(seaweedfs_endpoint, env, tmp_path):
    """SeaweedFS checks every signature: a wrong secret is refused either way, same words."""
    case = s3_case("seaweedfs", seaweedfs_endpoint)
    flags = {**case.flags(), "key": "k", "path": str(tmp_path / "out")}
    wrong = {**env, "AWS_SECRET_ACCESS_KEY": "wrong-secret-value-123"}
    fast, slow = _both_paths(flags, wrong, tmp_path)
    assert fast.exit_code == slow.exit_code == 3
    assert "S3 refused the credentials for" in fast.headline
    assert fast.headline == slow.headline
    assert "wrong-secret-value-123" not in fast.headline + json.dumps(fast.report)


def test_a_profile_names_a_dead_endpoint_as_env_keys_do(env, dead, tmp_path):
    case = StoreCase("s3", "s3://bucket-x/c", dead)
    flags = {**case.flags(), "key": "k", "path": str(tmp_path / "out")}
    fast, slow = _both_paths(flags, {**env, "AWS_MAX_ATTEMPTS": "1"}, tmp_path)
    assert fast.exit_code == slow.exit_code == 3
    prefix = f"cannot reach the S3 endpoint {dead} (set by the endpoint-url input) ("
    assert fast.headline.startswith(prefix) and slow.headline.startswith(prefix)
