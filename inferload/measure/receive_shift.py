"""The test-only receive-time shift: the one place that names it (docs/calibration.md, "The test hook").

``INFERLOAD_TEST_RECEIVE_SHIFT_US`` (whole microseconds) makes the client wrong by a known amount:
every receive time the client records is that much later, in the Python transport
(`inferload.users.client`, read once per client) and in the native engine (`receive_shift_ns` in
``native/src/engine/clock.rs``, read once per process). A calibration run with it must report
every latency figure that much too high: the test that shows the calibration can see an error.
Never set it outside tests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

RECEIVE_SHIFT_ENV = "INFERLOAD_TEST_RECEIVE_SHIFT_US"


def receive_shift_us(environ: Mapping[str, str] | None = None) -> int:
    """The shift in whole µs (0 when the variable is absent, empty, negative or not a whole number)."""
    text = (os.environ if environ is None else environ).get(RECEIVE_SHIFT_ENV, "").strip()
    return int(text) if text.isdigit() else 0
