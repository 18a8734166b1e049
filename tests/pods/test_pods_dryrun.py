"""A dry run changes nothing: no request but GETs with a key, no request at all without one."""

from __future__ import annotations

import pytest

from gpuci.pods._runpod.client import RunPodClient

# Every sub-command with the flags a real run needs; down without pod-id means "this CI run".
CALLS = {
    "up": {"gpu_types": "NVIDIA GeForce RTX 4090", "image": "img", "command": "sleep 1"},
    "ls": {},
    "stop": {"pod_id": "pod1"},
    "start": {"pod_id": "pod1", "ttl": "30m"},
    "down": {},
    "reap": {},
    "cost": {},
}
CI_RUN = {"GITHUB_RUN_ID": "7", "GITHUB_REPOSITORY": "org/repo"}
# The read-only look-ups docs/pods.md promises for a dry run with a key, per sub-command.
# `ls` lists only with --probe (GPUCI_PROBE=true): a listing is a network call.
READS = {"down": ["/v2/pods"], "reap": ["/v2/pods", "/v2/billing/pods"]}  # reap: its prune


@pytest.mark.parametrize("sub", sorted(CALLS))
def test_dry_run_with_a_key_only_reads_what_the_docs_say(sub, run, fake):
    done = run(sub, dry_run=True, extra_env=CI_RUN, **CALLS[sub])
    assert done.code == 0, done.stdout
    assert [c.method for c in fake.requests if c.method != "GET"] == []
    assert [c.path for c in fake.requests] == READS.get(sub, [])


@pytest.mark.parametrize("sub", sorted(CALLS))
def test_dry_run_without_a_key_calls_nothing_and_is_not_bad_input(sub, run, fake):
    done = run(sub, dry_run=True, extra_env={**CI_RUN, "RUNPOD_API_KEY": ""}, **CALLS[sub])
    assert done.code == 0, done.stdout
    assert fake.requests == []


def test_a_dry_run_client_refuses_to_send_a_change(fake):
    client = RunPodClient(fake.api_key, fake.url, read_only=True)
    with pytest.raises(RuntimeError, match="dry run: refusing to send DELETE"):
        client.delete_pod("pod1")
    assert fake.requests == []
    assert client.list_pods() == []


def test_ls_dry_run_lists_only_with_probe(run, fake):
    done = run("ls", dry_run=True, extra_env=CI_RUN)
    assert done.code == 0, done.stdout
    assert fake.requests == []  # no network without --probe, even with a key
    assert "--probe" in done.stdout
    done = run("ls", dry_run=True, extra_env={**CI_RUN, "GPUCI_PROBE": "true"})
    assert done.code == 0, done.stdout
    assert [(c.method, c.path) for c in fake.requests] == [("GET", "/v2/pods")]
