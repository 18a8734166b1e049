"""botocore's credential chain, held to the S3 operation's deadline.

botocore resolves the chain (environment, profile, SSO, ``credential_process``, web identity
through STS, the container endpoint, the instance role through IMDS) and refreshes expiring
credentials under its own time limits: a ``credential_process`` is waited for without any
(``Popen.communicate()``), STS gets 60 s a read and retries, and a server that trickles a byte
at a time meets no limit at all. So the store never waits on botocore directly:
:class:`Chain` runs the resolution, and every refresh, in a worker thread and waits for it
only until the operation's deadline. Past it the step ends with one line naming the source
that did not answer (exit 3), never a secret. Every ``credential_process`` runs in a session of
its own (:mod:`gpuci.procgroup`): at the deadline, and when the step ends however it ends
(Ctrl-C, the runner's SIGTERM), its whole group is killed, whatever it started with it; and
botocore reads at most 1 MiB of what it prints (its ``communicate()`` would hold all of it in
memory): past that, its group is killed too. The thread, if a server still holds it, is a
daemon: it ends with the step.

Credentials that need no refresh (static keys, role credentials far from expiry) are frozen
at once on the caller's thread: a restore's thousands of signatures start no thread. Inside
botocore's advisory window (15 minutes from expiry, not yet its mandatory 10) the refresh runs
on the worker thread and the caller signs with the credentials still valid, as botocore does
when an advisory refresh fails: a helper that hangs or breaks then costs nothing yet.
"""

from __future__ import annotations

import errno
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from gpuci import procgroup, settings
from gpuci.errors import InputError, StoreError
from gpuci.redact import excerpt

__all__ = ["Chain"]

T = TypeVar("T")

# botocore's providers (their METHOD) in words a user can act on.
_SOURCES = {
    "custom-process": "the profile's credential_process",
    "assume-role-with-web-identity": "STS (web identity: AWS_WEB_IDENTITY_TOKEN_FILE)",
    "assume-role": "STS (the profile's role_arn)",
    "sso": "AWS SSO (the profile's sso_session)",
    "login": "the AWS login token",
    "container-role": "the container credentials endpoint",
    "iam-role": "the instance metadata service (IMDS, the instance role)",
}


# How often a wait for the chain wakes, so a signal's handler runs that soon (see _Job.wait).
_WAKE_S = 0.2
# A helper or a file the AWS config names that is not there or cannot be run.
# What botocore may read of a credential_process's stdout, and of its stderr: its JSON answer
# is a few KiB.
_MAX_HELPER_OUTPUT = 1 << 20
_CANNOT_RUN = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ENOEXEC}


