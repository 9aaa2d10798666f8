#!/usr/bin/env bash
# The Docker registry binary of Debian's docker-registry package (distribution 2.8), extracted
# (NOT installed: the package's init script would start a registry on all interfaces) to
#   /opt/vllm-fleet-testbed/registry/usr/bin/docker-registry
# tests/e2e/test_image_digest.py runs it on 127.0.0.1 only, for the length of the test, to
# pull an image by digest (no registry is reachable from here otherwise).
# Idempotent: a present binary is left alone.
set -euo pipefail
DEST=${VLLM_FLEET_REGISTRY_DIR:-/opt/vllm-fleet-testbed/registry}
BIN=$DEST/usr/bin/docker-registry
log() { echo "[registry-binary] $*"; }
if [[ -x $BIN ]]; then
    log "$BIN present ($("$BIN" --version 2>/dev/null | head -1)); nothing to do"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"      # apt's _apt user downloads into it
cd "$work"
if ! apt-get download docker-registry >/dev/null 2>&1; then
    apt-get update -qq
    apt-get download docker-registry >/dev/null
fi
mkdir -p "$DEST"
dpkg-deb -x docker-registry_*.deb "$work/root"
install -D -m 0755 "$work/root/usr/bin/docker-registry" "$BIN"
log "extracted $BIN ($("$BIN" --version 2>/dev/null | head -1))"
