#!/usr/bin/env bash
# Installs the system packages inferload's local servers and tests need, when they are missing.
#  - a JDK 11+ for TorchServe
#  - InfluxDB (Debian's 1.x) for the streaming/collector/dashboard tests
#  - docker-compose (1.29, no engine needed) to validate docker-compose.yml in the tests
set -euo pipefail

missing=()
if ! command -v java >/dev/null 2>&1; then
  missing+=(default-jdk-headless)
fi
if ! command -v influxd >/dev/null 2>&1; then
  missing+=(influxdb)
fi
if ! command -v docker-compose >/dev/null 2>&1; then
  missing+=(docker-compose)
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "inferload needs these Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
