#!/usr/bin/env bash
# gpu-check.sh: the one script to run on a machine with a real GPU.
#
# Runs gpu-ci's GPU commands against the real NVML (never the fake) and prints what they saw,
# so a person can compare it with nvidia-smi. Exits non-zero when a section fails.
# Later issues add sections (gpu-smoke, ...): keep one function per section, called at the end.
#
# Usage: scripts/gpu-check.sh [extra gpu-setup flags, e.g. --min-memory-gb 80]
# Env:   PYTHON (interpreter to use; default the system python3, which must have nvidia-ml-py,
#        and torch and/or cupy with CUDA: no venv, no pip, no network), GPUCI_CHECK_OUT (where
#        reports go; default $OUT or .gpuci/gpu-check), GPUCI_CHECK_ALLOW_FAKE=1 (tests only:
#        keep GPUCI_FAKE_NVML), GPUCI_CHECK_EXTRAS=0 (skip the real-GPU extras: counters,
#        sampling, repeats, NCCL child, negative control; =1 runs them even on fake NVML, to
#        test the script on a CPU).
# The extras record what issue 23 asks for, each bounded by `timeout`, all in $CHECK_OUT;
# the whole script should stay under 10 minutes on an 8-GPU node.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHECK_OUT="${GPUCI_CHECK_OUT:-${OUT:-$ROOT/.gpuci/gpu-check}}"
mkdir -p "$CHECK_OUT"
export GPUCI_JOURNAL="$CHECK_OUT/gpuci-journal.jsonl"
if [ "${GPUCI_CHECK_ALLOW_FAKE:-}" != "1" ]; then
  unset GPUCI_FAKE_NVML  # this script is about the real driver
fi
STATUS=0

section() { printf '\n===== %s =====\n' "$1"; }

# ---- python: the machine's own interpreter, the package from src/ (never a venv: a venv's
# torch may be a CPU build, and the GPU machine has no network to build one anyway)
setup_python() {
  section "python"
  PY="${PYTHON:-python3}"
  export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
  if ! "$PY" -c 'import pynvml' 2>/dev/null; then
    echo "error: $PY has no nvidia-ml-py (import pynvml failed) (fix: install nvidia-ml-py for it, or set PYTHON to an interpreter that has it)"
    section "verdict"
    echo "gpu-check exit code: 3 (reports in $CHECK_OUT)"
    exit 3
  fi
  "$PY" -c 'import sys, pynvml, gpuci; print(sys.executable, sys.version.split()[0], "gpuci", gpuci.__version__, "from", gpuci.__file__)'
  # the CUDA torch was built for (None: a CPU-only wheel, which cannot drive the GPU)
  "$PY" -c 'import torch; print("torch", torch.__version__, "torch.version.cuda", torch.version.cuda, "cuda.is_available", torch.cuda.is_available())' 2>/dev/null \
    || echo "torch not installed for $PY"
  "$PY" -c 'import cupy; print("cupy", cupy.__version__)' 2>/dev/null || echo "cupy not installed for $PY"
  "$PY" -c 'from importlib.metadata import version; print("nvidia-ml-py", version("nvidia-ml-py"))' 2>/dev/null \
    || echo "nvidia-ml-py version unknown"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>} CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER-<unset>} NVIDIA_DRIVER_CAPABILITIES=${NVIDIA_DRIVER_CAPABILITIES-<unset>}"
}

# ---- nvidia-smi: the reference to compare gpu-setup's report with
show_nvidia_smi() {
  section "nvidia-smi"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L || true
    nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version,compute_cap,mig.mode.current \
      --format=csv || true
    section "nvidia-smi topo -m (GPU/NIC links, CPU and NUMA affinity)"
    nvidia-smi topo -m || true
    section "nvidia-smi -q -d PERFORMANCE (clock-event reasons now)"
    nvidia-smi -q -d PERFORMANCE || true
  else
    echo "nvidia-smi not found"
  fi
}

