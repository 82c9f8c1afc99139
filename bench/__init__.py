"""Benchmarks of the load generator itself (`make bench`); not part of the test suite.

`bench.run` starts the real local servers, measures each client variant in its own process
(`bench.client`), and writes `results/bench-<UTC time>/` (results.json, results.md).
"""
