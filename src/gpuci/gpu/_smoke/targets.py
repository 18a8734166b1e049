"""Which NVML GPU each framework device is: by UUID, else PCI bus id, else (loudly) index.

CUDA numbers devices its own way (``CUDA_VISIBLE_DEVICES`` reorders and hides them, MIG
devices replace their GPU), so the framework's device 0 need not be NVML's GPU 0. A device
matched to the wrong GPU would be held to the wrong minimums, have the wrong link read and the
wrong GPU's health judged, so the match goes by identity:

- UUIDs compared without their ``GPU-``/``MIG-`` prefix and case: torch and cupy hand out bare
  UUIDs, NVML writes ``GPU-...`` for a GPU and ``MIG-...`` for a MIG device;
- else the PCI bus id (cupy's UUID can be cut short, older torch has none), NVML's
  ``00000000:18:00.0`` against CUDA's ``0000:18:00.0``;
- else, when the counts agree, the index, with a warning that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from gpuci.gpu._gpu_info import GpuInfo, MigDevice
from gpuci.gpu._nvml import NvmlSession, pci_address
from gpuci.gpu._smoke.backends import Backend
from gpuci.gpu._smoke.load import SHARED_MEMORY_FRACTION, Rates, Target
from gpuci.gpu._smoke.models import Minimums, gpu_link, minimums
from gpuci.gpu.options import SmokeInputs


def bare_uuid(uuid: str | None) -> str | None:
    """``GPU-AbC...`` / ``MIG-abc...`` / ``abc...`` -> ``abc...``: one spelling to compare."""
    if not uuid:
        return None
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text or None


@dataclass(frozen=True)
class _Nvml:
    gpu: GpuInfo
    mig: MigDevice | None = None

    @property
    def name(self) -> str:
        if self.mig is not None:
            # A MIG device whose name NVML does not give is still a slice: the parent's name
            # alone would hold it to the whole GPU's minimums.
            return self.mig.name or f"{self.gpu.name} MIG"
        return self.gpu.name


def match_targets(
    backend: Backend,
    session: NvmlSession,
    gpus: list[GpuInfo],
    inp: SmokeInputs | None = None,
) -> tuple[list[Target], list[str]]:
    """One :class:`Target` per framework device, and warnings about how they were matched.

    ``inp`` gives the user's minimums (``min-bandwidth-gbs``, ``min-gemm-tflops``), if any.
    """
    inp = inp or SmokeInputs()
    by_uuid: dict[str, _Nvml] = {}
    by_pci: dict[tuple[int, int, int], _Nvml] = {}
    for g in gpus:
        if (key := bare_uuid(g.uuid)) is not None:
            by_uuid[key] = _Nvml(g)
        if (address := pci_address(g.pci_bus_id)) is not None and not g.mig_enabled:
            by_pci[address] = _Nvml(g)  # a MIG GPU's bus id names the GPU, not a slice
        for m in g.mig_devices:
            if (key := bare_uuid(m.uuid)) is not None:
                by_uuid[key] = _Nvml(g, m)
    count = backend.device_count()
    found: list[_Nvml | None] = []
    for i in range(count):
        uuid = bare_uuid(backend.device_uuid(i)) if backend.is_gpu else None
        match = by_uuid.get(uuid) if uuid else None
        if match is None and backend.is_gpu:
            match = by_pci.get(pci_address(backend.device_pci_bus_id(i)) or (-1, -1, -1))
        found.append(match)
    notes: list[str] = []
    unmatched = [i for i, m in enumerate(found) if m is None]
    if unmatched and backend.is_gpu and count == len(gpus) and len(unmatched) == count:
        # Nothing to go by: same count, so CUDA's order is NVML's (PCI bus order) unless
        # CUDA_DEVICE_ORDER or CUDA_VISIBLE_DEVICES changed it. Say so rather than guess quietly.
        found = [_Nvml(g) for g in gpus]
        notes.append(
            f"{backend.name} gave neither UUIDs nor PCI bus ids: devices matched to NVML GPUs "
            "by index (wrong if CUDA_VISIBLE_DEVICES reorders them)"
        )
    elif unmatched and backend.is_gpu:
        notes.append(
            f"{backend.name} device(s) {','.join(map(str, unmatched))} could not be matched to "
            "an NVML GPU: their figures are reported, not judged, and their health not read"
        )
    if not backend.is_gpu:  # the CPU stand-in plays NVML GPU i (tests)
        found = [_Nvml(gpus[i]) if i < len(gpus) else None for i in range(count)]
    return [_target(backend, session, i, m, inp) for i, m in enumerate(found)], notes


def _target(
    backend: Backend, session: NvmlSession, i: int, match: _Nvml | None, inp: SmokeInputs
) -> Target:
    gpu = match.gpu if match else None
    name = match.name if match else f"device {i}"
    link_max = (gpu.pcie_gen_max, gpu.pcie_width_max) if gpu else (None, None)
    reader = partial(session.pcie_link, gpu.index) if gpu is not None else None

    override = inp.min_bandwidth_gbs
    gemm = inp.min_gemm_tflops
    if backend.is_gpu and match is not None:
        mins = minimums(name, link_max, override, gemm)
    elif backend.is_gpu:
        why = "not matched to an NVML GPU: figures reported, not judged"
        mins = Minimums(
            None, override, gemm, None, None, ("min-bandwidth-gbs; " if override else "") + why
        )
    else:  # a CPU stand-in is not the GPU NVML names: judge only what the user set
        why = "min-bandwidth-gbs" if override else f"{backend.name} on the CPU: not judged"
        mins = Minimums(None, override, gemm, None, None, why)
    others = 0  # processes NVML saw before our load: all someone else's
    if gpu is not None and match is not None and match.mig is None:
        others = len(gpu.processes or ())
    if others and backend.is_gpu:
        # Another process's kernels and copies share the SMs, memory and link: a slow figure
        # would blame the GPU for its neighbour. Report speed, judge correctness only.
        mins = Minimums(
            mins.model,
            None,
            None,
            None,
            None,
            f"{others} other process(es) on this GPU: speed reported, not judged "
            f"(memory test capped at {SHARED_MEMORY_FRACTION:.0%} of free memory)",
        )
    return Target(
        others=others,
        backend_index=i,
        nvml_index=gpu.index if gpu else None,
        name=name,
        minimums=mins,
        rates=Rates.for_name(name, backend.is_gpu),
        read_link=reader,
        link_max=link_max,
        cpus=session.cpu_affinity(gpu.index) if gpu else None,
        numa_node=gpu.numa_node if gpu else None,
        link=gpu_link(name, gpu.architecture, gpu.nvlink_active, link_max) if gpu else None,
        min_busbw_gbs=inp.min_busbw_gbs,
    )
