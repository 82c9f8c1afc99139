"""Where the CPU goes by role (`python -m bench.cpu_split`): every thread read from /proc, named by
role (the engine's pacer and tokio threads, the Python threads, the server), and its CPU and context
switches counted between two samples, a thread born in between counted whole."""

from __future__ import annotations

import os
import threading

from bench.cpu_split import ThreadSample, role, sample, split


def test_threads_are_named_by_their_role() -> None:
    assert role("client", "inferload-pacer") == "pacer"
    assert role("client", "inferload-engin") == "engine"  # /proc cuts names at 15 characters
    assert role("client", "python") == "python" and role("client", "locust") == "python"
    assert role("server", "refserver") == "server"


def test_this_process_s_threads_are_read_with_their_cpu_and_switches() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="probe")
    worker.start()
    try:
        seen = sample({"client": os.getpid()})
    finally:
        stop.set()
        worker.join()
    mine = {tid: read for (side, pid, tid), read in seen.items() if pid == os.getpid() and side == "client"}
    assert threading.get_native_id() in mine and worker.native_id in mine
    main_role, main = mine[threading.get_native_id()]
    assert main_role == "python" and main.cpu_s > 0 and main.voluntary + main.involuntary > 0


def test_the_split_is_the_difference_per_role_and_a_new_thread_counts_whole() -> None:
    before = {
        ("client", 1, 1): ("engine", ThreadSample(1.0, 10, 2)),
        ("server", 2, 5): ("server", ThreadSample(3.0, 0, 0)),
    }
    after = {
        ("client", 1, 1): ("engine", ThreadSample(1.5, 30, 4)),
        ("client", 1, 9): ("engine", ThreadSample(0.25, 5, 0)),  # born in the window
        ("server", 2, 5): ("server", ThreadSample(4.0, 1, 1)),
    }
    roles = split(before, after)
    assert roles["engine"] == {"cpu_s": 0.75, "voluntary": 25, "involuntary": 2, "threads": 2}
    assert roles["server"] == {"cpu_s": 1.0, "voluntary": 1, "involuntary": 1, "threads": 1}