# ---- real-GPU extras (issue 23): modes, limits, identities, timings, spread, negative control
SMI_QUERY="index,name,uuid,pci.bus_id,persistence_mode,vbios_version,ecc.mode.current,ecc.mode.pending,power.limit,enforced.power.limit,power.default_limit,power.max_limit,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem"
SAMPLE_QUERY="timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active,pcie.link.gen.current,pcie.link.width.current"

have_smi() { command -v nvidia-smi >/dev/null 2>&1; }

record_modes() {
  section "modes and limits (nvidia-smi)"
  have_smi || { echo "nvidia-smi not found"; return 0; }
  timeout 30 nvidia-smi --query-gpu="$SMI_QUERY" --format=csv | tee "$CHECK_OUT/modes.csv" || true
  record_smi_q before
}

record_smi_q() {  # record_smi_q before|after: ECC, remaps, power, clocks, violation counters, NVLink
  have_smi || return 0
  timeout 60 nvidia-smi -q -d ECC,ROW_REMAPPER,POWER,CLOCK,PERFORMANCE >"$CHECK_OUT/smi-q-$1.txt" 2>&1 || true
  timeout 30 nvidia-smi nvlink -s >"$CHECK_OUT/smi-nvlink-status-$1.txt" 2>&1 || true
  timeout 30 nvidia-smi nvlink -e >"$CHECK_OUT/smi-nvlink-errors-$1.txt" 2>&1 || true
}

# NVML's view of what gpu-smoke reads before and after its load: power limits (enforced and
# default), applications clocks, persistence and ECC modes, the cumulative violation counters,
# NVLink states and error counters; one JSON file per call, a line per GPU on stdout.
record_counters() {  # record_counters before|after
  section "NVML counters ($1): power limits, app clocks, violation counters, NVLink"
  timeout 120 "$PY" - "$CHECK_OUT/counters-$1.json" <<'PYEOF' 2>&1 | tee "$CHECK_OUT/counters-$1.txt" || true
import json, os, sys
from gpuci.gpu._nvml import open_nvml
with open_nvml(os.environ) as session:
    snap = session.snapshot()
    rows = []
    for g in snap.gpus:
        h = session.health(g.index)
        row = {
            "index": g.index, "name": g.name, "serial": getattr(g, "serial", None),
            "persistence_mode": g.persistence_mode, "ecc": [h.ecc_enabled, h.ecc_pending],
            "power_limit_w": h.power_limit_w, "power_default_w": g.power_default_w,
            "clocks_mhz": [list(c) for c in g.clocks_mhz],
            "app_clocks_mhz": h.app_clocks_mhz, "throttle_s": {k: v / 1e9 for k, v in h.throttle_ns or ()},
            "nvlinks_up": None if h.nvlink_active is None else len(h.nvlink_active),
            "nvlink_errors": {f"{link}:{name}": v for link, name, v in h.nvlink_errors or () if v},
            "errors": list(h.errors),
        }
        rows.append(row)
        print(json.dumps(row))
json.dump(rows, open(sys.argv[1], "w"), indent=1)
PYEOF
}

# The NCCL child on its own, timed by phase (start, import, contexts, collective) and with its
# bus bandwidth, on GPU 0 alone and on every GPU, through each framework present.
record_nccl_child() {
  section "NCCL child by phase, algbw/busbw (torch, cupy)"
  timeout 240 "$PY" - <<'PYEOF' 2>&1 | tee "$CHECK_OUT/nccl-child.txt" || true
import importlib.util, json, os
from gpuci.gpu._nvml import open_nvml
from gpuci.gpu._smoke import allreduce
with open_nvml(os.environ) as session:
    count = session.device_count
reducers = {
    "torch": "gpuci.gpu._smoke.backends.torch_backend:all_reduce_ones",
    "cupy": "gpuci.gpu._smoke.backends.cupy_backend:all_reduce_ones",
}
for name, reducer in reducers.items():
    if importlib.util.find_spec(name) is None:
        print(f"{name}: not installed")
        continue
    for indices in ([0], list(range(count))) if count > 1 else ([0],):
        answer = allreduce.run_child(reducer, indices, 32 * 1024 * 1024, 60)
        runs = answer.timing.bandwidths(len(indices)) if answer.timing else []
        print(json.dumps({
            "framework": name, "gpus": indices, "phases_s": answer.phases, "hung": answer.hung,
            "error": answer.error, "unavailable": answer.unavailable,
            "algbw_gbs": [round(a, 1) for a, _ in runs], "busbw_gbs": [round(b, 1) for _, b in runs],
        }))
PYEOF
}

