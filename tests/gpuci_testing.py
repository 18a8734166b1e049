"""Shared test helpers: run the CLI as a user would, in a subprocess, with a clean environment;
read ``GITHUB_OUTPUT``-style files as strictly as the runner does.

A uniquely named module (not ``conftest``): several test folders have a conftest.py, and
``from conftest import`` would pick whichever pytest loaded last.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Variables a developer's shell or a real runner may set that would change what we test.
_SCRUB_PREFIXES = ("INPUT_", "GITHUB_", "GITLAB_", "CI_", "RUNNER_", "GPUCI_", "AWS_", "RUNPOD_")


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_SCRUB_PREFIXES) and k not in ("CI", "NO_COLOR")
    }
    env.update(extra)
    return env


def gh_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A GitHub Actions step's env: output and summary files (``out``, ``summary``) and the job
    journal (``journal.jsonl``) in ``tmp_path``."""
    for name in ("out", "summary"):
        (tmp_path / name).write_text("")
    return clean_env(
        GITHUB_ACTIONS="true",
        GITHUB_OUTPUT=str(tmp_path / "out"),
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary"),
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        **extra,
    )


@contextmanager
def refused_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` where every connection is refused for as long as it is held: a
    socket bound there and never listening (the kernel answers a SYN with a reset). Holding it,
    not closing it and handing the number on, keeps any other process off the port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def commands_loaded(modules: list[str]) -> list[str]:
    """The command shells, the registry and the CLI among ``modules``: a library loads none."""
    shells = ("gpuci.commands", "gpuci.cli")
    return [m for m in modules if m.endswith(".command") or m.startswith(shells)]


def hears_ctrl_c() -> None:
    """A child's ``preexec_fn``: Ctrl-C (SIGINT) back to its default, for tests that send it.
    A suite started in the background (``cmd &`` without job control, ``nohup``) inherits
    SIGINT ignored, and Python then keeps it ignored: the child would never hear it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_until(condition: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds (a hang guard, sized
    many times what a quiet machine needs, so a busy one still passes)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or condition}")
        time.sleep(0.01)


def outcome_in_thread(call: Callable[[], object], timeout: float = 60) -> list[object]:
    """``call()`` in a daemon thread, waited on for ``timeout`` s: ``[its value]`` or ``[what it
    raised]``, or ``[]`` while it still runs (an ``open`` of a FIFO waits for the other end
    for ever: the caller opens that end to release it). A copy, taken at the timeout: a call
    the caller then releases does not fill it in, so a hang never reads as its outcome."""
    got: list[object] = []

    def run() -> None:
        try:
            got.append(call())
        except BaseException as exc:  # the test reads what came out (Interrupted is a Base...)
            got.append(exc)

    worker = threading.Thread(target=run, name="outcome-in-thread", daemon=True)
    worker.start()
    worker.join(timeout)
    return list(got)


def run_python(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh interpreter (``-c CODE`` or ``-m MODULE``), output captured;
    the exit code is the caller's to assert."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env if env is not None else clean_env(),
        cwd=cwd or REPO,
        timeout=timeout,
        check=False,
    )


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "gpuci", *args, env=env, cwd=cwd, timeout=timeout)


def run_cli_here(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` in this process (no interpreter start-up): the
    CLI's own ``main`` with ``env`` as the whole of ``os.environ``, in ``cwd`` (else the
    repository), its output captured as a process's (:func:`_output_captured`); everything put
    back after, and what a process's end would have undone checked (:func:`_process_kept`).
    For tests of what a command does, not of its process (signals, start-up, imports, a hang,
    what is printed at exit)."""
    from gpuci.cli import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env if env is not None else clean_env())
    try:
        os.chdir(cwd or REPO)
        with _process_kept(), _output_captured() as texts:
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors and --help
                code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["gpuci", *args], code, *texts)


#: How long run_cli_here waits for the threads a run started to end: a bound, not a measure
#: (an ended run's threads end at once).
THREADS_END_S = 60.0


def _signal_handlers() -> dict[int, Any]:
    import signal

    handlers = {}
    for signum in signal.valid_signals():
        try:
            handlers[int(signum)] = signal.getsignal(signum)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP and the like have none
            pass
    return handlers


def _ours(thread: threading.Thread) -> bool:
    """A thread gpu-ci started for one run (not the store's process-wide ``s3-deadline``,
    which serves every later request of this process, as it would the CLI's)."""
    target = getattr(thread, "_target", None)
    module = getattr(target, "__module__", None) or ""
    named = thread.name.startswith("gpuci")
    return thread.name != "s3-deadline" and (named or module.startswith("gpuci"))


def _children() -> list[Any]:
    """The children every ``procgroup.Groups`` of this process holds."""
    procgroup = sys.modules.get("gpuci.procgroup")
    if procgroup is None:
        return []
    with procgroup._OWNERS_LOCK:
        return [proc for owner in procgroup._OWNERS for proc in owner._procs]


def _end_children(before: set[int]) -> None:
    """Kill the groups of children (not among the ids ``before``) still there: a process ends
    them on its way out (``procgroup.kill_all`` at exit), this worker would keep them."""
    for proc in _children():
        if id(proc) not in before:
            sys.modules["gpuci.procgroup"].kill(proc)


@contextmanager
def _process_kept() -> Iterator[None]:
    """What a run in this process must leave as it found it, since no process end undoes it
    here (the xdist worker runs every later test): the threads gpu-ci started (ended; a
    watchdog or sampler left running would act in a later test), every signal handler
    (``main`` sets SIGTERM's own: put back; any other change fails), Python's hooks,
    faulthandler's timer (gpu-smoke's backstop ends the process: left armed, it would kill
    this worker minutes later, no test named) and httpx's command-line stand-in
    (``cli._spare_httpx_cli``, meant for a process the CLI owns). Children the run left in
    ``procgroup``'s groups are killed, as its exit would.

    Raises:
        AssertionError: naming what the run left behind (after putting it back).
    """
    import faulthandler
    import signal

    threads, handlers = set(threading.enumerate()), _signal_handlers()
    children = {id(proc) for proc in _children()}
    hooks = sys.unraisablehook, sys.excepthook, threading.excepthook
    had_httpx_cli = "httpx._main" in sys.modules
    arm, disarm = faulthandler.dump_traceback_later, faulthandler.cancel_dump_traceback_later
    armed: list[bool] = [False]

    def arming(*a: Any, **kw: Any) -> None:
        armed[0] = True
        arm(*a, **kw)

    def disarming() -> None:
        armed[0] = False
        disarm()

    faulthandler.dump_traceback_later, faulthandler.cancel_dump_traceback_later = arming, disarming
    try:
        yield
    finally:
        _end_children(children)  # as procgroup's atexit hook ends a process's
        left = []
        for thread in [t for t in threading.enumerate() if t not in threads and _ours(t)]:
            thread.join(THREADS_END_S)
            if thread.is_alive():
                left.append(f"thread {thread.name} still running")
        faulthandler.dump_traceback_later = arm
        faulthandler.cancel_dump_traceback_later = disarm
        if armed[0]:
            disarm()
            left.append("faulthandler.dump_traceback_later still armed")
        for signum, handler in _signal_handlers().items():
            if handler != handlers.get(signum, handler):
                signal.signal(signum, handlers[signum])
                if signum != signal.SIGTERM:  # the CLI's own, for its process
                    left.append(f"{signal.Signals(signum).name} handler {handler!r}")
        if (sys.unraisablehook, sys.excepthook, threading.excepthook) != hooks:
            sys.unraisablehook, sys.excepthook, threading.excepthook = hooks
            left.append("a hook of sys or threading replaced")
        stand_in = sys.modules.get("httpx._main")
        if not had_httpx_cli and stand_in is not None and not hasattr(stand_in, "__file__"):
            del sys.modules["httpx._main"]  # the stand-in: a later import gets httpx's own
    assert not left, f"the in-process run left behind: {'; '.join(left)}"


@contextmanager
def _output_captured() -> Iterator[list[str]]:
    """File descriptors 1 and 2 into files while inside, and ``sys.stdout`` / ``sys.stderr``
    onto them as a process's are (what a library or a child writes there is caught too);
    then the list holds (stdout, stderr) and all is put back."""
    import tempfile

    texts: list[str] = []
    saved_streams = sys.stdout, sys.stderr
    for stream in saved_streams:
        stream.flush()
    saved_fds = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            utf8: dict[str, Any] = {"encoding": "utf-8", "closefd": False}
            with (
                open(1, "w", **utf8) as sys.stdout,
                open(2, "w", errors="backslashreplace", **utf8) as sys.stderr,
            ):
                yield texts
        finally:
            sys.stdout, sys.stderr = saved_streams
            for fd, saved in zip((1, 2), saved_fds, strict=True):
                os.dup2(saved, fd)
                os.close(saved)
        for file in (out, err):
            file.seek(0)
            texts.append(file.read().decode("utf-8", "replace"))


class FileCommandError(RuntimeError):
    """A ``GITHUB_OUTPUT`` / ``GITHUB_ENV`` / ``GITHUB_STATE`` file the runner would reject."""


def parse_file_command(text: str, what: str) -> dict[str, str]:
    """The runner's format: ``NAME=value`` or ``NAME<<DELIM`` ... ``DELIM`` (one per entry)."""
    values: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line == "":
            continue
        eq, heredoc = line.find("="), line.find("<<")
        if eq > 0 and (heredoc < 0 or eq < heredoc):
            values[line[:eq]] = line[eq + 1 :]
            continue
        if heredoc <= 0:
            raise FileCommandError(f"{what}: invalid line {line!r}")
        name, delimiter = line[:heredoc], line[heredoc + 2 :]
        body: list[str] = []
        while True:
            if i >= len(lines):
                raise FileCommandError(f"{what}: no closing delimiter {delimiter!r} for {name}")
            if lines[i] == delimiter:
                i += 1
                break
            body.append(lines[i])
            i += 1
        values[name] = "\n".join(body)
    return values


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) of a one-day self-signed certificate for 127.0.0.1 and localhost;
    skips the test where openssl is missing."""
    import shutil

    import pytest

    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test server's certificate")
    key, crt = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


@contextmanager
def reflink_fs(base: Path) -> Iterator[Path]:
    """A small XFS with reflinks, loop-mounted under ``base`` (unmounted after); the test is
    skipped, saying why, where this machine cannot mount one (not root, no mkfs.xfs)."""
    import shutil

    import pytest

    if os.geteuid() != 0 or shutil.which("mkfs.xfs") is None:
        pytest.skip("needs root and mkfs.xfs (scripts/install-clients.sh) to mount an XFS image")
    image, mount = base / "xfs.img", base / "mnt"
    mount.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(400 << 20)
    for cmd in (
        ["mkfs.xfs", "-q", "-m", "reflink=1", str(image)],
        ["mount", "-o", "loop", str(image), str(mount)],
    ):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            pytest.skip(f"no reflink filesystem to test on: {cmd[0]}: {done.stderr.strip()[:200]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, timeout=60, check=False)


def deep_folder(parent: Path, name: str, depth: int) -> None:
    """``parent/name/a/a/...`` ``depth`` deep, made relative to folder descriptors (a path that
    long is past PATH_MAX), with a file and a link to ``parent`` at the bottom."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    for part in [name] + ["a"] * depth:
        os.mkdir(part, dir_fd=fd)
        sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    os.symlink(parent, "up", dir_fd=fd)
    os.close(fd)


