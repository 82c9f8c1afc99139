"""CPU accounting of a bench client process: its own, its children's, and server process trees.

A client's child processes are the client's cost, so `self_cpu` adds the live children's (psutil) to
``getrusage(RUSAGE_SELF)`` (which counts every thread: gRPC's and the native engine's).
"""

from __future__ import annotations

import resource

import psutil


def tree_cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
    return total


def children_cpu() -> tuple[float, float]:
    """This process's live children's CPU (user, system): children are the client's cost."""
    user = system = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        user, system = user + times.user, system + times.system
    return user, system


def self_cpu() -> tuple[float, float]:
    """This process's CPU (user, system), its live children's included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    child_user, child_system = children_cpu()
    return usage.ru_utime + child_user, usage.ru_stime + child_system
