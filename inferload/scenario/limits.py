"""The bounds a scenario must stay within, in one place (docs/scenarios.md lists them too).

Each bound refuses an input that ``inferload validate`` used to accept but that hangs or exhausts a
run: a billion users, a rate no scheduler keeps up with, a ramp of a billion steps, gigabytes of
payload per request, a 1 ms run or window, a scenario "file" that is ``/dev/zero``.
"""

from __future__ import annotations

import os

#: users of a closed-loop shape (steady, ramp, burst, stages) and senders of an open-loop one;
#: Locust spreads them over workers, but each is a greenlet holding its own client and payload
MAX_USERS = 100_000
MAX_IN_FLIGHT = MAX_USERS
#: users started or stopped per second (every user of the largest shape within one second)
MAX_SPAWN_RATE = 100_000.0
#: requests/s of an open-loop shape for the whole run (well above what Locust's senders reach)
MAX_RATE = 1_000_000.0
#: the burstiness of a ``gamma`` arrival law (coefficient of variation of its gaps; 1 is Poisson): at 10
#: the gamma's shape is 0.01 and most gaps are nearly 0
MAX_CV = 10.0
#: steps of a ramp (users or rate), and bursts of a rate-bursts shape over the run (each rate
#: change is a step the arrival scheduler looks up; a ramping-rate is built step by step up front)
MAX_STEPS = 1_000
#: bytes one input adds to a request (batch_size x shape)
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: bytes of all inputs of one request together (each process keeps one encoded copy per distinct request)
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: BYTES elements of one request (batch_size x shape): each is a Python object of ~100 bytes on top of
#: its length (13 M one-byte elements took 2 GB of client memory)
MAX_BYTES_ELEMENTS = 1_000_000
#: a small input file read whole (TorchServe's token_file, a PEM file): a few kilobytes in practice
MAX_SMALL_FILE_BYTES = 1024 * 1024
#: files a folder data set (or its pattern) may match; the matching stops there (a symlink loop is endless)
MAX_DATASET_FILES = 100_000
#: bytes of a target's pre-encoded requests from data sets (each process keeps one copy per target,
#: shared by the target's users): every sample of every data-set input, times how often it is sent
#: in one pass (batch_size / gcd(samples, batch_size)), plus the generated inputs of each request
MAX_DATASET_BYTES = 256 * 1024 * 1024
#: bytes of one answer a client buffers by default (a target's ``max_answer_bytes``): real answers are far
#: smaller; an endless or huge body fails its request ("answer larger than N bytes") instead of growing
#: the client without bound
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: the largest ``max_answer_bytes`` a target may set
MAX_ANSWER_BYTES = 4 * 1024 * 1024 * 1024
#: bytes of one answer a start check or a server-figures read takes (model metadata and config, a model
#: list, a metrics page, statistics): real ones are kilobytes; a bigger answer is refused, not buffered
MAX_SERVER_PAGE_BYTES = 16 * 1024 * 1024
#: grpcio's options for every channel inferload opens to read a server (metadata, config, statistics, trace
#: settings): answers bounded as the HTTP reads' are, and no transparent retries, which grpc-core makes
#: without end within the deadline when a server sends GOAWAY at once (seen: 3 GB in 15 s; without them
#: the call fails at once, "GOAWAY received")
SERVER_PAGE_GRPC_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_SERVER_PAGE_BYTES),
    ("grpc.max_send_message_length", MAX_SERVER_PAGE_BYTES),
    ("grpc.enable_retries", 0),
]
#: seconds one start check may take from its first byte sent to its answer's last (a server that
#: drips its answer a byte a second is cut off here, not after one timeout per read)
CHECK_DEADLINE_S = 15.0
#: requests per sequence of a Triton sequence model (``sequence.length``)
MAX_SEQUENCE_LENGTH = 1_000_000
#: sequences one user keeps open at once (``sequence.concurrent``); each holds a slot on the server
MAX_SEQUENCES_PER_USER = 1_000
#: digits of a whole number read from a file (a JSON number in a results file, a replay's sample or time,
#: a trace's stamp): none that a run needs has more than 20; Python reads at most 4,300 and a float
#: holds about 308, so a longer one is refused (or read as infinite) where it is read
MAX_NUMBER_DIGITS = 40
#: the shortest run
MIN_DURATION_S = 1.0
#: the longest duration of any key (duration, warm-up, stages, timeouts, ...): 30 days; 1.0e+308 ran forever
MAX_DURATION_S = 30 * 86_400.0
#: windows of one run (duration / window): each keeps a histogram per target for the run's end (~1 KB)
MAX_WINDOWS = 200_000
#: the shortest window of the per-window series (each window keeps a histogram per target)
MIN_WINDOW_S = 0.1
#: the largest scenario file (PyYAML reads about 150 KB/s in pure Python)
MAX_FILE_BYTES = 1024 * 1024
#: values in the YAML document, counting every use of an alias (a "billion laughs" stays small)
MAX_YAML_VALUES = 100_000
#: problems reported for one file; the rest are counted in a last line
MAX_PROBLEMS = 100
#: local worker processes of `inferload run --workers` per CPU core: each is a whole Locust process
#: (about 100 MB, and a core's share); more only slows the run down, far more exhausts the machine
MAX_LOCAL_WORKERS_PER_CORE = 4
#: workers on other machines (`--remote-workers`): one master keeps a connection and a report
#: stream per worker
MAX_REMOTE_WORKERS = 1_000
#: characters of a name (the scenario's, a target's): it becomes part of the run id, the results
#: folder's name and InfluxDB tags, and a file name has at most 255 bytes
MAX_NAME_CHARS = 100


def mib(size: int) -> str:
    """``67108864`` → ``'64 MiB'`` (for messages)."""
    return f"{size / (1024 * 1024):g} MiB"


def max_local_workers() -> int:
    """The most local worker processes this machine takes (``MAX_LOCAL_WORKERS_PER_CORE`` per core)."""
    return MAX_LOCAL_WORKERS_PER_CORE * (os.cpu_count() or 1)


#: the most runs of each server's capacity search in ``inferload demo`` (``--capacity-runs``)
DEMO_CAPACITY_RUNS = 7
