"""py-spy profiles of one client variant (bench-only; `pip install -r bench/requirements.txt`).

`py-spy record --format raw` writes collapsed stacks ("frame;frame;frame count"); the summary
is the share of samples per leaf function (self time) and per module file (inclusive).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inferload.paths import REPO_ROOT

TOP = 15


def summarise_collapsed(text: str) -> dict[str, Any]:
    """Self-time share per leaf frame and inclusive share per file, from collapsed stacks."""
    leaves: Counter[str] = Counter()
    files: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        leaves[frames[-1]] += count
        for name in {_file_of(frame) for frame in frames}:
            files[name] += count
    if not total:
        return {"samples": 0, "self": [], "inclusive_by_file": []}
    return {
        "samples": total,
        "self": [[frame, round(n / total, 4)] for frame, n in leaves.most_common(TOP)],
        "inclusive_by_file": [[name, round(n / total, 4)] for name, n in files.most_common(TOP * 2)],
    }


def _file_of(frame: str) -> str:
    # py-spy frames look like "function (path/to/file.py:123)"
    inside = frame.rpartition("(")[2].rstrip(")")
    path = inside.rpartition(":")[0] or inside
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def profile_variant(bench: Any, spec: Any, out_dir: Path) -> dict[str, Any]:
    """Run `bench.client` under py-spy (200 Hz, idle samples dropped); the summary of its stacks."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        return {"error": "py-spy missing: pip install -r bench/requirements.txt"}
    bench.runs += 1
    spec_path = bench.work_dir / f"spec-{bench.runs}.json"
    out_path = bench.work_dir / f"out-{bench.runs}.json"
    raw_path = out_dir / f"profile-{spec.variant}.txt"
    spec_path.write_text(json.dumps(asdict(spec)))
    done = subprocess.run(
        [
            py_spy,
            "record",
            "--format",
            "raw",
            "--rate",
            "200",
            "--native",
            "-o",
            str(raw_path),
            "--",
            sys.executable,
            "-m",
            "bench.client",
            str(spec_path),
            str(out_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=spec.timeout_s + 60,
    )
    if done.returncode != 0 or not raw_path.exists():
        return {"error": f"py-spy failed (exit {done.returncode}): {done.stderr.strip()[-300:]}"}
    summary = summarise_collapsed(raw_path.read_text())
    summary["raw"] = raw_path.name
    if out_path.exists():
        summary["measurement"] = json.loads(out_path.read_text())
    return summary
