#!/usr/bin/env bash
# Make (or reuse) the gpu-ci venv for this job and export GPUCI_PYTHON.
#
# Why: every gpu-ci action in a job should pay for the install once, reproducibly, without
# touching the caller's Python. So: one venv per job under $RUNNER_TEMP (else $TMPDIR or /tmp on
# GitLab or a laptop), keyed by the sha256 of requirements.lock and of this checkout's path, so
# all actions of one gpu-ci ref share it and two refs in one job never mix. uv when present, else
# pip; hashes required. gpu-ci itself (pure Python) is linked from this checkout by a .pth file,
# i.e. installed without dependencies and without fetching an unlocked build backend.
# The venv is built under *.incomplete, verified, then renamed: a half-built one is never used.
#
# Prints the interpreter's path on stdout; in GitHub Actions it also writes GPUCI_PYTHON to
# $GITHUB_ENV for later steps. Elsewhere:  GPUCI_PYTHON="$(bash scripts/bootstrap.sh)"
# Env: GPUCI_PYTHON (reused when it already runs gpu-ci from this checkout), GPUCI_BASE_PYTHON
# (the interpreter to build the venv from; default python3), RUNNER_TEMP.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
lock="$root/requirements.lock"
src="$root/src"

log() { echo "gpu-ci bootstrap: $*" >&2; }

fail() { # cause, fix, [exit code: 3 infrastructure, 2 configuration]
  if [ "${GITHUB_ACTIONS:-}" = "true" ]; then
    echo "::error title=gpu-ci bootstrap::$1 (fix: $2)"
  else
    echo "error: gpu-ci bootstrap: $1 (fix: $2)" >&2
  fi
  exit "${3:-3}"
}

finish() { # python
  if [ "${GITHUB_ACTIONS:-}" = "true" ]; then
    [ -n "${GITHUB_ENV:-}" ] || fail "running in GitHub Actions but \$GITHUB_ENV is not set" \
      "run on a current runner"
    echo "GPUCI_PYTHON=$1" >>"$GITHUB_ENV"
  fi
  echo "$1"
  exit 0
}

works() { # python -> 0 when it imports gpu-ci from this very checkout
  [ -n "$1" ] && [ -x "$1" ] || return 1
  "$1" - "$src" 2>/dev/null <<'PY'
import os, sys
import gpuci
here = os.path.dirname(os.path.dirname(os.path.realpath(gpuci.__file__)))
sys.exit(0 if here == os.path.realpath(sys.argv[1]) else 1)
PY
}

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum | cut -c1-16; else shasum -a 256 | cut -c1-16; fi
}

base_python() { # the first interpreter >= 3.10 among GPUCI_BASE_PYTHON, python3, python
  local cand path
  for cand in "${GPUCI_BASE_PYTHON:-}" python3 python; do
    [ -n "$cand" ] || continue
    path="$(command -v "$cand" 2>/dev/null)" || continue
    if "$path" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      echo "$path"
      return 0
    fi
  done
  return 1
}

[ -f "$lock" ] || fail "$lock is missing" "restore requirements.lock in the gpu-ci checkout" 2

# 1. Already bootstrapped in this job (or handed an interpreter that runs this checkout): reuse.
if works "${GPUCI_PYTHON:-}"; then
  log "reusing $GPUCI_PYTHON"
  finish "$GPUCI_PYTHON"
fi

key="$({ cat "$lock"; printf '%s\n' "$src"; } | sha256)"
venv="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/gpuci-venv-$key"
if works "$venv/bin/python"; then
  log "reusing $venv"
  finish "$venv/bin/python"
fi

# 2. Build a new venv beside its final name, verify it, rename it into place.
py_base="$(base_python)" || fail "no Python 3.10 or newer found (tried \$GPUCI_BASE_PYTHON, python3, python)" \
  "let actions/setup-python run, or set GPUCI_BASE_PYTHON to a Python >= 3.10" 2
tmp="$venv.incomplete.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$(dirname "$venv")"
if [ "${GITHUB_ACTIONS:-}" = "true" ]; then echo "::group::gpu-ci bootstrap: installing into $venv"; fi
started=$SECONDS
if command -v uv >/dev/null 2>&1; then
  log "creating $venv with uv from $py_base"
  uv venv --quiet --relocatable --python "$py_base" "$tmp" >&2 ||
    fail "uv venv failed with $py_base" "check that $py_base is a working Python"
  uv pip install --quiet --python "$tmp/bin/python" --require-hashes --no-deps -r "$lock" >&2 ||
    fail "installing the hash-locked requirements with uv failed" \
      "check the network or the index (UV_INDEX_URL); a hash mismatch means a tampered download"
else
  log "creating $venv with pip from $py_base"
  "$py_base" -m venv "$tmp" >&2 ||
    fail "$py_base -m venv failed" "install python3-venv (Debian/Ubuntu) or uv, or let setup-python run"
  "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --require-hashes --no-deps -r "$lock" >&2 ||
    fail "installing the hash-locked requirements with pip failed" \
      "check the network or the index (PIP_INDEX_URL); a hash mismatch means a tampered download"
fi
site="$("$tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
printf '%s\n' "$src" >"$site/gpuci-source.pth"
"$tmp/bin/python" -c 'import gpuci.cli, httpx, tenacity, yaml' ||
  fail "the new venv cannot import gpu-ci or its requirements" "rerun; report it if it persists"
works "$tmp/bin/python" || fail "the new venv runs gpu-ci from another checkout" "report this bug"
log "installed in $((SECONDS - started)) s"
if [ "${GITHUB_ACTIONS:-}" = "true" ]; then echo "::endgroup::"; fi

rm -rf "$venv" # a broken leftover (a working one returned above)
if ! "$py_base" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$tmp" "$venv" 2>/dev/null; then
  works "$venv/bin/python" || fail "could not move the new venv to $venv" "check free space and permissions"
  log "another bootstrap finished first; using its venv"
fi
finish "$venv/bin/python"
