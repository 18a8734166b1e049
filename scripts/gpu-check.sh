#!/usr/bin/env bash
# gpu-check.sh: the one script to run on a machine with a real GPU.
#
# Runs gpu-ci's GPU commands against the real NVML (never the fake) and prints what they saw,
# so a person can compare it with nvidia-smi. Exits non-zero when a section fails.
# Later issues add sections (gpu-smoke, ...): keep one function per section, called at the end.
#
# Usage: scripts/gpu-check.sh [extra gpu-setup flags, e.g. --min-memory-gb 80]
# Env:   PYTHON (interpreter to use), GPUCI_CHECK_OUT (where reports go; default $OUT or
#        .gpuci/gpu-check), GPUCI_CHECK_ALLOW_FAKE=1 (tests only: keep GPUCI_FAKE_NVML).
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

# ---- python: use the machine's python when it has nvidia-ml-py; else a venv, only if needed
setup_python() {
  section "python"
  PY="${PYTHON:-python3}"
  if ! "$PY" -c 'import pynvml' 2>/dev/null; then
    local venv="$ROOT/.gpuci/venv"
    echo "nvidia-ml-py missing for $PY: installing gpu-ci into $venv"
    [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
    if ! "$venv/bin/python" -m pip install -q -e "$ROOT"; then
      echo "error: cannot install gpu-ci (no network?) (fix: pip install nvidia-ml-py, or set PYTHON to an interpreter that has it)"
      exit 3
    fi
    PY="$venv/bin/python"
  fi
  export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" -c 'import sys, pynvml, gpuci; print(sys.version.split()[0], "gpuci", gpuci.__version__, "pynvml", getattr(pynvml, "__file__", "?"))'
  # the CUDA torch was built for (None: a CPU-only wheel, which cannot drive the GPU)
  "$PY" -c 'import torch; print("torch", torch.__version__, "torch.version.cuda", torch.version.cuda)' 2>/dev/null \
    || echo "torch not installed for $PY"
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

# ---- gpu-setup: real NVML, JSON report, cross-checked against nvidia-smi
run_gpu_setup() {
  section "gpu-setup"
  local report="$CHECK_OUT/gpu-setup.json" rc=0
  "$PY" -m gpuci gpu-setup --json --report "$CHECK_OUT/gpuci-gpu-report.json" "$@" \
    >"$report" || rc=$?
  cat "$report"
  echo "gpu-setup exit code: $rc"
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
  "$PY" -m gpuci gpu-smoke --json --framework "$framework" \
    --report "$CHECK_OUT/gpuci-smoke-report.json" "${flags[@]}" >"$out" || rc=$?
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
    print(f"{where:5} {c['name']:7} {c['status']:4} {c['seconds']:7.2f}s  {figs}{why}")
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

section "verdict"
echo "gpu-check exit code: $STATUS (reports in $CHECK_OUT)"
exit "$STATUS"
