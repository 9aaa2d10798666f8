#!/usr/bin/env bash
# Debian's prometheus package (prometheus and promtool) for the monitoring e2e: installed, never
# started as a service (a policy-rc.d refuses the package's start for the install; the test runs
# the binary itself on loopback and stops it by PID). Idempotent.
set -euo pipefail
# Also: the .deb files a test host lacks for Debian's prometheus (resolved by apt against the
# test-host image's own dpkg status), for monitoring.yml's vllm_fleet_monitoring_install on test
# hosts, which reach no Debian mirror (vllm_fleet_monitoring_debs points at this directory).
HOST_DEBS="${PROMETHEUS_HOST_DEBS:-/var/cache/vllm-fleet/prometheus-debs}"
HOST_IMAGE="${VLLM_FLEET_TESTBED_IMAGE:-vllm-fleet/host:bookworm}"
host_debs() {
  local id status
  id=$(docker image inspect --format '{{.Id}}' "$HOST_IMAGE")
  if [ -f "$HOST_DEBS/.image" ] && [ "$(cat "$HOST_DEBS/.image")" = "$id" ] && ls "$HOST_DEBS"/prometheus_*.deb >/dev/null 2>&1; then
    echo "prometheus debs for $HOST_IMAGE: $(ls "$HOST_DEBS"/*.deb | wc -l) (cached)"
    return 0
  fi
  rm -rf "$HOST_DEBS.tmp" && mkdir -p "$HOST_DEBS.tmp/partial"
  status=$(mktemp)
  docker run --rm --entrypoint cat "$HOST_IMAGE" /var/lib/dpkg/status >"$status"
  fetch() { apt-get -q -o Dir::State::status="$status" -o Dir::Cache::archives="$HOST_DEBS.tmp" -o Debug::NoLocking=1 \
              install --download-only -y --no-install-recommends prometheus >/dev/null; }
  fetch || { apt-get update -qq && fetch; }
  rm -f "$status" && rm -rf "$HOST_DEBS.tmp/partial" "$HOST_DEBS" && mv "$HOST_DEBS.tmp" "$HOST_DEBS"
  echo "$id" >"$HOST_DEBS/.image"
  echo "prometheus debs for $HOST_IMAGE: $(ls "$HOST_DEBS"/*.deb | wc -l)"
}
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  echo "prometheus: $(prometheus --version 2>&1 | head -1)"
  host_debs
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
host_debs
