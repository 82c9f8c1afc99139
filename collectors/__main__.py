"""`python -m collectors`: run the sidecar collector (see inferload/observe/collector.py)."""

import sys

from inferload.observe.collector import main

if __name__ == "__main__":
    sys.exit(main())
