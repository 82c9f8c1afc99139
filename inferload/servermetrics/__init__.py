"""The servers' own counters: one reader and one parser per server, one module of arithmetic.

    snapshot.py     ServerSnapshot: one reading of a model's counters, in server-neutral names
    http_client.py  the one HTTP client (a requests session, timeouts, ScrapeError messages);
                    Prometheus text → samples by family name (one rule for `_total`)
    triton.py       Triton: statistics API (HTTP or gRPC) and metrics page → ServerSnapshot
    torchserve.py   TorchServe: /metrics (with inferload's handler counters) → ServerSnapshot
    bentoml.py, kserve.py  BentoML's and KServe's metrics pages → ServerSnapshot
    figures.py      two readings → queue/compute/request ms, batch sizes, rates (the one place)
    readers.py      ServerReader per target, snapshot() and server_side() for summary.json; which
                    targets read the same counters (one model on one server): read once, marked shared

Used by the run (`run/server_side.py`: summary.json, windows.csv) and by the collector's sources (InfluxDB).
"""
