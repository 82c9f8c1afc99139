"""`python -m collectors`: run the sidecar collector (see inferload/collector.py)."""

import sys

from inferload.collector import main

if __name__ == "__main__":
    sys.exit(main())
