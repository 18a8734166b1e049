"""botocore's credential chain, held to the S3 operation's deadline.

botocore resolves the chain (environment, profile, SSO, ``credential_process``, web identity
through STS, the container endpoint, the instance role through IMDS) and refreshes expiring
credentials under its own time limits: a ``credential_process`` is waited for without any
(``Popen.communicate()``), STS gets 60 s a read and retries, and a server that trickles a byte
at a time meets no limit at all. So the store never waits on botocore directly:
:class:`Chain` runs the resolution, and every refresh, in a worker thread and waits for it
only until the operation's deadline. Past it the step ends with one line naming the source
that did not answer (exit 3), never a secret, and every ``credential_process`` still running
is killed with its process group (it runs in a session of its own): a helper that hangs is
not left behind. The thread, if a server still holds it, is a daemon: it ends with the step.

Credentials that need no refresh (static keys, role credentials far from expiry) are frozen
at once on the caller's thread: a restore's thousands of signatures start no thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from gpuci import settings
from gpuci.errors import StoreError

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
        return self.done.wait(max(0.0, until - time.monotonic()))


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
        self._processes: list[subprocess.Popen[bytes]] = []
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

    def _popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """``subprocess.Popen`` for botocore's ProcessProvider, in a session of its own so the
        helper and whatever it started can be killed together."""
        process: subprocess.Popen[bytes] = subprocess.Popen(args, start_new_session=True, **kwargs)
        with self._lock:
            self._processes = [p for p in self._processes if p.poll() is None]
            self._processes.append(process)
        return process

    # ----- bounded calls -------------------------------------------------------------------------
    def resolve(self, until: float) -> Any:
        """botocore's credentials object (None when the chain has none), by ``until``."""
        return self._bounded(self._session.get_credentials, until, "resolve")

    def frozen(self, creds: Any, until: float) -> Any:
        """``creds.get_frozen_credentials()`` by ``until``: at once when no refresh is due,
        else on the worker thread (one refresh at a time: a second caller waits for it)."""
        needed = getattr(creds, "refresh_needed", None)
        if needed is None or not needed():
            return creds.get_frozen_credentials()
        self.source = str(getattr(creds, "method", "") or self.source)
        return self._bounded(creds.get_frozen_credentials, until, "refresh")

    def _bounded(self, fn: Callable[[], T], until: float, verb: str) -> T:
        started = time.monotonic()
        with self._lock:
            job = self._job
            if job is None or job.done.is_set():
                job = self._job = _Job(fn)
        if not job.wait(until):
            self._kill()
            raise self._too_slow(verb, time.monotonic() - started)
        if job.error is not None:
            raise self._unreadable(job.error)
        return cast(T, job.value)

    def _kill(self) -> None:
        """Every credential_process still running, with its process group."""
        with self._lock:
            running = [p for p in self._processes if p.poll() is None]
        for process in running:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()

    def describe(self) -> str:
        """The source running or last used, in words (for messages)."""
        return _SOURCES.get(self.source, "the AWS credential chain")

    def _unreadable(self, error: BaseException) -> BaseException:
        """botocore's own errors as they are (the caller words them); what a source's answer
        made botocore trip on (a credential_process printing no JSON: ValueError, a JSON list:
        AttributeError) as one line naming the source, not an internal error."""
        import botocore.exceptions

        if isinstance(error, botocore.exceptions.BotoCoreError) or not isinstance(
            error, ValueError | TypeError | AttributeError
        ):
            return error
        source = self.describe()
        return StoreError(
            f"the AWS credentials for {self._url} cannot be read from what {source} answered "
            f"({type(error).__name__})",
            hint=f"make {source} answer as the AWS CLI expects (for credential_process: JSON "
            'with "Version": 1, AccessKeyId and SecretAccessKey)',
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
