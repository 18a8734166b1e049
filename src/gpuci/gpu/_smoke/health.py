"""NVML before and after the load: counters that grew, XIDs raised, links and clocks under load.

A single read proves little: a GPU can look clean idle and raise an uncorrectable ECC error, a
PCIe replay storm or an XID only once it is worked. So the counters are read before the load,
XID critical errors are listened for while it runs, a sampler polls clock-event reasons during
it, and the counters are read again after. A rise in uncorrected ECC errors, any XID, any
pending remap fails the GPU. Two signals are noisy on healthy GPUs and are judged accordingly:

- the hardware-slowdown bits: NVIDIA documents HW slowdown as possibly set during P-state or
  clock changes, and the sampling spans the idle-to-load step, so a harmful reason fails only
  when it shows in ``CONSECUTIVE`` samples in a row;
- PCIe replays: a link retries now and then; DCGM fails more than 8 a minute (the rate RM
  recommends as the most), and so do we, counting a run shorter than a minute as one minute.

A counter the GPU does not report (``None``) never fails anything.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuci.gpu._gpu_info import Health, XidEvent
from gpuci.gpu._nvml import GpuLost, NvmlSession
from gpuci.gpu._nvml_abi import (
    CLOCK_EVENT_REASONS,
    HARMFUL_CLOCK_EVENTS,
    HARMFUL_THROTTLE,
    clock_event_names,
)

# XIDs NVIDIA's XID catalogue attributes to the application (its own bad access, a fault in its
# kernel, its teardown), not the hardware: 13 graphics engine exception, 31 GPU memory page
# fault (MMU), 43 GPU stopped processing (user-app fault), 45 preemptive cleanup after a
# previous error. Another process on the GPU raises them too; they are reported, not failed.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})

CONSECUTIVE = 2  # samples in a row a harmful clock-event reason must show in to fail
REPLAYS_PER_MINUTE = 8  # DCGM_LIMIT_MAX_PCIREPLAY_RATE: "the maximum recommended by RM"
# Cumulative throttle time: a harmful reason fails when it held the clocks down for more than
# this share of the run (the ``max-throttle-percent`` input, default 10), and at least
# THROTTLE_MIN_S (a slowdown at the idle-to-load step is brief; a GPU that overheats or brakes
# under load keeps doing it). Source: a choice made for issue 23 (r2gpu), not a measurement;
# no GPU has run it yet. NVIDIA documents the counters (nvmlDeviceGetViolationStatus, the
# NVML_FI_DEV_CLOCKS_EVENT_REASON_* fields) but no threshold; DCGM's diag fails thermal or
# power-brake slowdown by its own policy, not by a share of time.
THROTTLE_SHARE = 0.1
THROTTLE_MIN_S = 1.0
NVLINK_FAILING = {
    "recovery": "recoveries",
    "crc_flit": "CRC FLIT errors",
    "crc_data": "CRC data errors",
}
HARMFUL_MASK = sum(bit for bit, name in CLOCK_EVENT_REASONS.items() if name in HARMFUL_CLOCK_EVENTS)

_COUNTER_TEXT = {
    "ecc_volatile_uncorrected": "volatile uncorrected ECC errors",
    "remapped_rows_uncorrectable": "rows remapped for uncorrectable errors",
    "pcie_replay_counter": "PCIe replays",
    "retired_pages_pending": "retired pages pending",
    "remapped_rows_pending": "row remap pending",
    "remapped_rows_failure": "row remap failure",
}


class XidListener:
    """Listens for XID critical errors on a background thread for the length of the run."""

    def __init__(self, session: NvmlSession, indices: Iterable[int], poll_s: float = 0.2) -> None:
        self.events: list[XidEvent] = []
        self._session = session
        self._watch = session.watch_xid(list(indices))
        self.setup_error = self._watch.error  # the event set failed: nothing is watched
        self.error: str | None = None
        self.watched = list(self._watch.watched)
        self.unsupported = list(self._watch.unsupported)
        self._poll = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuci-xid", daemon=True)

    def start(self) -> XidListener:
        if self.watched:
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._watch.wait(self._poll)
            except Exception as exc:  # NvmlUnavailable from a broken wait: report, stop
                self.error = str(getattr(exc, "message", exc))
                return
            if event is not None:
                self.events.append(event)

    def stop(self) -> list[XidEvent]:
        """Stop listening, after draining anything already queued; a wait stuck in NVML is
        left to the process's end (draining or freeing the set behind it would wait too)."""
        self._stop.set()
        if self._thread.is_alive():
            wait = self._poll * 5 + 1
            self._thread.join(timeout=wait)
            if self._thread.is_alive():
                self.error = self.error or (
                    f"NVML's XID event wait did not return within {wait:g}s (a stuck driver): "
                    "XIDs after that were not heard"
                )
                self._session.abandon()  # shutting NVML down would wait behind it as well
                return self.events
        if self.watched and self.error is None:
            while (event := self._watch.wait(0)) is not None:
                self.events.append(event)
        self._watch.close()
        return self.events


