#!/usr/bin/env bash
# Installs the Debian packages inferload needs, when they are missing.
#   install-system-deps.sh servers   a JDK 11+ for TorchServe (what `make demo` needs)
#   install-system-deps.sh test      + InfluxDB (Debian's 1.x) for the streaming, collector and
#                                      dashboard tests, docker-compose (1.29, no engine) to validate
#                                      docker-compose.yml, headless Chromium to check report.html,
#                                      iproute2 for the network-namespace test hosts, openssl for
#                                      the TLS tests' throwaway certificates
#   install-system-deps.sh bench     + the peers `make bench` compares: wrk, hey, h2load (nghttp2-client)
set -euo pipefail

purpose=${1:-servers}
case "$purpose" in servers|test|bench) ;; *) echo "usage: $0 servers|test|bench" >&2; exit 2 ;; esac

missing=()
need() {  # need COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}
need java default-jdk-headless
if [ "$purpose" = test ]; then
  need influxd influxdb
  need docker-compose docker-compose
  need chromium chromium
  need ip iproute2
  need openssl openssl
fi
if [ "$purpose" = bench ]; then
  need wrk wrk
  need hey hey
  need h2load nghttp2-client
  need influxd influxdb
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "inferload needs these Debian packages: ${missing[*]} (run: sudo apt-get install --no-install-recommends ${missing[*]})" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
