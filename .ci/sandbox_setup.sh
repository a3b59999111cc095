#!/bin/sh
# Sandbox prerequisites for CI and dev machines (Debian 12, run as root). Idempotent:
# installs bubblewrap, docker.io and debootstrap when missing, starts dockerd when it is not
# answering and waits for it, then builds the sandbox image unless it exists (cached).
# Usage: .ci/sandbox_setup.sh [python]   (python defaults to .venv/bin/python or python3)
set -eu
cd "$(dirname "$0")/.."
PY="${1:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi

need=""
command -v bwrap >/dev/null 2>&1 || need="$need bubblewrap"
command -v dockerd >/dev/null 2>&1 || need="$need docker.io"
command -v debootstrap >/dev/null 2>&1 || need="$need debootstrap"
# shell sessions (workers/sandbox/session.py): bwrap sandboxes bind the host's /usr read-only
command -v git >/dev/null 2>&1 || need="$need git"
/usr/bin/python3 -c "import pytest" >/dev/null 2>&1 || need="$need python3-pytest"
if [ -n "$need" ]; then
  echo "sandbox_setup: installing$need"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi

if ! docker info >/dev/null 2>&1; then
  echo "sandbox_setup: starting dockerd"
  # a dockerd killed earlier leaves its pid file behind, and a new one then refuses to start
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  mkdir -p var
  # no iptables: sandbox containers run with network none
  nohup dockerd --iptables=false >var/dockerd.log 2>&1 &
  i=0
  until docker info >/dev/null 2>&1; do
    i=$((i + 1))
    if [ "$i" -gt 120 ]; then
      echo "sandbox_setup: dockerd did not come up; see var/dockerd.log" >&2
      tail -20 var/dockerd.log >&2 || true
      exit 1
    fi
    sleep 0.5
  done
fi

"$PY" -m workers.sandbox.libs install
"$PY" -m workers.sandbox.image build
"$PY" -c "from workers.sandbox import reap; print('sandbox_setup: reaped', reap())"