class Streaks:
    """Clock-event reasons that hold for ``CONSECUTIVE`` samples in a row, per GPU."""

    def __init__(self, needed: int = CONSECUTIVE) -> None:
        self.needed = needed
        self.seen: dict[int, int] = {}  # index -> OR of every mask read (reported)
        self.sustained: dict[int, int] = {}  # index -> reasons that held long enough (judged)
        self._run: dict[tuple[int, int], int] = {}

    def add(self, index: int, mask: int) -> None:
        self.seen[index] = self.seen.get(index, 0) | mask
        for bit in CLOCK_EVENT_REASONS:
            key = (index, bit)
            self._run[key] = self._run.get(key, 0) + 1 if mask & bit else 0
            if self._run[key] >= self.needed:
                self.sustained[index] = self.sustained.get(index, 0) | bit


@dataclass
class LoadSampler:
    """Polls health while the load runs: clock-event reasons a single idle read would miss."""

    read: Callable[[int], Health]
    indices: list[int]
    interval_s: float = 0.25
    streaks: Streaks = field(default_factory=Streaks)
    samples: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuci-sampler", daemon=True)

    @property
    def seen(self) -> dict[int, int]:
        return self.streaks.seen

    def start(self) -> LoadSampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        for index in self.indices:
            try:
                mask = self.read(index).clock_event_reasons
            except Exception:
                continue  # a lost GPU is caught by the after-read, with a proper message
            if mask is not None:
                self.streaks.add(index, mask)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> bool:
        """Stop sampling; False when a read is stuck in NVML (left to the process's end, and
        no last read made behind it)."""
        self._stop.set()
        self._thread.join(timeout=self.interval_s * 4 + 1)
        if self._thread.is_alive():
            return False
        self.sample()  # one last read, so a short load still has a sample
        return True


def throttle_share(percent: float | None) -> float:
    """The ``max-throttle-percent`` input as a share of the run (default 10 %)."""
    return THROTTLE_SHARE if percent is None else float(percent) / 100


def read_after(session: NvmlSession, index: int) -> Health:
    """NVML's read after the load. A GPU lost under the load answers nothing: every read it
    answered before is then unreadable, which :func:`judge` fails on that GPU (exit 1, the
    GPU named in ``failed-checks``) rather than stopping the run as an infrastructure error."""
    try:
        return session.health(index)
    except GpuLost as exc:
        return Health(errors=(exc.message,))


def confirm_clocks(
    read: Callable[[], Health], first: int | None, interval_s: float, needed: int = CONSECUTIVE
) -> int:
    """Harmful reasons in ``first`` that still show in the next reads: ``needed`` in a row.

    For a harmful bit seen once (the after-read, or a run without load to sample): read again
    rather than fail a GPU on a P-state change caught mid-flight.
    """
    if not first or not first & HARMFUL_MASK:
        return 0
    streaks = Streaks(needed)
    streaks.add(0, first)
    for _ in range(needed - 1):
        threading.Event().wait(interval_s)
        try:
            mask = read().clock_event_reasons
        except Exception:
            return 0  # a lost GPU is reported by the after-read
        streaks.add(0, mask or 0)
    return streaks.sustained.get(0, 0)


def judge(
    before: Health,
    after: Health,
    xids: list[int],
    clocks_sustained: int | None = None,
    *,
    clocks_seen: int | None = None,
    seconds: float = 0.0,
    throttle_share: float = THROTTLE_SHARE,
) -> tuple[list[str], dict[str, Any]]:
    """Reasons to fail one GPU (empty when healthy) and the figures behind the verdict.

    ``clocks_sustained``: reasons that held in consecutive samples (judged); ``clocks_seen``:
    every reason read under load (reported); ``seconds``: how long the run was, for rates;
    ``throttle_share``: the share of it a harmful throttle reason may hold the clocks down.
    """
    reasons, allowed = _counter_reasons(before, after, seconds)
    hardware = [x for x in xids if x not in APPLICATION_XIDS]
    application = [x for x in xids if x in APPLICATION_XIDS]
    for xid, times in sorted(Counter(hardware).items()):
        again = f" {times} times" if times > 1 else ""
        reasons.append(f"XID {xid} raised{again} during the run")
    clocks = _clocks(before, after, clocks_sustained, clocks_seen, seconds, throttle_share)
    reasons += clocks.reasons
    link_reasons, link_figures = _nvlink_errors(before, after)
    reasons += link_reasons
    figures: dict[str, Any] = {
        "ecc_uncorrected": [before.ecc_volatile_uncorrected, after.ecc_volatile_uncorrected],
        "pcie_replays": [before.pcie_replay_counter, after.pcie_replay_counter],
        "pcie_replays_allowed": round(allowed, 1),
        "remap_pending": after.remapped_rows_pending,
        "retired_pages_pending": after.retired_pages_pending,
        "clock_events": clocks.events,
        "clock_events_sustained": clocks.held,
        "temperature_c": [before.temperature_c, after.temperature_c],
        "xids": hardware,
        "throttle_s": {n: round(t, 3) for n, t in sorted(clocks.throttled.items())},
        "throttle_judged_on": "counters" if clocks.counted else "samples",
        "throttle_allowed_s": round(clocks.allowed_s, 1),
        **link_figures,
    }
    if application:  # an application's own fault, maybe another process's: reported
        figures["application_xids"] = application
    unsupported = [name for name in _MAY_BE_UNSUPPORTED if getattr(after, name) is None]
    if unsupported:
        figures["not_supported"] = unsupported
    return reasons, figures


