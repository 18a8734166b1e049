"""retry-fetch's partial file in a shared folder, swapped after its checks (review of s49).

The partial ``<dest>.incomplete`` is checked by ``lstat`` (ours alone, a regular file), then
opened to hash its bytes: a job that can write the folder may swap a FIFO in between. The open
must not wait for a writer that never comes; what it opened is checked again and refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from gpuci.fetch import _partial
from gpuci_testing import outcome_in_thread

URL = "http://127.0.0.1:9/f.bin"


def _plant_own_partial(dest: Path) -> Path:
    """A partial and sidecar that pass every check (ours, 0644, this URL's)."""
    part = dest.with_name(dest.name + ".incomplete")
    part.write_bytes(b"x" * 1000)
    part.chmod(0o644)
    digest = hashlib.sha256(URL.encode()).hexdigest()
    meta = {"validator": '"v1"', "total": None, "url_sha256": digest}
    dest.with_name(dest.name + ".incomplete.json").write_text(json.dumps(meta))
    return part


def test_a_partial_swapped_for_a_fifo_after_its_checks_is_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "f.bin"
    part = _plant_own_partial(dest)
    real_inspect = _partial.inspect

    def inspect_then_swap(*args: object, **kwargs: object) -> object:
        found = real_inspect(*args, **kwargs)  # type: ignore[arg-type]
        assert found is not None  # the planted partial passed the checks
        part.unlink()
        os.mkfifo(part, 0o644)
        return found

    monkeypatch.setattr(_partial, "inspect", inspect_then_swap)
    got = outcome_in_thread(lambda: _partial.Partial(dest, URL))
    hung = not got
    if hung:  # release the open still waiting for a writer
        os.close(os.open(part, os.O_WRONLY | os.O_NONBLOCK))
    assert not hung, "the open of the partial waited on a FIFO swapped in after the checks"
    (partial,) = got
    assert isinstance(partial, _partial.Partial)
    assert partial.size == 0 and partial.validator is None  # nothing kept: starts over
    assert not os.path.lexists(part)  # the FIFO is gone, not resumed from
