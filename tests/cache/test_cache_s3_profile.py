"""Plain keys in an AWS profile are read without botocore, and only when botocore would find
just them: every other profile, and a web identity in the environment, is botocore's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuci.cache._stores.s3.profile import static_profile

KEYS = "aws_access_key_id = AKIDPLAIN\naws_secret_access_key = plain-secret\n"


def _files(tmp_path: Path, config: str, credentials: str) -> tuple[Path, Path]:
    conf, creds = tmp_path / "config", tmp_path / "credentials"
    conf.write_text(config)
    creds.write_text(credentials)
    return conf, creds


def _botocore_keys(conf: Path, creds: Path, profile: str) -> tuple[str, str, str, str]:
    """(access key, secret, token, region) as botocore's own session resolves them."""
    import botocore.session

    session = botocore.session.Session()
    session.set_config_variable("config_file", str(conf))
    session.set_config_variable("credentials_file", str(creds))
    session.set_config_variable("profile", profile)
    got = session.get_credentials().get_frozen_credentials()
    region = session.get_scoped_config().get("region", "")
    return got.access_key, got.secret_key, got.token or "", region


@pytest.mark.parametrize(
    ("config", "credentials", "profile"),
    [
        ("[profile lab]\nregion = eu-west-1\n", f"[lab]\n{KEYS}", "lab"),
        ("[default]\noutput = json\n", f"[default]\n{KEYS}aws_session_token = tok\n", "default"),
        (f"[profile lab]\nregion = us-east-2\n{KEYS}", "", "lab"),  # keys in the config file
        ("", f"[lab]\n{KEYS}", "lab"),  # no config file section at all
        (f"[profile lab]\n{KEYS}", "[lab]\naws_access_key_id = AKIDFILE\n"
         "aws_secret_access_key = file-secret\n", "lab"),  # the credentials file first
    ],
)  # fmt: skip
def test_plain_keys_are_what_botocore_resolves(tmp_path, config, credentials, profile):
    conf, creds = _files(tmp_path, config, credentials)
    env = {"AWS_PROFILE": profile} if profile != "default" else {}
    found = static_profile(env, conf, creds)
    assert found is not None
    got = (found.creds.access_key, found.creds.secret_key, found.creds.token, found.region)
    assert got == _botocore_keys(conf, creds, profile)


@pytest.mark.parametrize(
    ("config", "credentials", "env"),
    [
        ("[profile lab]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n",
         f"[lab]\n{KEYS}", {}),
        ("[profile lab]\ncredential_process = /bin/true\n", f"[lab]\n{KEYS}", {}),
        ("[profile lab]\nsso_session = s\n", f"[lab]\n{KEYS}", {}),
        ("[profile lab]\nendpoint_url = http://127.0.0.1:9\n", f"[lab]\n{KEYS}", {}),
        ("[profile lab]\nservices = local\n", f"[lab]\n{KEYS}", {}),
        ("", f"[lab]\n{KEYS}role_arn = arn:aws:iam::1:role/r\n", {}),
        ("", f"[lab]\n{KEYS}", {"AWS_WEB_IDENTITY_TOKEN_FILE": "/tmp/t", "AWS_ROLE_ARN": "a"}),
        ("", f"[lab]\n{KEYS}", {"AWS_DEFAULT_PROFILE": "other"}),
        ("", f"[lab]\n{KEYS}", {"AWS_ACCESS_KEY_ID": "AKIDENV"}),  # half the env's keys
        ("", "[lab]\naws_access_key_id = AKIDHALF\n", {}),  # partial: botocore names it
        ("", f"[other]\n{KEYS}", {}),  # no such profile: botocore's ProfileNotFound
        ("[profile lab\nregion = x\n", f"[lab]\n{KEYS}", {}),  # unparsable: botocore says
        ("", "", {}),  # no keys: the container endpoint or the instance role
    ],
)  # fmt: skip
def test_anything_else_is_botocore_s(tmp_path, config, credentials, env):
    conf, creds = _files(tmp_path, config, credentials)
    assert static_profile({"AWS_PROFILE": "lab", **env}, conf, creds) is None


def test_both_spellings_of_the_default_profile_are_botocore_s(tmp_path):
    conf, creds = _files(tmp_path, "[default]\nregion = a\n[profile default]\nregion = b\n", "")
    (tmp_path / "credentials").write_text(f"[default]\n{KEYS}")
    assert static_profile({}, conf, creds) is None


def test_a_plain_profile_resolves_without_importing_botocore(tmp_path):
    """The store's settings from a profile of plain keys: botocore is never imported (its
    import was a profile restore's extra quarter second); the secret is masked."""
    conf, creds = _files(tmp_path, "[profile lab]\nregion = eu-west-1\n", f"[lab]\n{KEYS}")
    env = {"AWS_PROFILE": "lab", "AWS_CONFIG_FILE": str(conf),
           "AWS_SHARED_CREDENTIALS_FILE": str(creds), "HOME": str(tmp_path)}  # fmt: skip
    code = (
        "import sys\n"
        "from gpuci.cache._stores.s3 import config\n"
        "masked = []\n"
        f"got = config.resolve('b', None, None, {env!r}, masked.append)\n"
        "keys = got.creds(None)\n"
        "print(keys.access_key, got.address.region, 'plain-secret' in masked,"
        " 'botocore' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert proc.stdout.split() == ["AKIDPLAIN", "eu-west-1", "True", "False"], proc.stdout


def test_a_config_file_under_a_home_no_user_has_is_read_as_botocore_reads_it():
    """AWS_CONFIG_FILE=~nobody-here/config: botocore's os.path.expanduser leaves it as written
    (no such file, no config); Path.expanduser raised RuntimeError, an internal error."""
    from gpuci.cache._stores.s3 import config

    env = {
        "AWS_ACCESS_KEY_ID": "AKIDENV",
        "AWS_SECRET_ACCESS_KEY": "env-secret",
        "AWS_CONFIG_FILE": "~gpuci-no-such-user/config",
        "AWS_SHARED_CREDENTIALS_FILE": "~gpuci-no-such-user/credentials",
        "AWS_REGION": "us-east-1",
    }
    got = config.resolve("b", None, None, env, lambda secret: None)
    assert got.creds(None).access_key == "AKIDENV" and got.address.region == "us-east-1"
