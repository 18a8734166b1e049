"""The ``health`` checks' watch and judge: XIDs heard and clocks sampled during the load,
then each watched GPU's NVML read after it, compared with the snapshot before."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from gpuci.gpu._gpu_info import Snapshot, XidEvent
from gpuci.gpu._nvml import NvmlSession
from gpuci.gpu._smoke.checks import Budget, CheckError, Context, Planned
from gpuci.gpu._smoke.health import (
    LoadSampler,
    XidListener,
    confirm_clocks,
    judge,
    judge_nvlink,
    read_after,
    throttle_share,
)
from gpuci.gpu._smoke.load import Sizes, Target
from gpuci.gpu._smoke.plan import params
from gpuci.gpu.options import SmokeInputs


def watch(
    session: NvmlSession,
    checks: list[str],
    watched: list[int],
    targets: list[Target],
    sizes: Sizes,
    notes: list[str],
) -> tuple[XidListener | None, LoadSampler | None]:
    """Start listening for XIDs (and sampling clocks under load) for the run's length."""
    if "health" not in checks:
        return None, None
    xids = XidListener(session, watched).start()
    if xids.setup_error:
        notes.append(f"XID events not watched on any GPU: {xids.setup_error}")
    elif xids.unsupported:
        notes.append(
            "XID events not reported for GPU(s) "
            + ",".join(map(str, xids.unsupported))
            + " (e.g. vGPU): not watched"
        )
    sampler = None
    if targets:
        sampler = LoadSampler(
            lambda i: session.health(i, counters=False), watched, sizes.sample_interval_s
        ).start()
    return xids, sampler


def health_checks(
    session: NvmlSession,
    snapshot: Snapshot,
    watched: list[int],
    xids: XidListener,
    sampler: LoadSampler | None,
    inp: SmokeInputs,
    sizes: Sizes,
    budget: Budget,
) -> list[Planned]:
    """One ``health`` check per watched GPU: NVML after the load, judged against before."""
    share = throttle_share(inp.max_throttle_percent)
    judge_gpu = _HealthJudge(
        session, snapshot, watched, xids, xids.stop(), sampler, sizes, budget, share
    )
    return [
        Planned(
            "health",
            index,
            params("health", inp, sizes),
            lambda: 0.1,
            partial(judge_gpu.check, index),
            always=True,
        )
        for index in watched
    ]


class _HealthJudge:
    """What the health checks compare against: the snapshot before the load, the XIDs heard
    during it, the clock samples, and the NVLinks each model should have up."""

    def __init__(
        self,
        session: NvmlSession,
        snapshot: Snapshot,
        watched: list[int],
        xids: XidListener,
        events: list[XidEvent],
        sampler: LoadSampler | None,
        sizes: Sizes,
        budget: Budget,
        throttle_share: float,
    ) -> None:
        self.session, self.xids, self.events = session, xids, events
        self.sampler, self.sizes, self.budget = sampler, sizes, budget
        self.throttle_share = throttle_share  # of the run a slowdown may hold the clocks down
        self.before = {g.index: g.health for g in snapshot.gpus}
        self.links_before = {g.index: g.nvlink_active for g in snapshot.gpus}
        self.names = {g.index: g.name for g in snapshot.gpus}
        self.peers: dict[str, int] = {}  # model -> most NVLinks active on one judged GPU of it
        for g in snapshot.gpus:
            if g.index in watched and g.nvlink_active is not None:
                self.peers[g.name] = max(self.peers.get(g.name, 0), len(g.nvlink_active))
        self.slices = {  # the MIG GPU instances under test, per GPU in MIG mode
            g.index: {m.gpu_instance_id for m in g.mig_devices if m.gpu_instance_id is not None}
            for g in snapshot.gpus
            if g.mig_enabled
        }

    def check(self, index: int, ctx: Context) -> dict[str, Any]:
        """GPU ``index`` after the load: counters, XIDs, clocks, NVLinks; raise on a finding."""
        after = read_after(self.session, index)
        mine, others = self._xids(index)
        reasons, figures = judge(
            self.before[index],
            after,
            mine,
            self._sustained(index, after.clock_event_reasons),
            clocks_seen=self.sampler.seen.get(index) if self.sampler else None,
            seconds=self.budget.elapsed(),
            throttle_share=self.throttle_share,
        )
        if others:
            figures["other_instance_xids"] = others
        if self.xids.setup_error:
            figures["xids"] = "not watched"
        elif index in self.xids.unsupported:
            figures["xids"] = "not supported"
        name = self.names[index]
        link_reasons, link_figures = judge_nvlink(
            self.links_before.get(index),
            after.nvlink_active,
            self.peers.get(name),
            bridged_board=bool(re.search(r"PCIe|NVL\b", name)),
        )
        reasons += link_reasons
        figures.update(link_figures)
        if reasons:
            raise CheckError("; ".join(reasons), figures)
        return figures

    def _sustained(self, index: int, reasons: int | None) -> int:
        """How long a harmful clock reason was seen under load (read again if only now)."""
        sustained = self.sampler.streaks.sustained.get(index, 0) if self.sampler else 0
        if not sustained:  # a harmful reason in the last read alone: read again first
            sustained = confirm_clocks(
                lambda: self.session.health(index, counters=False),
                reasons,
                self.sizes.sample_interval_s,
            )
        return sustained

    def _xids(self, index: int) -> tuple[list[int], list[int]]:
        """This GPU's XIDs: those of the slices under test, and those of other MIG tenants."""
        ours = [e for e in self.events if e.gpu_index in (index, None)]
        slices = self.slices.get(index)
        # On a MIG GPU, an event from another GPU instance is another tenant's slice.
        mine = [e.xid for e in ours if _our_slice(e, slices)]
        others = [e.xid for e in ours if not _our_slice(e, slices)]
        return mine, others


def _our_slice(event: XidEvent, slices: set[int] | None) -> bool:
    """Whether an XID concerns the slices under test (a whole-GPU event concerns them all)."""
    return not slices or event.gpu_instance_id is None or event.gpu_instance_id in slices
