"""Chaos: ``pods up`` cancelled at random moments leaves nothing behind.

Each case runs ``up`` in-process against the fake RunPod (and fake GitHub/GitLab runner APIs)
and sends the process a real SIGINT or SIGTERM (``signal.raise_signal``, so the handler ``up``
installed is what runs) at the k-th *tick*, k drawn from a seeded generator. A tick is each
moment where a real cancel can land: before and after every HTTP request (after: the server
did the work, the answer is lost), every read of the clock and every sleep, before and after
every ledger write. Some cases also lose create answers (the pod is made, the answer is a 503
or a read timeout), and some send a second signal while the cleanup runs (GitHub's SIGTERM
after its SIGINT). After each cancel: no pod alive on the fake, no runner registered, no
budget reservation live, and every pod the fake ever made is in the ledger under its owner,
ended.

SIGKILL (a lost runner, or the kill GitHub sends after its SIGTERM) runs no cleanup at all:
from the kill's tick on, nothing the process does reaches a server or the ledger. There the
backstops must hold: after the TTL (plus the reap interval the budget counts) and one
``pods reap``, no pod is alive, no runner registered, no reservation counts, and every pod
made is in the ledger under its owner, ended.
"""

from __future__ import annotations

import io
import json
import random
import signal
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_runpod import FakeRunPod
from pods_testing import FakeClock, api_env, call

from forges.fake_forges import FakeForges as FakeRunnersAPI
from gpuci.errors import GpuciError
from gpuci.pods._budgets import ledger
from gpuci.pods._lifecycle.cancel import Cancelled
from gpuci.runtime import Result, Runtime

SEED = 34
CANCELS = 200
OWNER = "chaos"


class _Killed(BaseException):
    """SIGKILL: the process is gone; nothing after this reaches the world."""


class _Unguarded(BaseException):
    """The signal landed before ``up`` installed its handler (nothing was made yet)."""


