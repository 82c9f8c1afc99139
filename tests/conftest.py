"""Test layers: ``unit/`` (pure: no torch, no servers; guarded by unit/conftest.py) and
``integration/`` (real servers); shared helpers in ``support/``. See docs/testing.md.

Locust patches the standard library for gevent when it is imported; that has to happen before
anything imports ssl (requests, urllib3, influxdb-client), as in every locustfile.
"""

from __future__ import annotations

import locust  # noqa: F401

#: the real InfluxDB and the observed run (streaming + collector) as session fixtures
pytest_plugins = ("tests.support.influx_fixture",)
