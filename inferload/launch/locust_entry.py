"""`python -m inferload.launch.locust_entry ARGS` is `locust ARGS`, with SIGINT and SIGTERM held from its
first line (`inferload.run.early_signals`) until inferload's `RunStopper` takes them.

The CLI starts every Locust process this way (a local run, a master, its workers): Locust's own
imports (gevent, zope.interface, zmq) take about half a second, and a signal that landed there was a
KeyboardInterrupt traceback in a sweep's or tune's step log. Only this module and the standard
library are imported before Locust's, which monkey-patches with gevent as `python -m locust` does.
"""

from __future__ import annotations

import sys

from inferload.run import early_signals


def main() -> None:
    early_signals.hold()
    from locust.main import main as locust_main

    sys.argv[0] = "locust"
    locust_main()


if __name__ == "__main__":
    main()
