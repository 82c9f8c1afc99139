"""`wrk` (Debian package) as the HTTP ceiling: same endpoint, same bytes, its own CPU accounting."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

_REQUESTS = re.compile(r"(\d+) requests in ([\d.]+)(m?s)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")


def ensure_wrk() -> tuple[str | None, str]:
    """The wrk path, installing the Debian package when missing and allowed; else (None, why)."""
    path = shutil.which("wrk")
    if path:
        return path, "present"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, "wrk missing (install it: sudo apt-get install wrk)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=120", "wrk"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=300)
        done = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=120", "wrk"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    path = shutil.which("wrk")
    return (path, "installed with apt-get") if path else (None, f"apt-get install wrk failed: {done.stderr.strip()[-200:]}")


def lua_post_script(body: bytes, content_type: str) -> str:
    """A wrk script that POSTs `body` (escaped byte by byte: any bytes are safe)."""
    escaped = "".join(f"\\{b:03d}" for b in body)
    return f'wrk.method = "POST"\nwrk.body = "{escaped}"\nwrk.headers["Content-Type"] = "{content_type}"\n'


def run_wrk(wrk: str, url: str, script: Path, connections: int, seconds: float) -> dict[str, Any]:
    """One closed-loop wrk run (1 thread): requests, rps and its CPU per request."""
    command = [wrk, "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script), url]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # runs are sequential: the delta is wrk's
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=seconds + 30)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = done.stdout
    match = _REQUESTS.search(output)
    requests = int(match.group(1)) if match else 0
    duration = float(match.group(2)) / (1000.0 if match and match.group(3) == "ms" else 1.0) if match else wall
    non2xx = _NON_2XX.search(output)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "variant": "wrk",
        "requests": requests,
        "failures": int(non2xx.group(1)) if non2xx else 0,
        "wall_s": round(duration, 3),
        "rps": round(requests / duration, 1) if duration else 0.0,
        "client_cpu_s": round(cpu, 4),
        "client_cpu_us_per_request": round(cpu / requests * 1e6, 1) if requests else 0.0,
        "client_core_util": round(cpu / duration, 3) if duration else 0.0,
        "output_tail": output.strip().splitlines()[-3:],
    }