def remove_deep(parent: Path, name: str) -> None:
    """Remove what :func:`deep_folder` made, without recursion (pytest's clean-up recurses)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd, depth = os.open(parent / name, flags), 0
    while "a" in os.listdir(fd):
        sub = os.open("a", flags, dir_fd=fd)
        os.close(fd)
        fd, depth = sub, depth + 1
    for item in os.listdir(fd):
        os.unlink(item, dir_fd=fd)
    for _ in range(depth):
        up = os.open("..", flags, dir_fd=fd)
        os.close(fd)
        fd = up
        os.rmdir("a", dir_fd=fd)
    os.close(fd)
    os.rmdir(parent / name)


def count_listed(monkeypatch: Any) -> list[str]:
    """Every name gpuci.files' walks list from now on, in the order read: what a test of a
    walk's bound checks (the names past the bound must never be read, not only not kept)."""
    from gpuci import files

    read: list[str] = []
    real_scandir = os.scandir

    class Listing:
        def __init__(self, folder: Any) -> None:
            self.listed = real_scandir(folder)

        def __enter__(self) -> Iterator[os.DirEntry[str]]:
            return (read.append(e.name) or e for e in self.listed)  # type: ignore[func-returns-value]

        def __exit__(self, *exc: object) -> None:
            self.listed.close()

    monkeypatch.setattr(files.os, "scandir", Listing)
    return read
