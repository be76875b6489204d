#!/usr/bin/env bash
# Installs and starts what the sandbox tests need, idempotently: bubblewrap, debootstrap, a Docker
# engine (started in the background: no systemd here), and the default sandbox image (built from a
# local Debian root filesystem when no registry is reachable; reused when present).
# Runs as root, with CI=true and no stdin. Called by .ci/run before the tests.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log_dir="${AGENT_RL_CI_LOGS:-/var/log}"
dockerd_log="$log_dir/agent-rl-dockerd.log"

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core)  # the trajectory viewer test (headless)
if ((${#need[@]})); then
  echo "setup_sandbox: installing ${need[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}" </dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "setup_sandbox: starting dockerd (log: $dockerd_log)"
  mkdir -p "$log_dir"
  setsid -f dockerd >>"$dockerd_log" 2>&1 </dev/null
  for _ in $(seq 90); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
fi
if ! docker info >/dev/null 2>&1; then
  echo "setup_sandbox: dockerd did not answer within 90 s; last lines of $dockerd_log:" >&2
  tail -n 40 "$dockerd_log" >&2 || true
  exit 1
fi

# The image build is plain stdlib Python driving the docker CLI: it runs before or after .venv exists.
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then python="$root/.venv/bin/python"; else python=/usr/bin/python3; fi
fi
cd "$root"
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$python" -c 'import sys; from sandbox.cli import build_image; sys.exit(build_image())' </dev/null
echo "setup_sandbox: ready (bwrap $(bwrap --version | awk '{print $2}'), docker $(docker version --format '{{.Server.Version}}'))"
