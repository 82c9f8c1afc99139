"""Server-side statistics against the real servers: snapshots count exactly the requests sent,
work under gevent like a Locust process, and fail fast and clearly when nothing listens.
(The parsing of saved captures and the figures are pinned in tests/unit/test_servermetrics.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from inferload.errors import ScrapeError
from inferload.local.models.definitions import get_spec
from inferload.local.servers.manager import torchserve_infer, triton_infer
from inferload.local.servers.ports import ServerPorts
from inferload.servermetrics.readers import server_side, snapshot
from tests.support.waiting import wait_until

SERVER_SIDE_KEYS = {"queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size", "batch_size_histogram", "requests"}


@pytest.mark.parametrize("kind", ["triton-http", "triton-grpc", "torchserve-rest"])
def test_unreachable_server_is_a_quick_scrape_error_that_says_refused(kind):
    port = ServerPorts.free().triton_http  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ScrapeError, match="connection refused"):
        snapshot(kind, f"127.0.0.1:{port}", "cnn", metrics_url=f"http://127.0.0.1:{port}/metrics")
    assert time.monotonic() - started < 10


# ---- against the real servers ---------------------------------------------------------------


def targets(ports: ServerPorts) -> dict[str, tuple[str, str | None]]:
    return {
        "triton-http": (f"127.0.0.1:{ports.triton_http}", None),
        "triton-grpc": (f"127.0.0.1:{ports.triton_grpc}", None),
        "torchserve-rest": (f"http://127.0.0.1:{ports.ts_inference}", f"http://127.0.0.1:{ports.ts_metrics}/metrics"),
    }


@pytest.mark.parametrize("kind", ["triton-http", "triton-grpc", "torchserve-rest"])
def test_diff_on_the_real_server_counts_exactly_the_requests_sent(local_servers, kind):
    address, metrics_url = targets(local_servers.ports)[kind]
    spec = get_spec("cnn")
    data = np.full((1, *spec.input_shape), 0.5, dtype=np.float32)
    if kind.startswith("triton"):
        call = lambda: triton_infer(local_servers.ports.triton_http, spec, data)  # noqa: E731
    else:
        call = lambda: torchserve_infer(local_servers.ports.ts_inference, spec, data)  # noqa: E731
    before = snapshot(kind, address, "cnn", None, metrics_url)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: call(), range(64)))

    def counted() -> dict | None:
        """The diff once the server has counted 64 requests (or more): Triton counts a batch after
        it has answered it, so right after the last answer its last batch may not be in yet (a
        clean clone read 62 beside two shards)."""
        side = server_side(before, snapshot(kind, address, "cnn", None, metrics_url))
        return side if sum(int(size) * count for size, count in side["batch_size_histogram"].items()) >= 64 else None

    side = wait_until(counted, 10, f"{kind}'s statistics to count the 64 requests sent")
    assert set(side) == SERVER_SIDE_KEYS
    histogram = side["batch_size_histogram"]
    assert sum(int(size) * count for size, count in histogram.items()) == 64  # each one once, no more
    assert side["avg_batch_size"] == pytest.approx(64 / sum(histogram.values()))
    assert side["request_ms_avg"] >= side["queue_ms_avg"] >= 0
    assert side["compute_ms_avg"] > 0


GEVENT_SCRIPT = """
from gevent import monkey; monkey.patch_all()
import grpc.experimental.gevent as grpc_gevent; grpc_gevent.init_gevent()
import json, sys
from inferload.servermetrics.readers import snapshot
targets = json.loads(sys.argv[1])
print(json.dumps({kind: snapshot(kind, a, "tiny", None, m).counters for kind, (a, m) in targets.items()}))
"""


def test_snapshot_works_under_gevent_like_a_locust_process(local_servers):
    proc = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, json.dumps(targets(local_servers.ports))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    counters = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counters["triton-http"] == counters["triton-grpc"]
    assert counters["triton-http"]["inferences"] >= 1
    assert counters["torchserve-rest"]["requests"] >= 1