class _Job(Generic[T]):
    """One call of ``fn`` on a daemon thread; callers wait for it each until their deadline."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self._fn = fn
        threading.Thread(target=self._run, name="gpuci-aws-credentials", daemon=True).start()

    def _run(self) -> None:
        try:
            self.value = self._fn()
        except BaseException as exc:  # handed to the waiting caller, who raises it
            self.error = exc
        finally:
            self.done.set()

    def wait(self, until: float) -> bool:
        """Wait for the job until ``until``, in short slices: a signal the kernel hands to
        another thread (the helper's, say) runs its Python handler only once the main thread
        is back in the interpreter, so a wait of the whole deadline would hold off the
        runner's SIGTERM or a Ctrl-C for that long."""
        while not self.done.wait(min(_WAKE_S, max(0.0, until - time.monotonic()))):
            if time.monotonic() >= until:
                return False
        return True


class Chain:
    """A botocore session's credential chain, resolved and refreshed within deadlines.

    Args:
        session: the botocore session whose chain this is (hooked here: every
            ``credential_process`` it starts is known and can be killed).
        url: the store's URL, for messages.
        timeout: ``GPUCI_S3_TIMEOUT``: the socket time limit of botocore's own clients (STS,
            SSO), so a server that never answers frees the worker thread in that time too.
    """

    def __init__(self, session: Any, url: str, timeout: float) -> None:
        self._session, self._url = session, url
        self._lock = threading.Lock()
        self._job: _Job[Any] | None = None
        self._helpers = procgroup.Groups()  # every credential_process, in a session of its own
        self._popen = functools.partial(self._helpers.popen, max_output=_MAX_HELPER_OUTPUT)
        self.source = ""  # the provider running or last used (botocore's METHOD)
        self._hook(timeout)

    # ----- botocore's session, hooked ------------------------------------------------------------
    def _hook(self, timeout: float) -> None:
        from botocore.config import Config
        from botocore.credentials import ProcessProvider

        session = self._session
        default = session.get_default_client_config()
        bounded = Config(connect_timeout=timeout, read_timeout=timeout)
        session.set_default_client_config(default.merge(bounded) if default else bounded)
        resolver = session.get_component("credential_provider")
        for provider in getattr(resolver, "providers", []):
            if isinstance(provider, ProcessProvider):
                provider._popen = self._popen
            builder = getattr(provider, "_profile_provider_builder", None)
            create = getattr(builder, "_create_process_provider", None)
            if builder is not None and create is not None:  # a role's source profile
                builder._create_process_provider = self._hooked_create(create)
            load = getattr(provider, "load", None)
            if load is not None:
                provider.load = self._named_load(load, str(getattr(provider, "METHOD", "")))

    def _hooked_create(self, create: Callable[[str], Any]) -> Callable[[str], Any]:
        def hooked(profile_name: str) -> Any:
            provider = create(profile_name)
            provider._popen = self._popen
            provider.load = self._named_load(provider.load, str(provider.METHOD))
            return provider

        return hooked

    def _named_load(self, load: Callable[[], Any], method: str) -> Callable[[], Any]:
        def named() -> Any:
            self.source = method
            return load()

        return named

    # ----- bounded calls -------------------------------------------------------------------------
    def resolve(self, until: float) -> Any:
        """botocore's credentials object (None when the chain has none), by ``until``."""
        return self._bounded(self._session.get_credentials, until, "resolve")

    def frozen(self, creds: Any, until: float) -> Any:
        """``creds.get_frozen_credentials()``: at once when no refresh is due; in botocore's
        advisory window, the credentials still valid while the refresh runs on the worker
        thread; in its mandatory window (or with none yet), the refresh's, by ``until``. One
        refresh at a time: a second caller waits for the one running."""
        needed = getattr(creds, "refresh_needed", None)
        if needed is None or not needed():
            return creds.get_frozen_credentials()
        self.source = str(getattr(creds, "method", "") or self.source)
        # What botocore itself signs with when an advisory refresh fails or another thread
        # runs it (RefreshableCredentials._refresh); getattr: any other class waits, as before.
        valid = getattr(creds, "_frozen_credentials", None)
        mandatory = getattr(creds, "_mandatory_refresh_timeout", None)
        if valid is not None and mandatory is not None and not needed(mandatory):
            self._start(creds.get_frozen_credentials)
            return valid
        return self._bounded(creds.get_frozen_credentials, until, "refresh")

    def _start(self, fn: Callable[[], T]) -> _Job[Any]:
        """The job running, else a new one running ``fn``."""
        with self._lock:
            if self._job is None or self._job.done.is_set():
                self._job = _Job(fn)
            return self._job

    def _bounded(self, fn: Callable[[], T], until: float, verb: str) -> T:
        started = time.monotonic()
        job = self._start(fn)
        if not job.wait(until):
            self._helpers.kill()
            raise self._too_slow(verb, time.monotonic() - started)
        if job.error is not None:
            raise self._unreadable(job.error)
        return cast(T, job.value)

    def describe(self) -> str:
        """The source running or last used, in words (for messages)."""
        return _SOURCES.get(self.source, "the AWS credential chain")

    def _unreadable(self, error: BaseException) -> BaseException:
        """botocore's own errors as they are (the caller words them); the rest as one line
        naming the source, never what it said (a helper's stderr, a server's message may hold
        a secret): a helper or file that cannot be run or read (exit 2: the AWS config's to
        fix), a service's refusal (ClientError: its code only), an answer botocore trips on (no
        JSON: ValueError, a JSON list: AttributeError, credentials expired: RuntimeError)."""
        import botocore.exceptions as aws

        source, what = self.describe(), type(error).__name__
        if isinstance(error, aws.BotoCoreError):
            return error
        if isinstance(error, procgroup.OutputFlood):
            return StoreError(
                f"the AWS credentials for {self._url} cannot be read: {source} printed more "
                f"than {error.limit >> 20} MiB (its group was killed)",
                hint=f"make {source} print only its JSON answer",
            )
        if isinstance(error, aws.ClientError):
            code = excerpt(str(error.response.get("Error", {}).get("Code") or "no code"), 40)
            return StoreError(
                f"{source} refused to issue the AWS credentials for {self._url} ({code})",
                hint=f"check what {source} is given: the role, its trust policy, the token",
            )
        if isinstance(error, OSError) and error.errno in _CANNOT_RUN:
            run = self.source == "custom-process"
            return InputError(
                f"the AWS credentials for {self._url} cannot be read: {source} cannot be "
                f"{'run' if run else 'read'} ({what})",
                hint=f"make {source} name "
                + ("an executable file (chmod +x)" if run else "a file that can be read"),
            )
        if isinstance(error, OSError):
            return StoreError(
                f"the AWS credentials for {self._url} cannot be read: {source} failed ({what})",
                hint=f"check {source} and retry",
            )
        if not isinstance(error, ValueError | TypeError | AttributeError | RuntimeError):
            return error
        return StoreError(
            f"the AWS credentials for {self._url} cannot be read from what {source} answered "
            f"({what})",
            hint=f"make {source} answer as the AWS CLI expects (for credential_process: JSON "
            'with "Version": 1, AccessKeyId, SecretAccessKey and any Expiration in the future)',
        )

    def _too_slow(self, verb: str, waited: float) -> StoreError:
        source = self.describe()
        doing = "resolving" if verb == "resolve" else "refreshing"
        return StoreError(
            f"{doing} the AWS credentials for {self._url} took over {waited:.1f} s: {source} "
            "did not answer in time",
            hint=f"make {source} answer within one S3 operation's time limit "
            f"({settings.S3_TIMEOUT.name} x 8), raise {settings.S3_TIMEOUT.name}, or use keys "
            "in the environment",
        )
