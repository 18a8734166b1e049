"""A child process whose output is an input: ``git`` in a checkout a PR controls (a hook, an
fsmonitor that hangs, a config value of gigabytes), the job's own Python (a sitecustomize).

``subprocess.run(capture_output=True)`` keeps every byte the child prints and its timeout
only starts once the pipes close; here the output is read as it comes, against one deadline,
and reading stops at a cap, the child killed (or, for a command whose long log is expected,
only the last bytes kept). The child leads a process group of its own and the group is killed
when it ends or fails (:mod:`gpuci.procgroup`): a hook's background ``sleep`` or NCCL's helpers
die with it instead of holding the pipe open. Each failure is an exception the caller turns
into "no answer": OSError (missing program; :class:`Hung`, a TimeoutError, for a hung one,
with what it printed so far) or :class:`~gpuci.untrusted_json.Unusable` (a ValueError) for too
much output.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuci import procgroup
from gpuci.untrusted_json import Unusable

MAX_OUTPUT = 1 << 20  # far above a package list or a git answer
GIT_TIMEOUT_S = 10.0
# The longest wait asked of select() at once: it takes a C time_t, and a caller's huge timeout
# (a smoke budget of 1e30 s) overflowed it; a longer wait goes round again until the deadline.
MAX_WAIT_S = 3600.0
_GROUPS = procgroup.Groups()  # killed on the way out, with any still running


class Hung(TimeoutError):
    """The child ran past its deadline (killed); ``output``: what it printed until then."""

    def __init__(self, output: str) -> None:
        super().__init__("it ran past its deadline")
        self.output = output


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    limit: int = MAX_OUTPUT,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stderr: bool = False,
    tail: bool = False,
) -> tuple[int, str]:
    """Run ``argv`` (no stdin); its exit status and stdout as text. ``stderr``: stderr goes
    into the same output (else it is discarded); ``tail``: past ``limit`` bytes only the last
    ``limit`` are kept and the child runs on (else it is killed).

    Raises:
        OSError: it cannot start; Hung: it ran past ``timeout`` seconds (killed).
        Unusable: it printed over ``limit`` bytes (killed; never with ``tail``).
    """
    deadline = time.monotonic() + _bounded(timeout)
    data = bytearray()
    proc = _GROUPS.popen(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        _read(proc.stdout.fileno(), deadline, limit, data, tail)
        code = proc.wait(max(0.0, deadline - time.monotonic()))
    except (TimeoutError, subprocess.TimeoutExpired):
        raise Hung(data.decode("utf-8", errors="replace")) from None
    finally:
        procgroup.kill(proc)
        assert proc.stdout is not None
        proc.stdout.close()
    return code, data.decode("utf-8", errors="replace")


def _bounded(timeout: float) -> float:
    """``timeout``, or a year when it is not a number below one (inf, nan, 1e30): the deadline
    stays a float the clock can be compared with."""
    year = 365 * 86400.0
    return timeout if timeout < year else year


def _read(fd: int, deadline: float, limit: int, data: bytearray, tail: bool) -> None:
    """Read ``fd`` into ``data`` until its end; ``data`` holds what came if this raises."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("it ran past its deadline")
            if not selector.select(min(left, MAX_WAIT_S)):
                continue  # a slice of a long wait passed: the deadline decides
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            data += chunk
            if len(data) > limit:
                if not tail:
                    raise Unusable(f"it printed over {limit} bytes")
                del data[:-limit]


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
