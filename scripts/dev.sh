#!/usr/bin/env bash
# Run a command inside the project's venv, creating or refreshing it first.
#   bash scripts/dev.sh --light python -m gpuci dry-run examples/workflows/train.yml
#   bash scripts/dev.sh python -m pytest
# --light: .venv-run, the package and its runtime dependencies only (what `pip install .` gives
# a user), for running gpu-ci; no test tools, no Node, no apt-get. Without it: .venv with every
# tool the tests need. Each venv is rebuilt only when pyproject.toml changes (its hash is kept
# inside).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "${1:-}" = "--light" ]; then
  shift
  venv="${GPUCI_RUN_VENV:-$root/.venv-run}"
  stamp="$venv/.gpuci-run-stamp"
  want="$(sha256sum pyproject.toml | cut -c1-16)"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "gpuci dev: preparing $venv (the package and its runtime dependencies)" >&2
    if command -v uv >/dev/null; then  # uv when present (seconds), else pip
      uv venv -q --allow-existing --python python3 "$venv" >&2
      uv pip install -q --python "$venv/bin/python" -e . >&2
    else
      python3 -m venv "$venv"
      "$venv/bin/python" -m pip install -q --disable-pip-version-check -e . >&2
    fi
    echo "$want" > "$stamp"
  fi
  export PATH="$venv/bin:$PATH"
  export VIRTUAL_ENV="$venv"
  exec "$@"
fi

venv="${GPUCI_DEV_VENV:-$root/.venv}"
stamp="$venv/.gpuci-dev-stamp"
want="$(sha256sum pyproject.toml | cut -c1-16)"

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "gpuci dev: preparing $venv (first run or pyproject.toml changed)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip uv >&2
  "$venv/bin/python" -m uv pip install -q --python "$venv/bin/python" -e ".[dev]" >&2
  # A CPU-only torch, only when this machine keeps its wheel locally (never a multi-GB CUDA
  # download): gpu-smoke's torch backend then runs for real on the CPU in the tests.
  wheels="${PIP_FIND_LINKS:-/opt/wheels}"
  pyver="$("$venv/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  for wheel in "$wheels"/torch-*+cpu-"$pyver"-*.whl; do
    [ -f "$wheel" ] || continue
    "$venv/bin/python" -m uv pip install -q --python "$venv/bin/python" "$wheel" >&2 \
      || echo "gpuci dev: local CPU torch wheel did not install; torch tests will skip" >&2
    break
  done
  echo "$want" > "$stamp"
fi
# The S3 server the cache benchmark's smoke test runs against (npm; file-backed, fast ranges).
if [ ! -x "$root/.bench/node/node_modules/.bin/s3rver" ] && command -v npm >/dev/null; then
  echo "gpuci dev: installing s3rver for the benchmark smoke (npm)" >&2
  npm install --prefix "$root/.bench/node" --no-audit --no-fund --loglevel=error \
    s3rver@3.7.1 >&2 || echo "gpuci dev: s3rver install failed; its smoke test will skip" >&2
fi
# The real CI clients the tests drive (gitlab-ci-local and its Node 22, rsync); act is in .[dev].
bash "$root/scripts/install-clients.sh"
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"
# The suite starts thousands of Python processes (the CLI, moto, act's and gitlab-ci-local's
# steps). Where the machine sets PYTHONDONTWRITEBYTECODE (CI images do), none keeps its
# bytecode, so each compiled botocore, httpx or moto again from source (1-2 CPU-s a process:
# half the suite's CPU on a 2-core runner). Bytecode goes to the gitignored __pycache__.
unset PYTHONDONTWRITEBYTECODE
exec "$@"
