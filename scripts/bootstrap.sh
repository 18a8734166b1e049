#!/usr/bin/env bash
# Make (or reuse) the gpu-ci venv for this job and export GPUCI_PYTHON.
#
# Why: every gpu-ci action in a job should pay for the install once, reproducibly, without
# touching the caller's Python. A job's gpu-ci actions may run from several copies of one
# gpu-ci ref (act makes one per `uses:` path), so the install is split in two,
# both in a private folder, gpuci-venvs/ (mode 0700, ours) under $RUNNER_TEMP (else
# $XDG_CACHE_HOME or ~/.cache on GitLab or a laptop; never a shared folder such as /tmp, where
# another user could plant one):
#   gpuci-deps-<key>  the locked requirements, keyed by the sha256 of requirements.lock and of the
#                     base interpreter (its resolved path and version): built once per job and
#                     Python, with uv when present, else pip; hashes required;
#   gpuci-venv-<key>  per checkout, keyed by the deps key and this checkout's src path: an empty
#                     venv (no pip) whose one .pth file names this checkout's src and the deps
#                     venv's site-packages. gpu-ci itself is pure Python, so it is linked, not
#                     installed: no unlocked build backend is fetched. Two refs never mix.
# Each is built under *.incomplete.<pid>, verified, then renamed: a half-built one is never used.
#
# Nothing is run from a path another user could have written: the private folder and every
# folder above it, both venvs found there (and the deps' site-packages), and every interpreter
# run (an inherited GPUCI_PYTHON, the base, the venvs' bin/python: the folder each is in, as
# given and through its links, and the file) are checked for owner and mode first
# (docs/security.md, "The runner-local tier and the bootstrap venv"). umask 077: what we create
# is private even where the umask is 002.
#
# Prints the interpreter's path on stdout; in GitHub Actions it also writes GPUCI_PYTHON to
# $GITHUB_ENV for later steps. Elsewhere:  GPUCI_PYTHON="$(bash scripts/bootstrap.sh)"
# Env: GPUCI_PYTHON (reused when it already runs gpu-ci from this checkout; else its interpreter
# is the base for the venvs when GPUCI_BASE_PYTHON is unset, as in a job's later gpu-ci actions,
# whose setup-python step is skipped), GPUCI_BASE_PYTHON (the interpreter to build from; default
# python3), RUNNER_TEMP, XDG_CACHE_HOME.
set -euo pipefail
umask 077

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

# Asked once: every folder checked below is compared with it.
me="$(id -u)" || fail "cannot read this user's id (id -u failed)" "check that coreutils' id runs here"

finish() { # python
  if [ "${GITHUB_ACTIONS:-}" = "true" ]; then
    [ -n "${GITHUB_ENV:-}" ] || fail "running in GitHub Actions but \$GITHUB_ENV is not set" \
      "run on a current runner"
    echo "GPUCI_PYTHON=$1" >>"$GITHUB_ENV"
  fi
  echo "$1"
  exit 0
}