record_identities() {
  section "NVML open/snapshot time, torch vs NVML identity, XID registration"
  timeout 120 "$PY" - <<'PYEOF' 2>&1 | tee "$CHECK_OUT/identities.txt" || true
import os, time
from gpuci.gpu._nvml import open_nvml
from gpuci.gpu._visible import job_view
t0 = time.perf_counter()
session = open_nvml(os.environ)
t1 = time.perf_counter()
snap = session.snapshot()
t2 = time.perf_counter()
print(f"nvml open {t1 - t0:.3f}s snapshot {t2 - t1:.3f}s, {len(snap.gpus)} GPU(s), skipped {len(snap.skipped)}")
view, vis = job_view(snap, os.environ)
print("visibility", vis.to_dict())
for g in snap.gpus:
    print(f"nvml {g.index}: name={g.name!r} uuid={g.uuid} bus={g.pci_bus_id} power_limit_w={g.power_limit_w}")
with session.watch_xid() as watch:
    print(f"xid events: watched {watch.watched}, unsupported {watch.unsupported}, error {watch.error}")
session.close()
try:
    import torch
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        bus = f"{getattr(p, 'pci_domain_id', 0):04x}:{getattr(p, 'pci_bus_id', 0):02x}:{getattr(p, 'pci_device_id', 0):02x}.0"
        print(f"torch {i}: name={p.name!r} uuid={getattr(p, 'uuid', None)} bus={bus}")
except Exception as exc:
    print("torch identity:", type(exc).__name__, exc)
PYEOF
}

record_gemm_random() {
  section "BF16/FP16 GEMM on random data (next to gpu-smoke's small-integer figure)"
  timeout 120 "$PY" - <<'PYEOF' 2>&1 | tee "$CHECK_OUT/gemm-random.txt" || true
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.init()
t2 = time.perf_counter()
print(f"import torch {t1 - t0:.2f}s, cuda init {t2 - t1:.2f}s")
n = 8192
for dtype in (torch.bfloat16, torch.float16):
    a = torch.randn(n, n, device="cuda:0", dtype=dtype)
    b = torch.randn(n, n, device="cuda:0", dtype=dtype)
    for _ in range(3):
        a @ b
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(50):
        a @ b
    end.record()
    end.synchronize()
    seconds = begin.elapsed_time(end) / 1000
    print(f"{dtype}: {2 * n**3 * 50 / seconds / 1e12:.1f} TFLOP/s on random data (GPU 0)")
PYEOF
}

start_sampler() {
  SAMPLER_PID=""
  have_smi || return 0
  local query="$SAMPLE_QUERY"
  # drivers before 535 call the field clocks_throttle_reasons.active
  nvidia-smi --query-gpu="$query" --format=csv >/dev/null 2>&1 || query="${query/clocks_event_reasons/clocks_throttle_reasons}"
  nvidia-smi --query-gpu="$query" --format=csv -lms 200 >"$CHECK_OUT/samples-$1.csv" 2>&1 &
  SAMPLER_PID=$!
}

stop_sampler() {
  if [ -n "${SAMPLER_PID:-}" ]; then
    kill "$SAMPLER_PID" 2>/dev/null || true
    wait "$SAMPLER_PID" 2>/dev/null || true
  fi
}

