"""The budget holds against the job's own inputs and against objects anyone with write access
planted in the ledger: each can only add to what an owner is counted, never take from it.

Planted objects are written as gpu-ci's own writers write them (``Ledger.record``'s key and
fields, ``Ledger.reserve``'s key), so only their content is hostile.
"""

from __future__ import annotations

from pods_testing import L40S

from gpuci.pods._budgets import ledger

UP = dict(image="img", command="serve", ttl="45m", gpu_types=L40S, owner="alice")  # $0.86/h


def test_a_planted_last_sequence_number_never_blocks_an_owner(fake, run, tmp_path):
    """F9: after ``9999999999.json`` the next number had 11 digits, which the reader never
    saw: every later up lost the same key 20 times, and blamed concurrency."""
    folder = tmp_path / "ledger" / ledger.RESERVATIONS / ledger.owner_key("alice")
    folder.mkdir(parents=True)
    (folder / "9999999999.json").write_text("not json")
    codes = [run("up", budget_usd="50", **UP).code for _ in range(3)]
    assert codes == [0, 0, 0]
    assert sorted(p.name for p in folder.iterdir())[:3] == [
        "0000000000.json",
        "0000000001.json",
        "0000000002.json",
    ]
