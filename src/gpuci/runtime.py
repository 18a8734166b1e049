"""The CI runtime: one Result per command, rendered for GitHub, GitLab, a terminal or JSON.

Commands never touch ``GITHUB_OUTPUT`` and friends themselves: they return a :class:`Result` and
:meth:`Runtime.render` writes it the way the platform expects. During a run they log, open groups
and mask secrets through the same :class:`Runtime`, so the platform rules live in one place.

GitHub rules followed here: file commands (``GITHUB_OUTPUT``, ``GITHUB_ENV``, ``GITHUB_PATH``,
``GITHUB_STATE``) with a random heredoc delimiter, never the deprecated ``::set-output``;
``::add-mask::`` the moment a secret is read; annotation text escaped (``%``, CR, LF, and in
properties ``:`` and ``,``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from gpuci import redact as _redact
from gpuci import settings
from gpuci.errors import ExitCode, GpuciError, InfraError, InputError
from gpuci.units import format_output

if TYPE_CHECKING:
    from gpuci.annotation import Annotation, Level

Platform = Literal["github", "gitlab", "terminal", "json"]
OutputValue = str | int | float | bool | None


@dataclass
class Result:
    """Everything a command has to say: outputs, summary, annotations, exit code, report."""

    command: str
    exit_code: ExitCode = ExitCode.OK
    headline: str = ""
    outputs: dict[str, OutputValue] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)  # markdown blocks for the job summary
    annotations: list[Annotation] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)
    state: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)  # machine-readable detail for --json

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    def error(self, message: str, title: str = "") -> None:
        self._annotate("error", message, title)

    def warning(self, message: str, title: str = "") -> None:
        self._annotate("warning", message, title)

    def notice(self, message: str, title: str = "") -> None:
        self._annotate("notice", message, title)

    def _annotate(self, level: Level, message: str, title: str) -> None:
        from gpuci.annotation import Annotation  # a result without one never builds the class

        self.annotations.append(Annotation(level, message, title))

    @classmethod
    def from_error(cls, command: str, exc: GpuciError) -> Result:
        result = cls(command=command, exit_code=exc.exit_code, headline=exc.one_line())
        result.error(exc.one_line(), exc.title)
        result.report = {
            "error": {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
        }
        return result


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Every table gpu-ci writes: cells inert (:mod:`gpuci.markdown`), Code cells as code."""
    from gpuci.markdown import table

    return table(headers, rows)


def detect_platform(environ: Mapping[str, str]) -> Platform:
    if settings.GITHUB_ACTIONS.is_true(environ):
        return "github"
    if settings.GITLAB_CI.is_true(environ):
        return "gitlab"
    return "terminal"


def _escape_mask(text: str) -> str:
    """``::add-mask::`` data: the runner's escapes only, so the mask is the secret itself.

    (The line is read as add-mask before anything else, so nothing in it can start a command.)
    """
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _encodable(text: str) -> str:
    """``text`` with each lone surrogate as its escape (``\\ud800``): one a PR's JSON or YAML
    escaped, or a file name that is not UTF-8, is no text a UTF-8 stream or file can take, and
    writing it raised UnicodeEncodeError (an internal error, the result unsaid)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _escape_data(text: str) -> str:
    """A workflow command's data: the runner's own escapes, other control characters made
    visible (an escape sequence could rewrite the log line), and no ``##[`` inside."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return _encodable(_redact.single_line(text)).replace("##[", "##%5B")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


# The runner reads a line as a workflow command when, after leading whitespace, it starts with
# ``::``, or when it holds ``##[`` anywhere (the older syntax, still parsed, e.g. ``##[add-mask]``).
_COMMAND_START = re.compile(r"^(\s*)::")


def inert(line: str) -> str:
    """One printed line that the runner cannot read as a workflow command (second layer).

    Values are already escaped onto one line where they are put into text; this catches what
    a multi-line block (a summary, an output) still carries, whatever its source. Every line
    printed passes here, so it is also where text no stream can encode is escaped
    (:func:`_encodable`).
    """
    return _COMMAND_START.sub(r"\1%3A%3A", _encodable(line)).replace("##[", "##%5B")


def inert_block(text: str) -> str:
    """:func:`inert` for each line; control characters other than newline escaped."""
    return "\n".join(inert(_redact.single_line(line)) for line in text.split("\n"))


# GitHub refuses a step's summary over 1 MiB ("$GITHUB_STEP_SUMMARY upload aborted, supports
# content up to a size of 1024k") and shows none of it; GPUCI_SUMMARY's are held to the same.
MAX_SUMMARY_BYTES = 1 << 20