works() { # python -> 0 when it imports gpu-ci from this very checkout and finds its requirements
  [ -n "$1" ] && [ -x "$1" ] || return 1
  "$1" - "$src" 2>/dev/null <<'PY'
import os, sys
from importlib.util import find_spec
import gpuci
here = os.path.dirname(os.path.dirname(os.path.realpath(gpuci.__file__)))
found = all(find_spec(name) for name in ("httpx", "tenacity", "yaml"))
sys.exit(0 if found and here == os.path.realpath(sys.argv[1]) else 1)
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

# On a GitHub-hosted runner, its tool cache (where setup-python puts the base interpreter): the
# image makes /opt/hostedtoolcache mode 0777 (actions/runner-images, configure-environment.sh),
# which trusted_python would refuse, leaving every hosted job without its pinned Python. That VM
# is made for this one job and has no other user to write there, so the folders and files of the
# tool cache are not checked there; everything else (a venv, /usr/bin, a folder outside the
# cache) is, and a self-hosted runner's tool cache is checked as any folder.
hosted_cache=""
if [ "${GITHUB_ACTIONS:-}" = "true" ] && [ "${RUNNER_ENVIRONMENT:-}" = "github-hosted" ] &&
  [ -n "${RUNNER_TOOL_CACHE:-}" ]; then
  hosted_cache="$(cd -P -- "$RUNNER_TOOL_CACHE" 2>/dev/null && pwd -P)" || hosted_cache=""
fi

in_hosted_cache() { # resolved folder -> 0 when it is in a GitHub-hosted runner's tool cache
  [ -n "$hosted_cache" ] || return 1
  case "$1/" in "${hosted_cache%/}"/*) return 0 ;; *) return 1 ;; esac
}

trusted_entry() { # path -> 0 when its owner is us, root or the runner's user, and no other user
  # can write it (a sticky folder, such as /tmp, excepted: others cannot replace what is ours there)
  local owner mode sticky=0
  read -r owner mode <<<"$(owner_mode "$1")" || true
  if [ -z "${mode:-}" ]; then why="cannot read the owner of $1"; return 1; fi
  if [ -d "$1" ]; then sticky=$((8#$mode & 8#1000)); fi
  if [ "$owner" != "$me" ] && [ "$owner" != 0 ] && [ "$owner" != "${runner_uid:-x}" ]; then
    why="$1 is owned by uid $owner"
    return 1
  fi
  if (((8#$mode & 8#022) && !sticky)); then
    why="$1 can be written by other users (mode $mode)"
    return 1
  fi
}

trusted_chain() { # folder -> 0 when no other user can change it or any folder above it
  local dir
  dir="$(cd -P -- "$1" 2>/dev/null && pwd -P)" || { why="$1 is not a folder"; return 1; }
  while :; do
    trusted_entry "$dir" || return 1
    [ "$dir" = / ] && return 0
    dir="${dir%/*}" # the parent of a resolved path (pwd -P): no fork of dirname per folder
    dir="${dir:-/}"
  done
}

trusted_python() { # path -> 0 when no other user can change what running it runs: the folder of
  # the path as given, of every link on the way (a venv's bin/python is always a link to its base
  # interpreter, a tool cache's python3 one to python3.X) and of the file it resolves to, each
  # with the folders above it, and that file. Checking only the folder named would let whoever can
  # write the folder a link points into swap the interpreter. Links are read one at a time, with
  # no realpath (not on every macOS), and each folder resolved as the kernel does (cd -P).
  local path="$1" dir target hops=0
  while :; do
    dir="$(cd -P -- "$(dirname -- "$path")" 2>/dev/null && pwd -P)" ||
      { why="$(dirname -- "$path") is not a folder"; return 1; }
    in_hosted_cache "$dir" || trusted_chain "$dir" || return 1
    path="${dir%/}/$(basename -- "$path")"
    [ -L "$path" ] || break
    hops=$((hops + 1))
    if [ "$hops" -gt 40 ]; then why="$1 goes through more than 40 links"; return 1; fi
    target="$(readlink -- "$path")" || { why="cannot read the link $path"; return 1; }
    case "$target" in
      /*) path="$target" ;;
      *) path="$dir/$target" ;;
    esac
  done
  if [ ! -f "$path" ]; then why="$path is not a file"; return 1; fi
  in_hosted_cache "$dir" || trusted_entry "$path"
}

ours() { # path -> 0 when it is a real folder of ours that nobody else can write
  local owner mode
  if [ -L "$1" ] || [ ! -d "$1" ]; then why="$1 is not a folder"; return 1; fi
  read -r owner mode <<<"$(owner_mode "$1")" || true
  if [ "${owner:-}" != "$me" ]; then why="$1 is owned by uid ${owner:-?}, not $me"; return 1; fi
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

refused="" # the base candidates not run, and why

base_python() { # sets py_base (links resolved) and py_id (path and version): the first >= 3.10
  # that no other user could have changed (trusted_python): the venvs are built from it, and
  # probing it runs it with the job's env
  local cand path out
  for cand in "${GPUCI_BASE_PYTHON:-}" "${inherited:-}" python3 python; do
    [ -n "$cand" ] || continue
    path="$(command -v "$cand" 2>/dev/null)" || continue
    if ! trusted_python "$path"; then
      log "not running $path: $why"
      refused="$refused; refused $path: $why"
      continue
    fi
    out="$("$path" -c 'import os, sys
if sys.version_info < (3, 10): sys.exit(1)
print(os.path.realpath(sys.executable))
print(sys.version)' 2>/dev/null)" || continue
    py_base="${out%%$'\n'*}"
    if [ -n "$py_base" ] && [ -x "$py_base" ]; then
      py_id="$out"
      return 0
    fi
  done
  return 1
}

make_venv() { # folder [--without-pip]: an empty venv from $py_base, with uv when present
  if command -v uv >/dev/null 2>&1; then
    uv venv --quiet --relocatable --python "$py_base" "$1" >&2 ||
      fail "uv venv failed with $py_base" "check that $py_base is a working Python"
  else
    "$py_base" -m venv ${2:+"$2"} "$1" >&2 ||
      fail "$py_base -m venv failed" "install python3-venv (Debian/Ubuntu) or uv, or let setup-python run"
  fi
}

deps_site="" # the site-packages of a checked deps venv

site_chain_ours() { # venv -> 0 when its site-packages and the folders up to the venv are ours;
  # found without running the venv's Python, so no .pth file there runs before it is checked.
  # Sets $site.
  local dir found=("$1"/lib/python3*/site-packages)
  if [ "${#found[@]}" -ne 1 ] || [ ! -d "${found[0]}" ]; then
    why="$1 has no single lib/python3*/site-packages"
    return 1
  fi
  site="${found[0]}"
  dir="$site"
  while [ "$dir" != "$1" ]; do
    ours "$dir" || return 1
    dir="$(dirname "$dir")"
  done
}

