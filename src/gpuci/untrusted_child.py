"""A child process whose output is an input: ``git`` in a checkout a PR controls (a hook, an
fsmonitor that hangs, a config value of gigabytes), the job's own Python (a sitecustomize).

``subprocess.run(capture_output=True)`` keeps every byte the child prints and its timeout
only starts once the pipes close; here the output is read as it comes, against one deadline,
and reading stops at a cap, the child killed. Each failure is an exception the caller turns
into "no answer": OSError (missing program; TimeoutError, a subclass, for a hung one) or
:class:`~gpuci.untrusted_json.Unusable` (a ValueError) for too much output.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuci.untrusted_json import Unusable

MAX_OUTPUT = 1 << 20  # far above a package list or a git answer
GIT_TIMEOUT_S = 10.0


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    limit: int = MAX_OUTPUT,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``argv`` (no stdin, stderr discarded); its exit status and stdout as text.

    Raises:
        OSError: it cannot start; TimeoutError: it ran past ``timeout`` seconds (killed).
        Unusable: it printed over ``limit`` bytes (killed).
    """
    deadline = time.monotonic() + timeout
    with subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        try:
            assert proc.stdout is not None
            out = _read(proc.stdout.fileno(), deadline, limit)
            code = proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise TimeoutError("it ran past its deadline") from None
        finally:
            if proc.poll() is None:
                proc.kill()
    return code, out.decode("utf-8", errors="replace")


def _read(fd: int, deadline: float, limit: int) -> bytes:
    data = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise TimeoutError("it ran past its deadline")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return bytes(data)
            data += chunk
            if len(data) > limit:
                raise Unusable(f"it printed over {limit} bytes")


def git(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """git's one-line answer (a commit, a remote, a config value), or "" when it has none:
    git missing, failing, hung past :data:`GIT_TIMEOUT_S`, or printing more than a line.
    Every caller treats git as optional (a plain folder, a container without git), so no
    answer is never an error."""
    try:
        code, out = run(["git", *args], timeout=GIT_TIMEOUT_S, limit=64 << 10, cwd=cwd, env=env)
    except (OSError, Unusable):
        return ""
    out = out.strip()
    return out if code == 0 and "\n" not in out else ""
