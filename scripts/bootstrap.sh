#!/usr/bin/env bash
# Make (or reuse) the gpu-ci venv for this job and export GPUCI_PYTHON.
#
# Why: every gpu-ci action in a job should pay for the install once, reproducibly, without
# touching the caller's Python. So: one venv per job in a private folder, gpuci-venvs/ (mode
# 0700, ours) under $RUNNER_TEMP (else $XDG_CACHE_HOME or ~/.cache on GitLab or a laptop; never
# a shared folder such as /tmp, where another user could plant one), keyed by the sha256 of
# requirements.lock and of this checkout's path, so all actions of one gpu-ci ref share it and
# two refs in one job never mix. uv when present, else pip; hashes required. gpu-ci itself (pure
# Python) is linked from this checkout by a .pth file, i.e. installed without dependencies and
# without fetching an unlocked build backend. The venv is built under *.incomplete, verified,
# then renamed: a half-built one is never used.
#
# Nothing is run from a path another user could have written: the private folder and every
# folder above it, a venv found there, and an inherited GPUCI_PYTHON are checked for owner and
# mode first (docs/security.md, "The runner-local tier and the bootstrap venv").
#
# Prints the interpreter's path on stdout; in GitHub Actions it also writes GPUCI_PYTHON to
# $GITHUB_ENV for later steps. Elsewhere:  GPUCI_PYTHON="$(bash scripts/bootstrap.sh)"
# Env: GPUCI_PYTHON (reused when it already runs gpu-ci from this checkout), GPUCI_BASE_PYTHON
# (the interpreter to build the venv from; default python3), RUNNER_TEMP, XDG_CACHE_HOME.
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

owner_mode() { # path -> "uid octal-mode" of the path itself (a link is not followed)
  stat -c '%u %a' -- "$1" 2>/dev/null || stat -f '%u %Lp' -- "$1" 2>/dev/null
}

why="" # what the last failed check found

runner_uid="" # in GitHub Actions, the runner's user (owner of RUNNER_TEMP): it runs the job
if [ "${GITHUB_ACTIONS:-}" = "true" ] && [ -n "${RUNNER_TEMP:-}" ]; then
  read -r runner_uid _ <<<"$(owner_mode "$RUNNER_TEMP")" || true
fi

trusted_chain() { # folder -> 0 when no other user can change it or any folder above it
  local dir owner mode uid
  uid="$(id -u)"
  dir="$(cd "$1" 2>/dev/null && pwd -P)" || { why="$1 is not a folder"; return 1; }
  while :; do
    read -r owner mode <<<"$(owner_mode "$dir")" || true
    if [ -z "${mode:-}" ]; then why="cannot read the owner of $dir"; return 1; fi
    if [ "$owner" != "$uid" ] && [ "$owner" != 0 ] && [ "$owner" != "${runner_uid:-x}" ]; then
      why="$dir is owned by uid $owner"
      return 1
    fi
    if (((8#$mode & 8#022) && !(8#$mode & 8#1000))); then
      why="$dir can be written by other users (mode $mode)"
      return 1
    fi
    [ "$dir" = / ] && return 0
    dir="$(dirname "$dir")"
  done
}

ours() { # path -> 0 when it is a real folder of ours that nobody else can write
  local owner mode
  if [ -L "$1" ] || [ ! -d "$1" ]; then why="$1 is not a folder"; return 1; fi
  read -r owner mode <<<"$(owner_mode "$1")" || true
  if [ "${owner:-}" != "$(id -u)" ]; then why="$1 is owned by uid ${owner:-?}, not $(id -u)"; return 1; fi
  if ((8#${mode:-777} & 8#022)); then why="$1 can be written by other users (mode $mode)"; return 1; fi
}

private_home() { # sets $home: the 0700 folder, owned by us, that holds gpu-ci venvs
  local base="${RUNNER_TEMP:-}"
  if [ -z "$base" ]; then
    base="${XDG_CACHE_HOME:-}"
    if [ -z "$base" ]; then
      [ -n "${HOME:-}" ] || fail "neither RUNNER_TEMP, XDG_CACHE_HOME nor HOME is set" \
        "set XDG_CACHE_HOME to a folder only this user can write" 2
      base="$HOME/.cache"
    fi
  fi
  mkdir -p "$base" 2>/dev/null || fail "cannot create $base" "set XDG_CACHE_HOME to a folder you own" 2
  trusted_chain "$base" || fail "refusing to keep venvs under $base: $why" \
    "set XDG_CACHE_HOME (or RUNNER_TEMP) to a folder only this user can write" 2
  local dir="$base/gpuci-venvs"
  mkdir -m 700 "$dir" 2>/dev/null || true
  ours "$dir" || fail "refusing $dir, it may hold a planted interpreter: $why" \
    "remove $dir (as its owner or root) and rerun; it is recreated private" 2
  chmod 700 "$dir"
  home="$dir"
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

# 1. Already bootstrapped in this job (or handed an interpreter that runs this checkout): reuse,
#    unless another user could have written the folder it lives in.
if [ -n "${GPUCI_PYTHON:-}" ]; then
  if ! trusted_chain "$(dirname "$GPUCI_PYTHON")"; then
    log "not running GPUCI_PYTHON=$GPUCI_PYTHON: $why"
  elif works "$GPUCI_PYTHON"; then
    log "reusing $GPUCI_PYTHON"
    finish "$GPUCI_PYTHON"
  fi
fi

key="$({ cat "$lock"; printf '%s\n' "$src"; } | sha256)"
private_home
venv="$home/gpuci-venv-$key"
if [ -e "$venv" ] || [ -L "$venv" ]; then
  if ! ours "$venv" || ! ours "$venv/bin"; then
    log "not reusing $venv: $why; building a new one"
    rm -rf "$venv"
  elif works "$venv/bin/python"; then
    log "reusing $venv"
    finish "$venv/bin/python"
  fi
fi

# 2. Build a new venv beside its final name, verify it, rename it into place.
py_base="$(base_python)" || fail "no Python 3.10 or newer found (tried \$GPUCI_BASE_PYTHON, python3, python)" \
  "let actions/setup-python run, or set GPUCI_BASE_PYTHON to a Python >= 3.10" 2
tmp="$venv.incomplete.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
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