deps_ready() { # -> 0 with $deps_site set when $deps is ours and imports the locked requirements
  [ -e "$deps" ] || [ -L "$deps" ] || return 1
  why="it cannot import the locked requirements"
  if ours "$deps" && ours "$deps/bin" && site_chain_ours "$deps" && trusted_python "$deps/bin/python" &&
    "$deps/bin/python" -c 'import sys
from importlib.util import find_spec
if not all(find_spec(name) for name in ("httpx", "tenacity", "yaml")): sys.exit(1)' 2>/dev/null; then
    deps_site="$site"
    return 0
  fi
  log "not reusing $deps: $why; building a new one"
  rm -rf "$deps"
  return 1
}

site_of() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'; }

# -I -S: a rename needs no site-packages (whose .pth files the base interpreter would run at
# every start) and no PYTHON* variable of the job's
rename() { "$py_base" -I -S -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$1" "$2" 2>/dev/null; }

in_place() { # built final check...: rename built to final, unless a racing bootstrap's passes
  rename "$1" "$2" && return 0
  if "${@:3}"; then
    log "another bootstrap finished first; using its $2"
    return 0
  fi
  rm -rf "$2" # a broken leftover
  rename "$1" "$2" || fail "could not move the new venv to $2" "check free space and permissions"
}

[ -f "$lock" ] || fail "$lock is missing" "restore requirements.lock in the gpu-ci checkout" 2

# 1. Already bootstrapped in this job (or handed an interpreter that runs this checkout): reuse,
#    unless another user could have written the folder it lives in, or one its links lead
#    through (our venv's bin/python is a link to its base interpreter). One that runs gpu-ci from
#    another copy of it is this job's Python: the base for this checkout's venv.
inherited=""
if [ -n "${GPUCI_PYTHON:-}" ]; then
  if ! trusted_python "$GPUCI_PYTHON"; then
    log "not running GPUCI_PYTHON=$GPUCI_PYTHON: $why"
  elif works "$GPUCI_PYTHON"; then
    log "reusing $GPUCI_PYTHON"
    finish "$GPUCI_PYTHON"
  else
    inherited="$GPUCI_PYTHON"
  fi
fi

private_home
py_base="" py_id=""
base_python || fail "no Python 3.10 or newer found (tried \$GPUCI_BASE_PYTHON, \$GPUCI_PYTHON, python3, python$refused)" \
  "let actions/setup-python run, or set GPUCI_BASE_PYTHON to a Python >= 3.10" 2
deps_key="$({ cat "$lock"; printf '%s\n' "$py_id"; } | sha256)"
deps="$home/gpuci-deps-$deps_key"
venv="$home/gpuci-venv-$(printf '%s\n' "$deps_key" "$src" | sha256)"
tmp_deps="$deps.incomplete.$$"
tmp_venv="$venv.incomplete.$$"
trap 'rm -rf "$tmp_deps" "$tmp_venv"' EXIT

# 2. This checkout's venv, if it is ours and works (and so is the deps venv it names).
reuse_venv=false
if [ -e "$venv" ] || [ -L "$venv" ]; then
  if ours "$venv" && ours "$venv/bin" && site_chain_ours "$venv" && trusted_python "$venv/bin/python"; then
    reuse_venv=true
  else
    log "not reusing $venv: $why; building a new one"
    rm -rf "$venv"
  fi
fi

# 3. The deps venv: reuse it, or install the lock into a new one.
if ! deps_ready; then
  rm -rf "$tmp_deps"
  if [ "${GITHUB_ACTIONS:-}" = "true" ]; then echo "::group::gpu-ci bootstrap: installing into $deps"; fi
  started=$SECONDS
  if command -v uv >/dev/null 2>&1; then
    log "creating $deps with uv from $py_base"
    make_venv "$tmp_deps"
    uv pip install --quiet --python "$tmp_deps/bin/python" --require-hashes --no-deps -r "$lock" >&2 ||
      fail "installing the hash-locked requirements with uv failed" \
        "check the network or the index (UV_INDEX_URL); a hash mismatch means a tampered download"
  else
    log "creating $deps with pip from $py_base"
    make_venv "$tmp_deps"
    "$tmp_deps/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
      --require-hashes --no-deps -r "$lock" >&2 ||
      fail "installing the hash-locked requirements with pip failed" \
        "check the network or the index (PIP_INDEX_URL); a hash mismatch means a tampered download"
  fi
  "$tmp_deps/bin/python" -c 'import httpx, tenacity, yaml' ||
    fail "the new venv cannot import the locked requirements" "rerun; report it if it persists"
  log "installed in $((SECONDS - started)) s"
  if [ "${GITHUB_ACTIONS:-}" = "true" ]; then echo "::endgroup::"; fi
  in_place "$tmp_deps" "$deps" deps_ready
  deps_ready || fail "the new venv $deps cannot be used: $why" "rerun; report it if it persists"
elif $reuse_venv && works "$venv/bin/python"; then
  log "reusing $venv"
  finish "$venv/bin/python"
fi

# 4. This checkout's venv: no pip, one .pth naming this checkout's src and the deps.
rm -rf "$tmp_venv"
make_venv "$tmp_venv" --without-pip
site="$(site_of "$tmp_venv")" && [ -d "$site" ] ||
  fail "the new venv $tmp_venv has no site-packages" "check that $py_base is a working Python"
printf '%s\n' "$src" "$deps_site" >"$site/gpuci.pth"
works "$tmp_venv/bin/python" ||
  fail "the new venv does not run gpu-ci from this checkout with its requirements" "report this bug"
log "linked $venv to $deps"
in_place "$tmp_venv" "$venv" works "$venv/bin/python"
finish "$venv/bin/python"
