"""Children in process groups of their own, killed group and all.

A child started with ``start_new_session=True`` leads a process group, and whatever it starts
joins it (a credential helper's ``sleep``, NCCL's helpers): ``SIGKILL`` to the group ends them
all, even after the leader itself has exited. The group's id is the leader's pid, and it stays
ours while the leader is not reaped, then while the group has members: the kernel gives no new
process an id a group still holds. A reaped leader whose pid names a live process means the id
was reused: that group is someone else's and is left alone.

:class:`Groups` holds one owner's children, to kill at the owner's deadline; the ones still
there when the process ends (an exit, Ctrl-C, and in the CLI the runner's SIGTERM:
``gpuci.cli``) are killed on the way out. A library never changes a process-wide signal handler
behind its user's back.

A child's output is read within a bound too: ``subprocess``'s ``communicate()`` holds all it
prints in memory (a credential helper printing 400 MB drove a restore to 1.2 GiB), so a child
started with ``max_output`` (:meth:`Groups.popen`) has a ``communicate()`` that reads at most
that many bytes of each pipe, then kills the group and raises :class:`OutputFlood`.
"""

from __future__ import annotations

import atexit
import os
import selectors
import signal
import subprocess
import threading
from contextlib import suppress
from typing import Any

__all__ = ["Groups", "OutputFlood", "kill", "kill_all"]

#: How long a killed leader is waited for: SIGKILL ends it at once unless the kernel holds it
#: (a hung network file system); then init reaps it.
REAP_S = 5.0
#: Every :class:`Groups` that started a child: what is killed on the way out.
_OWNERS: set[Groups] = set()
_OWNERS_LOCK = threading.RLock()


def kill(proc: subprocess.Popen[Any], reap: bool = True) -> None:
    """SIGKILL ``proc``'s group (``proc`` was started with ``start_new_session=True``), whether
    ``proc`` is still running or not, then reap ``proc`` (unless ``reap`` is false: a signal
    handler must not wait on a Popen the interrupted code may be waiting on)."""
    if _lingering(proc):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if reap:
        with suppress(subprocess.TimeoutExpired):
            proc.wait(REAP_S)


def _lingering(proc: subprocess.Popen[Any]) -> bool:
    """Whether ``proc``'s group may still hold a process of ours (see the module's docstring).

    A leader not reaped yet, running or a zombie, still holds its pid and so its group id: it
    is looked at without reaping it (``WNOWAIT``), so the kill that follows cannot reach a
    process that took the id meanwhile."""
    if proc.returncode is None:
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            pass  # reaped behind Popen's back: judged as reaped, below
        else:
            return True
    try:
        os.kill(proc.pid, 0)
    except ProcessLookupError:
        pass
    except OSError:
        return False
    else:
        return False  # the leader was reaped: this pid is another process's now
    try:
        os.killpg(proc.pid, 0)
    except OSError:
        return False
    return True


class OutputFlood(Exception):
    """A child printed more than its owner reads (``limit`` bytes on one pipe); its group was
    killed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the process printed more than {limit:,} bytes")
        self.limit = limit


class _Capped(subprocess.Popen[bytes]):
    """A Popen whose ``communicate()`` reads at most ``limit`` bytes of each of its pipes.
    Byte pipes only, no input and no timeout: the owner's deadline kills the group."""

    limit = 1 << 20

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """(stdout, stderr), None for a pipe not asked for, once both are closed and the child
        has exited.

        Raises:
            OutputFlood: past ``limit`` bytes on one pipe (the group killed first).
        """
        if input is not None or timeout is not None:
            raise TypeError("a capped child takes no input and no timeout")
        if self.stdin is not None:
            self.stdin.close()
        asked = [pipe for pipe in (self.stdout, self.stderr) if pipe is not None]
        fds = [None if pipe is None else pipe.fileno() for pipe in (self.stdout, self.stderr)]
        read = {fd: bytearray() for fd in fds if fd is not None}
        try:
            self._read_all(read)
        finally:
            for pipe in asked:
                pipe.close()
        self.wait()
        out, err = (None if fd is None else bytes(read[fd]) for fd in fds)
        return out, err

    def _read_all(self, read: dict[int, bytearray]) -> None:
        """Each descriptor's bytes into its buffer, until all are closed; past ``limit`` on
        one, the group is killed and :class:`OutputFlood` raised."""
        with selectors.DefaultSelector() as selector:
            for fd in read:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fd)
                    read[key.fd] += chunk
                    if len(read[key.fd]) > self.limit:
                        kill(self)
                        raise OutputFlood(self.limit)


class Groups:
    """The children one owner starts, each in a session (and group) of its own: killed
    together at the owner's deadline, and on the way out for any still there."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[Any]] = []
        self._lock = threading.RLock()  # re-entered by the SIGTERM handler on the main thread

    def popen(
        self, args: Any, *, max_output: int | None = None, **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """``subprocess.Popen`` in a session of its own, held until its group is empty. Started
        under the lock a kill takes: a signal that comes while it starts kills it too. With
        ``max_output``, its ``communicate()`` reads at most that many bytes of each byte pipe,
        then kills the group and raises :class:`OutputFlood`."""
        with _OWNERS_LOCK:
            _OWNERS.add(self)
        with self._lock:
            proc: subprocess.Popen[Any]
            if max_output is None:
                proc = subprocess.Popen(args, start_new_session=True, **kwargs)
            else:
                proc = _Capped(args, start_new_session=True, **kwargs)
                proc.limit = max_output
            self._procs = [p for p in self._procs if _lingering(p)] + [proc]
        return proc

    def kill(self, reap: bool = True) -> None:
        """Kill every group started here, whether its leader is still running or not."""
        with self._lock:
            procs, self._procs = self._procs, []
        for proc in procs:
            kill(proc, reap)


@atexit.register
def kill_all(reap: bool = True) -> None:
    """Kill every group any :class:`Groups` started (at exit, and, not reaping, on the CLI's
    SIGTERM)."""
    with _OWNERS_LOCK:
        owners = list(_OWNERS)
    for owner in owners:
        owner.kill(reap)