# The health fields a GPU or driver may not report; listed as ``not_supported`` when absent.
_MAY_BE_UNSUPPORTED = (
    "ecc_volatile_uncorrected",
    "remapped_rows_pending",
    "retired_pages_pending",
    "pcie_replay_counter",
    "clock_event_reasons",
    "throttle_ns",
    "nvlink_errors",
)


def _counter_reasons(before: Health, after: Health, seconds: float) -> tuple[list[str], float]:
    """Memory and PCIe counters that grew, memory problems after, reads lost during the run;
    with the PCIe replays allowed for a run this long."""
    reasons: list[str] = []
    grown = before.increased(after)
    replays = grown.pop("pcie_replay_counter", None)
    for name, (was, now) in grown.items():
        if isinstance(getattr(after, name), bool):
            reasons.append(f"{_COUNTER_TEXT[name]} appeared during the run")
        else:
            reasons.append(f"{_COUNTER_TEXT[name]} rose from {was} to {now} during the run")
    allowed = REPLAYS_PER_MINUTE * max(1.0, seconds / 60)
    if replays is not None and replays[1] - replays[0] > allowed:
        was, now = replays
        reasons.append(
            f"PCIe replays rose from {was} to {now} in {seconds:.0f}s: more than "
            f"{REPLAYS_PER_MINUTE} a minute (a bad link, riser or slot)"
        )
    for problem in after.memory_problems():
        if not any(problem.split(" (")[0] in r for r in reasons):
            reasons.append(problem)
    lost = after.unreadable_since(before)
    if lost:
        errors = f" (NVML: {'; '.join(dict.fromkeys(after.errors))})" if after.errors else ""
        reasons.append(
            f"{', '.join(lost)} readable before the load, unreadable after it{errors}: the GPU "
            "may need a reset"
        )
    return reasons, allowed


@dataclass
class _ClockVerdict:
    """The clocks during the run: reasons to fail, and what the figures report."""

    reasons: list[str]
    events: list[str]  # every clock event reason seen, before, under load or after
    held: list[str]  # harmful reasons held in consecutive samples
    throttled: dict[str, float]  # seconds each cumulative throttle counter grew by
    counted: bool  # judged on the cumulative counters (else on the samples)
    allowed_s: float


def _clocks(
    before: Health,
    after: Health,
    clocks_sustained: int | None,
    clocks_seen: int | None,
    seconds: float,
    throttle_share: float,
) -> _ClockVerdict:
    """Clocks held down: judged on NVML's cumulative throttle counters where there are some,
    else on the reasons sampled under load."""
    reasons: list[str] = []
    masks = [before.clock_event_reasons, clocks_seen, after.clock_event_reasons]
    events = sorted({e for m in masks if m is not None for e in clock_event_names(m)})
    held = [e for e in clock_event_names(clocks_sustained) if e in HARMFUL_CLOCK_EVENTS]
    throttled = _throttle_rise(before, after)
    counted = any(name in HARMFUL_THROTTLE for name in throttled)
    allowed_s = max(THROTTLE_MIN_S, throttle_share * seconds)
    harmful = {n: t for n, t in throttled.items() if n in HARMFUL_THROTTLE and t > allowed_s}
    if harmful:
        reasons.append(
            "clocks held down by "
            + ", ".join(f"{n} for {t:.1f}s" for n, t in sorted(harmful.items()))
            + f" of a {seconds:.0f}s run (NVML's cumulative counters; {allowed_s:.1f}s allowed): "
            "check cooling, airflow and the power supply"
        )
    # A reason with a cumulative counter here is judged on it; one without (hw_slowdown has
    # none, drivers before R535 have no slowdown fields) falls back to the sampled streak.
    uncounted = [e for e in held if e not in throttled]
    if uncounted and not harmful:
        reasons.append(
            "clocks held down by " + ", ".join(uncounted) + f" ({CONSECUTIVE}+ samples in a row)"
        )
    return _ClockVerdict(reasons, events, held, throttled, counted, allowed_s)


