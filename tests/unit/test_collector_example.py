"""The sidecar's example config (collectors/example.yaml, used by docker-compose.yml) loads."""

from __future__ import annotations

from tests.support.system_tools import REPO


def test_the_collectors_example_config_is_valid() -> None:
    from inferload.observe.collector import load_collector_config

    config = load_collector_config(REPO / "collectors" / "example.yaml")
    assert [s.kind for s in config.sources] == ["triton", "torchserve", "nvml"]
