"""populate-on-miss: run the step's own download command, then save the result at once.

Composite actions have no post step, so ``actions/cache-weights`` fills a miss in the same
step: run ``populate`` (e.g. ``huggingface-cli download ...``) through bash, stream its output
through the runtime (so masked secrets stay masked), and save the paths under ``key``. The
command's text is never echoed: it may carry a token.

The command runs in a process group of its own (:mod:`gpuci.procgroup`): a download it forks
(bash runs ``a; b`` as children) must not outlive the step and write into the job's folder, so
Ctrl-C, the CLI's SIGTERM handler and the command's own end kill its whole group.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from gpuci import procgroup
from gpuci.cache._common import summary_table
from gpuci.cache.options import RestoreInputs
from gpuci.errors import InfraError, InputError
from gpuci.runtime import Result, Runtime
from gpuci.units import human_bytes

MAX_LINE = 64 << 10  # characters of the command's output logged as one line


def _shell() -> list[str]:
    bash = shutil.which("bash")
    return [bash, "-eo", "pipefail", "-c"] if bash else ["/bin/sh", "-ec"]


def run_command(command: str, rt: Runtime) -> None:
    """Run ``command``; its output goes to the log line by line, redacted. What it started is
    killed once bash ends (or is interrupted): the save that follows must not race a straggler,
    nor the step wait for one that holds the output."""
    rt.log("populate: running the populate command (its text is not echoed)")
    children = procgroup.Groups()
    try:
        proc = children.popen(
            [*_shell(), command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(rt.environ),
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise InfraError(
            f"cannot start the populate command: {exc.strerror or exc}",
            hint="check that bash is installed on the runner",
        ) from None
    assert proc.stdout is not None
    import threading  # only when populating: a restore starts none

    # A straggler that kept the command's output open (``a &`` without a redirect) would hold
    # the read below until it ended: the group is killed as bash itself ends.
    threading.Thread(target=_end_with_bash, args=(proc, children), daemon=True).start()
    try:
        # At most MAX_LINE characters a read: output with no line break (a binary dumped to
        # stdout, a file of zeros) is logged in pieces, never held whole.
        while line := proc.stdout.readline(MAX_LINE):
            rt.log(f"populate: {line.rstrip()}")
        code = proc.wait()
    finally:
        children.kill()  # the group: bash and whatever it forked, interrupted or done
        proc.stdout.close()
    if code == 127:
        raise InputError(
            "the populate command was not found (exit 127)",
            hint="install the tool it runs earlier in the job, or fix the populate input",
        )
    if code != 0:
        raise InfraError(
            f"the populate command failed with exit code {code}; nothing was saved",
            hint="see its output above; fix the command, its network access or its token",
        )


def _end_with_bash(proc: subprocess.Popen[str], children: procgroup.Groups) -> None:
    """Kill the command's group once bash has ended (waited for without reaping it, so its
    pid still names the group); one the main thread reaped first is its to kill."""
    import os

    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        return
    children.kill(reap=False)


def fill_on_miss(
    inp: RestoreInputs, rt: Runtime, restored: Result, paths: list[str], start: float
) -> Result:
    """After a miss (or a restore-keys match): populate, then save under ``key``."""
    key = inp.key
    if rt.dry_run:
        restored.headline += "; would run populate, then save the result under the key"
        restored.report["would_populate"] = True
        return restored
    run_command(inp.populate, rt)
    from gpuci.cache._save.operation import save
    from gpuci.cache._save.report import render

    done = save(inp.save_inputs(paths), rt)
    saved = render(done)  # its warnings and report, as a save step of its own would give them
    seconds = time.monotonic() - start
    out = dict(restored.outputs)
    out.update(
        {
            "cache-hit": False,
            "manifest": done.digest,
            "bytes-uploaded": done.bytes_uploaded,
            "files": done.files,
            "seconds": round(seconds, 3),
            "connections": done.connections.used if done.connections else 0,
            "populated": True,
        }
    )
    result = Result(command="cache-weights restore", outputs=out)
    result.annotations = restored.annotations + saved.annotations
    outcome, files, size, uploaded = done.outcome, done.files, done.size, done.bytes_uploaded
    result.headline = (
        f"populated {key} on a miss and {outcome} it: {files} files, "
        f"uploaded {human_bytes(uploaded)} in {seconds:.1f}s"
    )
    result.summary.append(
        summary_table(
            key,
            f"miss, populated, {outcome}",
            files,
            size,
            uploaded,
            seconds,
        )
    )
    result.report = {**restored.report, "populated": True, "save": saved.report}
    return result