def _throttle_rise(before: Health, after: Health) -> dict[str, float]:
    """Seconds each cumulative throttle counter grew by during the run (readable both times)."""
    was = dict(before.throttle_ns or ())
    return {
        name: max(0, now - was[name]) / 1e9 for name, now in after.throttle_ns or () if name in was
    }


def _nvlink_errors(before: Health, after: Health) -> tuple[list[str], dict[str, Any]]:
    """NVLink recoveries and CRC errors that grew during the run fail; replays are reported.

    A replay is the link layer retrying a flit, which it does now and then on a healthy link; a
    recovery (the link retrained) or a CRC error during a few seconds of load is a bad link.
    """
    if after.nvlink_errors is None:
        return [], {}
    was = {(link, name): value for link, name, value in before.nvlink_errors or ()}
    reasons, replays = [], {}
    for link, name, now in after.nvlink_errors:
        old = was.get((link, name))
        if old is None or now <= old:
            continue
        if name in NVLINK_FAILING:
            reasons.append(
                f"NVLink {link} {NVLINK_FAILING[name]} rose from {old} to {now} during the run "
                "(a bad link: reseat the board, check the NVSwitch tray)"
            )
        else:
            replays[str(link)] = now - old
    return reasons, {"nvlink_replays": replays} if replays else {}


def judge_nvlink(
    before: tuple[int, ...] | None,
    after: tuple[int, ...] | None,
    peers_most: int | None,
    bridged_board: bool = False,
) -> tuple[list[str], dict[str, Any]]:
    """NVLinks up before and after the load, against the GPU's peers of the same model.

    How many links a board should have is not in NVML, but on one node every GPU of a model
    has the same count, so a GPU with fewer active links than its peers has links down; and a
    link up before the load and down after it went down under the load. A PCIe board
    (``bridged_board``: NVLink only through an optional bridge) with no link up is not judged
    against peers, since a node may bridge some cards and not others.
    """
    if before is None and after is None:
        return [], {}
    if after is None:  # no state readable after the load: judge's unreadable rule fails it
        return [], {"nvlinks_active": [len(before or ()), None]}
    reasons = []
    went_down = sorted(set(before or ()) - set(after or ()))
    if went_down:
        reasons.append(f"NVLink(s) {','.join(map(str, went_down))} went down during the run")
    active = len(after or ())
    if active == 0 and bridged_board:
        peers_most = None  # a PCIe board may simply have no bridge fitted: not a fault
    if peers_most is not None and active < peers_most and not went_down:
        reasons.append(
            f"{active} NVLink(s) active where this model's other GPUs here have {peers_most} "
            "(links down: reseat or replace the board, check the NVSwitch tray)"
        )
    return reasons, {"nvlinks_active": [len(before or ()), active]}


@dataclass
class LinkReport:
    """PCIe generation and width seen while host-device copies ran."""

    gen_max: int | None
    width_max: int | None
    gen_seen: int | None = None
    width_seen: int | None = None

    def problems(self) -> list[str]:
        found = []
        if self.gen_seen and self.gen_max and self.gen_seen < self.gen_max:
            found.append(f"PCIe link at Gen{self.gen_seen} under load, Gen{self.gen_max} possible")
        if self.width_seen and self.width_max and self.width_seen < self.width_max:
            found.append(f"PCIe link at x{self.width_seen} under load, x{self.width_max} possible")
        return found

    def figures(self) -> dict[str, Any]:
        return {
            "link_under_load": _link(self.gen_seen, self.width_seen),
            "link_max": _link(self.gen_max, self.width_max),
        }


def _link(gen: int | None, width: int | None) -> str | None:
    if gen is None and width is None:
        return None
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


class LinkSampler:
    """Reads the PCIe link while copies run: idle links downtrain legitimately, busy ones don't."""

    def __init__(
        self, read: Callable[[], tuple[int | None, int | None]], interval_s: float = 0.02
    ) -> None:
        self._read = read
        self._interval = interval_s
        self.gen: int | None = None
        self.width: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuci-link", daemon=True)

    def _sample(self) -> None:
        try:
            gen, width = self._read()
        except Exception:
            return
        self.samples += 1
        if gen is not None:
            self.gen = max(self.gen or 0, gen)
        if width is not None:
            self.width = max(self.width or 0, width)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._interval)

    def __enter__(self) -> LinkSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
