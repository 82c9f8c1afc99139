#!/usr/bin/env bash
# Builds the native extension (native/, Rust) in release with maturin and puts its module next to
# the package: inferload/_native.abi3.so (ignored by git; setup.py ships it in the wheel).
#   build-native.sh PYTHON
# `make build` calls it when cargo is present and native/ changed since the last build. maturin
# comes from PATH, else from PYTHON's environment, else it is installed there (constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:?usage: build-native.sh PYTHON}
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")

if command -v maturin >/dev/null 2>&1; then
  maturin=(maturin)
else
  if ! "$python" -m maturin --version >/dev/null 2>&1; then
    "$python" -m pip install --quiet -c constraints.txt maturin
  fi
  maturin=("$python" -m maturin)
fi

wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
# abi3 (Python >= 3.10): one module for every interpreter; a plain linux tag, nothing repaired
(cd native && "${maturin[@]}" build --release --locked --quiet --interpreter "$python" --compatibility linux --out "$wheels")
"$python" - "$wheels" <<'PY'
import pathlib, sys, zipfile

[wheel] = pathlib.Path(sys.argv[1]).glob("*.whl")
with zipfile.ZipFile(wheel) as archive:
    # maturin may place it as inferload/_native.abi3.so or as _native/_native.abi3.so: the same module
    [member] = [name for name in archive.namelist() if name.rsplit("/", 1)[-1].startswith("_native.") and name.endswith(".so")]
    target = pathlib.Path("inferload/_native.abi3.so")
    partial = target.with_suffix(".so.partial")
    partial.write_bytes(archive.read(member))
    partial.replace(target)  # a running process keeps the module it loaded
print(f"built {target} ({target.stat().st_size // 1024} KiB) from {wheel.name}")
PY