smoke_once() {  # smoke_once NAME [flags...]: one bounded run, sampled; prints its exit code
  local name=$1 rc=0
  shift
  start_sampler "$name"
  timeout 300 "$PY" -m gpuci gpu-smoke --json --report "$CHECK_OUT/smoke-$name-report.json" "$@" \
    >"$CHECK_OUT/smoke-$name.json" 2>"$CHECK_OUT/smoke-$name.log" || rc=$?
  stop_sampler
  echo "$name: exit $rc"
  return "$rc"
}

run_extras() {
  local extras="${GPUCI_CHECK_EXTRAS:-auto}"
  if [ "$extras" = "0" ]; then
    section "extras"; echo "skipped (GPUCI_CHECK_EXTRAS=0)"; return 0
  fi
  if [ "$extras" != "1" ] && [ "${GPUCI_CHECK_ALLOW_FAKE:-}" = "1" ] && [ -n "${GPUCI_FAKE_NVML:-}" ]; then
    section "extras"; echo "skipped: fake NVML (they measure a real GPU; GPUCI_CHECK_EXTRAS=1 runs them)"; return 0
  fi
  if [ "${SETUP_RC:-0}" -eq 3 ]; then
    section "extras"; echo "skipped: no usable NVML here"; return 0
  fi
  record_modes
  record_counters before
  record_identities
  record_gemm_random
  record_nccl_child
  section "dry-run estimates"
  timeout 60 "$PY" -m gpuci gpu-smoke --dry-run --json >"$CHECK_OUT/smoke-dry-run.json" 2>"$CHECK_OUT/smoke-dry-run.log" || true
  "$PY" -c 'import json,sys; [print(p["check"], p["estimate_s"]) for p in json.load(open(sys.argv[1]))["report"]["plan"]]' \
    "$CHECK_OUT/smoke-dry-run.json" 2>/dev/null || true
  section "gpu-smoke x3 (spread), --budget-seconds 120, negative control"
  local i rc
  for i in 1 2 3; do smoke_once "repeat$i" || true; done
  smoke_once "budget120" --budget-seconds 120 || true
  rc=0
  smoke_once "negative" --checks membw --min-bandwidth-gbs 99999 || rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "NEGATIVE CONTROL DID NOT FAIL: --min-bandwidth-gbs 99999 gave exit $rc (expected 1)"
    STATUS=1
  fi
  "$PY" - "$CHECK_OUT" <<'PYEOF' || true
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for name in ("repeat1", "repeat2", "repeat3", "budget120", "negative"):
    try:
        rep = json.loads((out / f"smoke-{name}-report.json").read_text())
    except (OSError, ValueError, KeyError):
        print(f"{name}: no report")
        continue
    figs = []
    for c in rep.get("checks", []):
        f = c["figures"]
        value = f.get("tflops") or f.get("copy_gbs") or f.get("h2d_gbs") or f.get("busbw_median_gbs")
        if c["name"] == "health":  # the counters judged before/after: only what moved
            moved = {k: v for k, v in (f.get("throttle_s") or {}).items() if v}
            value = f"throttle_s={moved} nvlinks={f.get('nvlinks_active')}"
        figs.append(f"{c['name']}@{c['gpu']}={c['status']}:{c['seconds']:.1f}s/est {c['params'].get('estimate_s')}" + (f":{value}" if value else ""))
    print(f"{name}: {rep.get('seconds')}s {' '.join(figs)}")
PYEOF
  section "dcgmi"
  if command -v dcgmi >/dev/null 2>&1; then
    local t0=$SECONDS
    timeout 300 dcgmi diag -r 1 -j >"$CHECK_OUT/dcgmi-r1.json" 2>&1 || true
    echo "dcgmi diag -r 1: $((SECONDS - t0))s"
  else
    echo "dcgmi not installed"
  fi
  record_smi_q after
  record_counters after
}

