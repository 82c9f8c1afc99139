"""Test hosts: Linux network namespaces joined by a bridge, made and removed by the tests.

Addresses come from 198.18.0.0/15, the range set aside for network benchmark tests (RFC 2544);
the hosts exist only inside this machine, for the length of a test module.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

SUBNET_PREFIX = "198.18.0."


def sh(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


@dataclass
class NetnsHosts:
    names: list[str]
    suffix: str = field(default_factory=lambda: f"{os.getpid() % 0xFFFF:04x}")
    addresses: dict[str, str] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"ilbr{self.suffix}"

    def __enter__(self) -> NetnsHosts:
        try:
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "link", "set", self.bridge, "up")
            for number, name in enumerate(self.names, start=1):
                namespace = f"il-{name}-{self.suffix}"
                outside, inside = f"ilv{self.suffix}{number}", f"ilp{self.suffix}{number}"
                sh("ip", "netns", "add", namespace)
                self.namespaces[name] = namespace
                sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
                sh("ip", "link", "set", inside, "netns", namespace)
                sh("ip", "link", "set", outside, "master", self.bridge, "up")
                address = f"{SUBNET_PREFIX}{number}"
                sh("ip", "netns", "exec", namespace, "ip", "addr", "add", f"{address}/24", "dev", inside)
                sh("ip", "netns", "exec", namespace, "ip", "link", "set", inside, "up")
                sh("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
                self.addresses[name] = address
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def run_in(self, name: str, command: list[str]) -> list[str]:
        """`command` prefixed so that it runs on host `name`."""
        return ["ip", "netns", "exec", self.namespaces[name], *command]

    def __exit__(self, *_: object) -> None:
        for namespace in self.namespaces.values():
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