def _file_size(path: Path) -> int:
    """What a file already holds (0 when it is not there yet)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


_FILE_COMMAND_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*"  # text: ``re`` compiles it on first use


def _append_to(path: Path, what: str, text: str) -> None:
    """Append ``text`` to the regular file (or character device: ``/dev/null``) at ``path``,
    opened without waiting: a FIFO where the runner's file was (a job's step can replace it)
    held ``open`` or the write for ever, and a folder or a file that cannot be written was an
    internal error. Each is one line (InfraError) naming ``what`` the file is. Text no UTF-8
    can hold (a lone surrogate) is written as its escape (:func:`_encodable`)."""
    import errno
    import stat

    from gpuci.files import write_all

    data = text.encode("utf-8", "backslashreplace")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:  # ENXIO: a FIFO no one reads; EISDIR, EACCES, ENOENT...
        why = "not a regular file" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
        raise _unwritable(path, what, why) from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            raise _unwritable(path, what, "not a regular file")
        if stat.S_ISREG(mode):  # a device stays non-blocking: a terminal held never waits
            os.set_blocking(fd, True)
        try:
            write_all(fd, data)
        except OSError as exc:  # ENOSPC; EAGAIN of a device that would wait
            raise _unwritable(path, what, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def _unwritable(path: Path, what: str, why: str) -> InfraError:
    return InfraError(
        f"cannot write {what} ({_redact.single_line(str(path))}): {why}",
        hint=f"point {what.lstrip('$')} at a regular file this job can write",
    )


_COLOURS = {"error": "31", "warning": "33", "notice": "36", "ok": "32", "bold": "1", "dim": "2"}


class Runtime:
    """Platform-aware I/O for one command run."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        json_mode: bool = False,
        dry_run: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.platform: Platform = "json" if json_mode else detect_platform(self.environ)
        self.ci_platform = detect_platform(self.environ)
        self.dry_run = dry_run
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self._secrets: set[str] = set()
        self._sections = 0

    # ----- terminal niceties -------------------------------------------------------------
    @property
    def is_tty(self) -> bool:
        return (
            bool(getattr(self.stderr, "isatty", lambda: False)()) and self.ci_platform == "terminal"
        )

    def colour(self, text: str, style: str) -> str:
        out = self.stdout
        if self.platform != "terminal" or settings.NO_COLOR.is_set(self.environ):
            return text
        if not getattr(out, "isatty", lambda: False)():
            return text
        return f"\033[{_COLOURS[style]}m{text}\033[0m"

    # ----- secrets -----------------------------------------------------------------------
    def mask(self, secret: str | None) -> None:
        """Register a secret: masked by the runner from now on, and redacted in our own text."""
        if not secret or len(secret) < 3:
            return
        for part in {secret, *secret.splitlines()}:
            part = part.strip()
            if len(part) < 3 or part in self._secrets:
                continue
            self._secrets.add(part)
            _redact.register(part)
            if self.ci_platform == "github":  # with the log, so it precedes any later line
                self.stderr.write(f"::add-mask::{_escape_mask(part)}\n")
                self.stderr.flush()

    def redact(self, text: str) -> str:
        """Masked secrets as ``***``, and every URL's credentials (userinfo, secret params)."""
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return _redact.redact_urls(text)

    def line(self, text: str) -> str:
        """One value or message as one printable line: redacted, control characters escaped."""
        return _redact.single_line(self.redact(text))

    # ----- logging -----------------------------------------------------------------------
    @property
    def _log_stream(self) -> TextIO:
        """Logs, groups and progress go to stderr: stdout carries the result only, so
        ``gpuci ... | head`` or ``| true`` never breaks a transfer midway."""
        return self.stderr

    def log(self, message: str) -> None:
        """One line in the log, whatever the message holds (CR/LF cannot start another)."""
        stream = self._log_stream
        stream.write(inert(self.line(message)) + "\n")
        stream.flush()

    @contextlib.contextmanager
    def group(self, title: str) -> Iterator[None]:
        """A collapsible log section (GitHub group, GitLab section, a heading elsewhere)."""
        stream = self._log_stream
        title = _encodable(self.line(title))
        if self.platform == "github":
            stream.write(f"::group::{_escape_data(title)}\n")
        elif self.platform == "gitlab":
            self._sections += 1
            name = f"gpuci_{self._sections}_{re.sub(r'[^a-z0-9_]', '_', title.lower())[:40]}"
            stream.write(
                f"\033[0Ksection_start:{int(time.time())}:{name}[collapsed=true]\r\033[0K{title}\n"
            )
        else:
            stream.write(self.colour(inert(f"== {title}"), "bold") + "\n")
        stream.flush()
        try:
            yield
        finally:
            if self.platform == "github":
                stream.write("::endgroup::\n")
            elif self.platform == "gitlab":
                stream.write(f"\033[0Ksection_end:{int(time.time())}:{name}\r\033[0K\n")
            stream.flush()

    # ----- rendering ---------------------------------------------------------------------
    def render(self, result: Result) -> int:
        """Write the result the platform's way and return the exit code."""
        renderer = {
            "github": self._render_github,
            "gitlab": self._render_gitlab,
            "terminal": self._render_terminal,
            "json": self._render_json,
        }[self.platform]
        renderer(result)
        self.stdout.flush()
        return int(result.exit_code)

    def _text_lines(self, result: Result, annotations: bool = True) -> list[str]:
        lines: list[str] = []
        verdict = {
            0: ("ok", "ok"),
            1: ("check failed", "error"),
            2: ("bad input", "error"),
            3: ("infrastructure error", "error"),
        }[int(result.exit_code)]
        # Values are made one line each (self.line) before colour is added; blocks that are
        # many lines by design (summary, multi-line outputs) get every line made inert.
        head = f"{result.command}: {verdict[0]}"
        if result.headline:
            head += f": {result.headline}"
        lines.append(self.colour(inert(self.line(head)), verdict[1]))
        for note in result.annotations if annotations else []:
            if note.message == result.headline:
                continue  # already said on the first line
            label = self.colour(note.level.upper(), note.level)
            text = self.line(f"{note.title + ': ' if note.title else ''}{note.message}")
            lines.append(f"{label}: {inert(text)}")
        for block in result.summary:
            lines.append("")
            lines.append(inert_block(self.redact(block)))
        if result.outputs:
            lines.append("")
            lines.append(self.colour("outputs:", "dim"))
            for key, value in result.outputs.items():
                text = inert_block(self.redact(format_output(value)))
                lines.append(inert(f"  {self.line(key)}: " + text.replace("\n", "\n    ")))
        return lines

    def preflight(self) -> None:
        """Fail before any work when the platform could not take the result (no GITHUB_OUTPUT).

        Finding out only at render time would waste a long download and print "ok" first.
        """
        if self.platform == "github":
            self._file_var(settings.GITHUB_OUTPUT)

    def render_failure(self, exc: GpuciError) -> int:
        """The last word when rendering failed (e.g. no GITHUB_OUTPUT): one line, no files."""
        text = self.line(exc.one_line())
        if self.ci_platform == "github":
            title = _escape_property(exc.title)
            self.stdout.write(f"::error title={title}::{_escape_data(text)}\n")
        else:
            self.stdout.write(inert(f"error: {text}") + "\n")
        self.stdout.flush()
        return int(exc.exit_code)

    def _render_terminal(self, result: Result) -> None:
        self.stdout.write("\n".join(self._text_lines(result)) + "\n")

    def _render_json(self, result: Result) -> None:
        body = {
            "command": result.command,
            "exit_code": int(result.exit_code),
            "ok": result.ok,
            "headline": result.headline,
            "outputs": {k: format_output(v) for k, v in result.outputs.items()},
            "annotations": [a.__dict__ for a in result.annotations],
            "env": result.env,
            "path": result.path,
            "report": result.report,
            "summary_markdown": "\n\n".join(result.summary),
        }
        text = self.redact(json.dumps(body, indent=2, default=str))
        # "##[" only occurs inside JSON strings, where "\u005b" is the same "[": the document
        # parses to the same value and the runner reads no "##[command]" in it.
        self.stdout.write(text.replace("##[", "##\\u005b") + "\n")

    def _file_var(self, var: settings.Setting) -> Path:
        value = var.value(self.environ)
        if not value:
            raise InfraError(
                f"running in GitHub Actions but ${var.name} is not set",
                hint="run on a current runner (file commands replaced ::set-output in 2022)",
            )
        return Path(value)

    @staticmethod
    def _heredoc(name: str, value: str) -> str:
        """``name<<DELIM``, the value, ``DELIM``: a fresh random delimiter the value lacks.

        The name is checked too: a name holding ``<<``, ``=`` or a newline would let a value
        end the entry early and write a variable of its own choosing.
        """
        if not re.fullmatch(_FILE_COMMAND_NAME, name):  # match's $ passes a final newline
            raise InputError(
                f"refusing to write the variable name {_redact.single_line(name)!r}",
                hint="names are letters, digits, '_', '-' and '.', starting with a letter",
            )
        import uuid  # slow to import (it loads platform; docs/benchmarks.md): only for outputs

        delimiter = f"ghadelimiter_{uuid.uuid4()}"
        while delimiter in value:  # astronomically unlikely; loop for proof, not for luck
            delimiter = f"ghadelimiter_{uuid.uuid4()}"
        return f"{name}<<{delimiter}\n{value}\n{delimiter}\n"

    def _append(self, var: settings.Setting, text: str) -> None:
        """Append to a file command's file; an output holding a lone surrogate (a name that is
        not UTF-8) is written with its escape (:func:`_encodable`), never an internal error."""
        _append_to(self._file_var(var), f"${var.name}", text)

    def _render_github(self, result: Result) -> None:
        for note in result.annotations:
            props = f" title={_escape_property(self.redact(note.title))}" if note.title else ""
            self.stdout.write(f"::{note.level}{props}::{_escape_data(self.redact(note.message))}\n")
        for entry in result.path:  # one entry per line: a newline would add a second entry
            if "\n" in entry or "\r" in entry:
                raise InputError(
                    f"refusing a PATH entry with a line break: {self.line(entry)!r}",
                    hint="PATH entries are single lines",
                )
        self.stdout.write("\n".join(self._text_lines(result, annotations=False)) + "\n")
        if result.outputs:
            self._append(
                settings.GITHUB_OUTPUT,
                "".join(self._heredoc(k, format_output(v)) for k, v in result.outputs.items()),
            )
        if result.env:
            self._append(
                settings.GITHUB_ENV, "".join(self._heredoc(k, v) for k, v in result.env.items())
            )
        if result.path:
            self._append(settings.GITHUB_PATH, "".join(f"{p}\n" for p in result.path))
        if result.state:
            self._append(
                settings.GITHUB_STATE, "".join(self._heredoc(k, v) for k, v in result.state.items())
            )
        if result.summary:
            path = self._file_var(settings.GITHUB_STEP_SUMMARY)
            summary = self._summary(result, _file_size(path))  # the step's file holds it all
            if summary:
                self._append(settings.GITHUB_STEP_SUMMARY, summary)

    def _summary(self, result: Result, already: int = 0) -> str:
        """The result's summary as appended to a summary file that holds ``already`` bytes:
        redacted, inert, and cut at whole lines (:func:`gpuci.markdown.cut`) so the file stays
        within MAX_SUMMARY_BYTES; "" when nothing fits."""
        from gpuci.markdown import cut, utf8_size

        text = inert_block(self.redact("\n\n".join(result.summary)))
        kept = cut(text, MAX_SUMMARY_BYTES - already - 2, utf8_size)  # 2: the blank line after
        return kept + "\n\n" if kept else ""

    def _render_gitlab(self, result: Result) -> None:
        from gpuci import dotenv

        self.stdout.write("\n".join(self._text_lines(result)) + "\n")
        pairs = {dotenv.variable_name(k): format_output(v) for k, v in result.outputs.items()}
        pairs.update(result.env)
        pairs = {name: _encodable(value) for name, value in pairs.items()}  # a UTF-8 file
        # Only what later jobs need, at most GitLab's limit (see gpuci.dotenv).
        dotenv.write(self.environ, pairs, lambda message: self.log(f"warning: {message}"))
        summary_file = settings.SUMMARY.value(self.environ)
        if summary_file and result.summary:
            # a file for the job: each command's summary cut on its own
            _append_to(Path(summary_file), settings.SUMMARY.name, self._summary(result))

    # ----- progress ----------------------------------------------------------------------
    def progress(self, label: str, total: int | None):
        """A byte meter: a live bar on a terminal, plain lines every few seconds in CI."""
        from gpuci.progress import Progress

        interval = settings.PROGRESS_INTERVAL.number(self.environ)
        return Progress(
            inert(self.line(label)), total, self._log_stream, live=self.is_tty, interval=interval
        )


# ----- dry-run probes --------------------------------------------------------------------------
def probes_allowed(rt_or_env: object) -> bool:
    """Whether a dry run may ask a server anything: never, unless ``--probe`` says so.

    A dry run is the laptop check before a GPU job and needs no network: by default it plans from
    what it was given (the URL, the digest, the key). ``--probe`` (``GPUCI_PROBE=true``) opts in
    to read-only probes: a HEAD (or one-byte GET) per download, a listing of pods.

    Args:
        rt_or_env: a :class:`Runtime`, or an environment mapping.

    Returns:
        True when read-only probes are allowed.
    """
    env = getattr(rt_or_env, "environ", rt_or_env)
    if not isinstance(env, Mapping):
        return False
    return settings.PROBE.value(env).lower() in ("1", "true", "yes")