# ---- gpu-setup: real NVML, JSON report, cross-checked against nvidia-smi
run_gpu_setup() {
  section "gpu-setup"
  local report="$CHECK_OUT/gpu-setup.json" rc=0
  "$PY" -m gpuci gpu-setup --json --report "$CHECK_OUT/gpuci-gpu-report.json" "$@" \
    >"$report" || rc=$?
  cat "$report"
  echo "gpu-setup exit code: $rc"
  SETUP_RC=$rc
  [ "$rc" -eq 0 ] || STATUS=$rc
  if command -v nvidia-smi >/dev/null 2>&1 && [ "$rc" -ne 3 ]; then
    section "gpu-setup vs nvidia-smi"
    local smi="$CHECK_OUT/nvidia-smi.csv"
    nvidia-smi --query-gpu=uuid,name,memory.total --format=csv,noheader,nounits >"$smi" || true
    "$PY" - "$report" "$smi" <<'PYEOF' || STATUS=1
import json, sys
report = json.load(open(sys.argv[1]))["report"]["nvml"]["gpus"]
smi = [[c.strip() for c in line.split(",")] for line in open(sys.argv[2]) if line.strip()]
ok = len(report) == len(smi)
print(f"GPU count: gpu-setup {len(report)}, nvidia-smi {len(smi)}")
for gpu, (uuid, name, mib) in zip(report, smi):
    same = gpu["uuid"] == uuid and gpu["name"] == name
    same = same and abs(gpu["memory_total"] / 2**20 - float(mib)) <= 1
    ok = ok and same
    print(f"GPU {gpu['index']}: {'match' if same else 'MISMATCH'}: {gpu['name']} {gpu['uuid']}")
sys.exit(0 if ok else 1)
PYEOF
  fi
}

# ---- gpu-smoke: health diff, memory, GEMM, bandwidth, NCCL within the budget; figures digest
# Env: GPUCI_SMOKE_FRAMEWORK (auto|torch|cupy|none; "none" when testing on fake NVML),
#      GPUCI_SMOKE_FLAGS (extra flags, e.g. "--budget-seconds 60 --dcgm-level 1").
run_gpu_smoke() {
  section "gpu-smoke"
  local out="$CHECK_OUT/gpu-smoke.json" rc=0 framework="${GPUCI_SMOKE_FRAMEWORK:-auto}"
  if [ "${GPUCI_CHECK_ALLOW_FAKE:-}" = "1" ] && [ -n "${GPUCI_FAKE_NVML:-}" ]; then
    framework="${GPUCI_SMOKE_FRAMEWORK:-none}"  # a fake GPU has nothing for torch to drive
  fi
  local -a flags=()
  read -r -a flags <<<"${GPUCI_SMOKE_FLAGS:-}"
  start_sampler main
  "$PY" -m gpuci gpu-smoke --json --framework "$framework" \
    --report "$CHECK_OUT/gpuci-smoke-report.json" "${flags[@]}" >"$out" || rc=$?
  stop_sampler
  cat "$out"
  section "gpu-smoke figures"
  "$PY" - "$out" <<'PYEOF' || true
import json, sys
body = json.load(open(sys.argv[1]))
rep = body.get("report", {})
print(body.get("headline", ""))
for c in rep.get("checks", []):
    where = "all" if c["gpu"] is None else f"gpu{c['gpu']}"
    figs = " ".join(f"{k}={v}" for k, v in c["figures"].items() if v not in (None, []))
    why = f"  ({c['reason']})" if c["reason"] else ""
    est = c.get("params", {}).get("estimate_s")
    print(f"{where:5} {c['name']:7} {c['status']:4} {c['seconds']:7.2f}s (est {est})  {figs}{why}")
backend = rep.get("backend") or {}
print(f"total {rep.get('seconds')}s of a {rep.get('budget_seconds')}s budget; "
      f"framework {rep.get('framework')} {backend.get('version', '')}".rstrip())
PYEOF
  echo "gpu-smoke exit code: $rc"
  [ "$rc" -eq 0 ] || STATUS=$rc
}

setup_python
show_nvidia_smi
run_gpu_setup "$@"
run_gpu_smoke
run_extras

section "verdict"
echo "gpu-check exit code: $STATUS (reports in $CHECK_OUT)"
exit "$STATUS"