@dataclass
class Chaos:
    """Counts ticks; at tick ``at`` (and ``again``, if set) sends ``sig`` to this process."""

    at: int
    sig: int
    again: int = 0
    ticks: int = 0
    fired: int = 0
    kill_at: int = 0  # SIGKILL at this tick: the process stops dead (0: never)
    dead: bool = False

    def tick(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if self.dead:
            raise _Killed()
        self.ticks += 1
        if self.ticks == self.kill_at:
            self.dead = True
            raise _Killed()
        if self.ticks in (self.at, self.again):
            self.fired += 1
            second = signal.SIGTERM if self.sig == signal.SIGINT else signal.SIGINT
            signal.raise_signal(self.sig if self.fired == 1 else second)


class ChaosClock(FakeClock):
    chaos: Chaos | None = None

    def now(self) -> float:
        if self.chaos:
            self.chaos.tick()
        return self.t

    def sleep(self, seconds: float) -> None:
        if self.chaos:
            self.chaos.tick()
        super().sleep(seconds)


def _runpod_in_process(fake: FakeRunPod, request: httpx.Request) -> httpx.Response:
    """The fake RunPod's answer without a socket: its own handler, framed as its HTTP server
    frames it. A signal lands only at a tick, never inside a socket call, so the sockets
    added nothing to the cases but time (1,200 connections, about half the test)."""
    auth = request.headers.get("Authorization", "")
    target = request.url.raw_path.decode("ascii")
    status, headers, body = fake.handle(request.method, target, request.read(), auth)
    data = b"" if body is None else json.dumps(body).encode()
    framed = {"Content-Length": str(len(data)), **headers}
    if data:
        framed["Content-Type"] = "application/problem+json" if status >= 400 else "application/json"
    return httpx.Response(status, headers=framed, content=data, request=request)


@contextmanager
def _ticking(
    chaos_of: Callable[[], Chaos | None], lose: Callable[[], bool], fake: FakeRunPod
) -> Iterator[None]:
    """Ticks around every HTTP request and ledger write; ``lose()`` says whether this create's
    answer is lost (a read timeout after the server made the pod). RunPod's requests are
    answered by ``fake`` in process; the runner APIs' go over HTTP."""
    send = httpx.HTTPTransport.handle_request
    put = ledger.Ledger._put_new

    def tick() -> None:
        chaos = chaos_of()
        if chaos:
            chaos.tick()

    def handle(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        tick()
        if str(request.url).startswith(fake.url + "/"):
            response = _runpod_in_process(fake, request)
        else:
            response = send(self, request)
        tick()
        if request.method == "POST" and request.url.path == "/v2/pods" and lose():
            response.close()
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response

    def put_new(self: ledger.Ledger, key: str, item: Any) -> None:
        tick()
        put(self, key, item)
        tick()

    # The forge clients load the CA bundle afresh each (~35 ms); the fakes speak plain HTTP,
    # so one TLS context serves the whole run and keeps it to seconds.
    make_tls = ssl.create_default_context
    tls = make_tls()
    httpx.HTTPTransport.handle_request = handle  # type: ignore[method-assign]
    ledger.Ledger._put_new = put_new  # type: ignore[method-assign]
    ssl.create_default_context = lambda *a, **k: tls  # type: ignore[assignment]
    try:
        yield
    finally:
        httpx.HTTPTransport.handle_request = send  # type: ignore[method-assign]
        ledger.Ledger._put_new = put  # type: ignore[method-assign]
        ssl.create_default_context = make_tls


@contextmanager
def _test_handlers() -> Iterator[None]:
    """Before ``up`` installs its own handler (and after it restores this one), a signal
    raises _Unguarded here instead of killing the test run."""

    def unguarded(signum: int, frame: object) -> None:
        raise _Unguarded(signum)

    previous = {s: signal.signal(s, unguarded) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _pods(sub: str, environ: dict[str, str], clock: ChaosClock, **flags: str) -> tuple[Any, str]:
    """One in-process ``pods SUB``: (its Result or the exception that ended it, its log)."""
    err = io.StringIO()
    rt = Runtime(environ, json_mode=True, stdout=io.StringIO(), stderr=err)
    try:
        outcome: Any = call(sub, rt, clock, **flags)
    except (SystemExit, KeyboardInterrupt, _Unguarded, _Killed, GpuciError) as exc:
        outcome = exc
    return outcome, err.getvalue()


def _world() -> Iterator[tuple[FakeRunPod, FakeRunnersAPI, ChaosClock]]:
    clock = ChaosClock()
    with FakeRunPod(clock=lambda: clock.t) as fake, FakeRunnersAPI() as api:
        yield fake, api, clock


@pytest.fixture
def kill_world() -> Iterator[tuple[FakeRunPod, FakeRunnersAPI, ChaosClock]]:
    yield from _world()


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[FakeRunPod, FakeRunnersAPI, ChaosClock]]:
    yield from _world()


def _loser(state: dict[str, Any]) -> Callable[[], bool]:
    """``lose()`` for :func:`_ticking`: True while ``state["lose"]`` read timeouts are left."""

    def lose() -> bool:
        if state["lose"] > 0:
            state["lose"] -= 1
            return True
        return False

    return lose


def _scenario(rng: random.Random, fake: FakeRunPod, state: dict[str, Any]) -> dict[str, Any]:
    """A random case, set up on ``fake`` and ``state`` (its lost creates and timeouts)."""
    sc = {
        "runner": rng.choice(["", "", "github", "gitlab"]),
        "budget": rng.random() < 0.5,
        "steps": rng.randint(0, 3),
        "lost_creates": rng.choice([0, 0, 1, 2]),  # 503 after the pod is made
        "timeouts": rng.choice([0, 0, 1]),  # read timeouts after the pod is made
        "sig": rng.choice([signal.SIGINT, signal.SIGTERM]),
        "second": rng.random() < 0.3,
    }
    fake.steps_to_running = sc["steps"]
    fake.lose_create_responses = sc["lost_creates"]
    state["lose"] = sc["timeouts"]
    return sc


def _up_flags(sc: dict[str, Any], case: int, budget_usd: str) -> dict[str, str]:
    """``up``'s flags for a case: a runner pod or one running a command, maybe on a budget."""
    flags = {"gpu_types": "NVIDIA L40S", "ttl": "30m", "owner": OWNER}
    if sc["runner"]:
        flags.update(runner=sc["runner"], runner_labels=f"run-{case}")
    else:
        flags.update(image="img", command="serve")
    if sc["budget"]:
        flags["budget_usd"] = budget_usd
    return flags


def _check_clean(fake: FakeRunPod, api: FakeRunnersAPI, book: ledger.Ledger, made: set[str]):
    assert fake.pods == {}, f"pods alive after the cancel: {sorted(fake.pods)}"
    assert api.state.runners == {}, "a runner is still registered"
    live, _, _ = book.reservations(OWNER)
    assert live == [], f"budget reservations still live: {live}"
    records = book.book()
    for pod_id in made:  # every pod the fake made (so every dollar) is under its owner
        assert pod_id in records, f"{pod_id} is not in the ledger"
        assert records[pod_id].owner == OWNER and records[pod_id].ended()


def test_two_hundred_random_cancels_leave_nothing_alive(world, tmp_path: Path):
    fake, api, clock = world
    rng = random.Random(SEED)
    cancels = finished = 0
    seen: set[str] = set()
    state: dict[str, Any] = {"chaos": None, "lose": 0}

    with _ticking(lambda: state["chaos"], _loser(state), fake), _test_handlers():
        for case in range(CANCELS * 3):
            if cancels >= CANCELS:
                break
            sc = _scenario(rng, fake, state)
            at = rng.randint(1, 30)
            chaos = Chaos(at, sc["sig"], again=at + rng.randint(1, 8) if sc["second"] else 0)
            environ = api_env(
                fake,
                tmp_path,
                GPUCI_PODS_LEDGER=str(tmp_path / f"ledger{case}"),
                GPUCI_PODS_POLL_S="5",
                GITHUB_RUN_ID=str(case),
                GITHUB_ACTOR=OWNER,  # as on GitHub: the identity without a `git config` run
                GITHUB_SERVER_URL="https://github.com",
                USER=OWNER,
            )
            if sc["runner"]:
                environ.update(api.github_env() if sc["runner"] == "github" else api.gitlab_env())
            flags = _up_flags(sc, case, budget_usd="50")
            clock.chaos = state["chaos"] = chaos
            try:
                outcome, log = _pods("up", environ, clock, **flags)
            finally:
                clock.chaos = state["chaos"] = None
            made = set(fake.created_at) - seen
            seen |= made
            book = ledger.Ledger.open(environ["GPUCI_PODS_LEDGER"], environ)
            if isinstance(outcome, Result) or not chaos.fired:
                finished += 1  # the cancel came after up was over: end its pod, as down would
                for pod_id in list(fake.pods):
                    fake.api("DELETE", f"/v2/pods/{pod_id}")
                for rid in list(api.state.runners):
                    del api.state.runners[rid]
                continue
            cancels += 1
            where = f"case {case} {sc} cancelled at tick {chaos.at} of {chaos.ticks}:\n{log}"
            try:
                _check_clean(fake, api, book, made)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{where}") from None
            if not isinstance(outcome, _Unguarded):
                assert isinstance(outcome, Cancelled), where
                assert outcome.code == 128 + sc["sig"], where
                lines = [line for line in log.splitlines() if "pods up cancelled by" in line]
                assert len(lines) == 1, where
    assert cancels >= CANCELS, f"only {cancels} cancels landed ({finished} runs finished first)"
    assert len(seen) > CANCELS // 4, "too few cancels came after a pod was made to mean much"


KILLS = 100
TTL_S = 30 * 60
REAP_INTERVAL_S = 15 * 60  # up's default: the budget counts each pod for ttl plus this


def test_sigkill_leaves_the_ttl_and_one_reap_as_the_backstop(kill_world, tmp_path: Path):
    """100 SIGKILLs at random moments (some after a SIGINT, as GitHub kills a cleanup that
    overruns its grace), no cleanup at all; then the TTL passes and one reap runs."""
    fake, api, clock = kill_world
    rng = random.Random(SEED + 1)
    kills = 0
    state: dict[str, Any] = {"chaos": None, "lose": 0}
    environ = api_env(
        fake,
        tmp_path,
        GPUCI_PODS_POLL_S="5",
        GITHUB_SERVER_URL="https://github.com",
        USER=OWNER,
        **api.github_env(),
        **api.gitlab_env(),
    )

    with _ticking(lambda: state["chaos"], _loser(state), fake), _test_handlers():
        for case in range(KILLS * 3):
            if kills >= KILLS:
                break
            sc = _scenario(rng, fake, state)
            kill_at = rng.randint(1, 30)
            sigint_first = rng.random() < 0.3  # SIGINT, then the kill during the cleanup
            at = rng.randint(1, kill_at - 1) if sigint_first and kill_at > 1 else 0
            chaos = Chaos(at, signal.SIGINT, kill_at=kill_at)
            flags = _up_flags(sc, case, budget_usd="500")
            run_env = {**environ, "GITHUB_RUN_ID": str(case), "CI_PIPELINE_ID": str(case)}
            if sc["runner"] == "gitlab":  # one platform's runner per up
                run_env.pop("GPUCI_RUNNER_TOKEN")
            clock.chaos = state["chaos"] = chaos
            try:
                outcome, log = _pods("up", run_env, clock, **flags)
            finally:
                clock.chaos = state["chaos"] = None
            kills += isinstance(outcome, _Killed)
            clock.t += 60  # the next run starts a minute later
    assert kills >= KILLS, f"only {kills} kills landed"
    made = set(fake.created_at)
    assert len(made) > KILLS // 4, "too few kills came after a pod was made to mean much"

    # The backstop: every pod's TTL passes (its own timer stops it; reap does not need that),
    # then one reap, as the scheduled reaper or the next pod workflow's first step runs it.
    clock.t += TTL_S + REAP_INTERVAL_S + 60
    alive = set(fake.pods)
    reaped, log = _pods("reap", environ, clock, runner_scope="repo")
    assert isinstance(reaped, Result), log
    book = ledger.Ledger.open(environ["GPUCI_PODS_LEDGER"], environ)
    assert fake.pods == {}, f"pods alive after the TTL and one reap: {sorted(fake.pods)}"
    assert api.state.runners == {}, "a runner is still registered"
    live, _, _ = book.reservations(OWNER)
    assert all(r.until <= clock.t for r in live), "a budget reservation still counts"
    records = book.book()
    for pod_id in made:  # RunPod bills by pod id; the ledger names whose each dollar is
        assert pod_id in records, f"{pod_id} is not in the ledger"
        assert records[pod_id].owner == OWNER
        # a pod the reap ended is recorded ended; one a cleanup ended just before its kill
        # (no end written) bills nothing more, and its record still names the owner
        assert records[pod_id].ended() or pod_id not in alive, pod_id
    assert alive, "no pod outlived its run: the reap was not tested"
