"""The capacity of streams and of users against the reference server, whose truth is known (the
rates of tensor requests: test_capacity.py; the server, the steps and how an answer is read:
tests/support/capacity_search.py). The answer's 95 % interval must reach the truth band, never a
time.

- Streams under a goodput bound: a chat generation holds its slot for all its content events (each
  one hold after the last), so the capacity is N / (mean generation), and with evenly spaced arrivals
  the time to the first token is one hold up to it and grows with the queue past it: the share of
  requests meeting a TTFT threshold of a few holds falls from all to few at the same cliff.
- Users (closed loop): with u users every slot-round serves N, so the p99 is the hold times
  ceil(u / N), a step up every N users: the truth is the most users whose rounds stay under the bound.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from tests.support.capacity_search import SERVER, SLOTS, evidence, reaches, served_hold_ms, sweep
from tests.support.reference_server import reference_server, reference_target
from tests.support.scenario_factory import write_scenario

STREAM_EVENTS, STREAM_HOLD_MS, TTFT_GOOD_MS = 4, 10.0, 50.0


def test_the_streams_capacity_under_a_goodput_bound_contains_the_cliff_of_evenly_spaced_arrivals(tmp_path: Path):
    """Chat streams of 4 events 10 ms apart in 4 slots (about 100 generations/s); a request is good
    when its first token comes within 50 ms, and 90 % must be: the search answers the rate where the
    queue starts, bound by goodput, and sweep.json says each rate's share of good requests."""
    server_keys: dict[str, Any] = {
        "delay": {"law": "fixed", "ms": STREAM_HOLD_MS},
        "concurrency": SLOTS,
        "stream_responses": STREAM_EVENTS,
    }
    with reference_server(**server_keys) as server:
        target = {
            "name": "chat",
            "kind": "openai-chat",
            "address": server.http_url,
            "model": "identity",
            "generation": {"goodput": {"ttft_ms": TTFT_GOOD_MS}},
        }
        shape = {"kind": "constant-rate", "rate": 50, "max_in_flight": 256}
        scenario = write_scenario(tmp_path, {"name": "streams", "duration": "30s", "targets": [target], "shape": shape})
        search = ["--find-max-rps", "--start-rate", "60", "--precision", "20", "--max-steps", "6", "--max-unsent", "0.05"]
        result, output = sweep(scenario, tmp_path / "out", *search, "--slo", "min_goodput_pct=90", "--no-verify")
        truth = SLOTS / (served_hold_ms(server) / 1000.0)
    capacity = result["capacity"]
    assert 0.7 * 1000 / (STREAM_EVENTS * STREAM_HOLD_MS) * SLOTS <= truth <= 1000 / (STREAM_EVENTS * STREAM_HOLD_MS) * SLOTS
    assert reaches(capacity["interval_rps"], 0.9 * truth, 1.05 * truth), f"truth {truth}\n{evidence(result)}"
    assert capacity["binding"]["constraint"] in ("goodput", "saturated", "queue"), capacity["binding"]
    if capacity["binding"]["constraint"] == "goodput":  # the threshold it broke named: the queue delays the first token
        assert any(words.startswith("TTFT p90 ") for words in capacity["binding"]["over"]), capacity["binding"]
    assert "goodput ≥ 90 % of requests" in capacity["bounds"]
    below = [level for level in capacity["levels"] if level["rate"] <= 0.8 * truth]
    assert below and all(level["goodput_pct"] >= 90 for level in below), evidence(result)
    assert all(level["goodput_pct_low"] <= level["goodput_pct"] <= level["goodput_pct_high"] for level in below)
    assert all(step["goodput_pct"] is not None for step in result["steps"])  # sweep.json's steps (and sweep.csv)
    assert "goodput % of requests [95 % interval]" in (tmp_path / "out" / "sweep.html").read_text()
    assert "capacity under the SLO: " in output and re.search(r", goodput \d+\.\d %, ", output)  # each step's line


USERS_BOUND_MS = 130.0


def test_the_most_users_under_the_slo_is_found_between_the_two_counts_of_the_servers_step(tmp_path: Path):
    """Closed loop, 4 slots of 20 ms: with u users every slot-round serves 4, so the p99 is the hold
    times ceil(u / 4) (a request waits for the rounds ahead of it), a step up every 4 users. Under
    p99 <= 130 ms the truth is the most users whose rounds x the server's mean hold stay under it (24 at
    20.0 ms); the answer's interval must reach within one round (4 users) of it, every level a whole
    count, sweep.json and the console in users."""
    with reference_server(**SERVER) as server:
        target = reference_target("reference", "triton-grpc", server.grpc_address, timeout="10s")
        scenario = write_scenario(
            tmp_path, {"name": "users", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
        )
        search = ["--find-max-users", "--start-users", "16", "--precision", "20", "--max-steps", "6", "--no-verify"]
        result, output = sweep(scenario, tmp_path / "out", *search, "--slo", f"p99_ms={USERS_BOUND_MS:g}")
        hold_ms = served_hold_ms(server)
    truth = max(users for users in range(1, 200) if math.ceil(users / SLOTS) * hold_ms <= USERS_BOUND_MS)
    capacity = result["capacity"]
    lines = "\n".join(f"  {level['users']:g} users {level['verdict']}: p99 {level.get('p99_ms')}" for level in capacity["levels"])
    assert capacity["unit"] == "users" and result["plan"]["mode"] == "find-max-users"
    assert reaches(capacity["interval_users"], truth - SLOTS, truth + SLOTS), f"truth {truth} (hold {hold_ms:.2f} ms)\n{lines}"
    assert all(step["level"] == int(step["level"]) for step in result["steps"])
    # 16 passes (p99 80 ms): doubled; a run the noisy machine spoiled or left unsure is measured again first
    assert list(dict.fromkeys(step["level"] for step in result["steps"]))[:2] == [16, 32]
    shapes = sorted((tmp_path / "out" / "steps").glob("*/scenario.yaml"))
    assert len(shapes) == len(result["steps"]) and all("kind: steady" in path.read_text() for path in shapes)
    passed = [level["users"] for level in capacity["levels"] if level["verdict"] == "pass"]
    assert passed and max(passed) <= truth + SLOTS, lines  # nothing a round over the truth passes
    assert re.search(r"capacity under the SLO: (at least )?\d+ users", output) and "req/s passed" not in output
    assert "Each user count, all its runs pooled" in (tmp_path / "out" / "sweep.html").read_text()
