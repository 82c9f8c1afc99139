"""A free TCP port on loopback, for a server a test starts (or for an address where nothing listens).

The one implementation is the package's own (`inferload.launch.distributed.free_port`, below the
kernel's ephemeral range; a master's port and the InfluxDB launcher's are picked by it too).
"""

from __future__ import annotations

from inferload.launch.distributed import free_port

__all__ = ["free_port"]
