#!/usr/bin/env bash
# Debian's prometheus package (prometheus and promtool) for the monitoring e2e: installed, never
# started as a service (a policy-rc.d refuses the package's start for the install; the test runs
# the binary itself on loopback and stops it by PID). Idempotent.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  echo "prometheus: $(prometheus --version 2>&1 | head -1)"
  exit 0
fi
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# vllm-fleet testbed: no service starts while prometheus installs\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  made_policy=1
fi
cleanup() { if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
install || { apt-get update -qq && install; }
echo "prometheus: $(prometheus --version 2>&1 | head -1)"
