"""Free loopback TCP ports for the services a machine starts, and the range Ray keeps for its workers: the one
place either is written (the stack's Ray head and its port checks, the loopback test clusters, the tests'
servers)."""

from __future__ import annotations

import socket
from collections.abc import Container

RAY_WORKER_PORTS = range(10002, 20000)  # `ray start`'s default --min-worker-port 10002 .. --max-worker-port 19999


def free_ports(count: int = 1, avoid: Container[int] = ()) -> list[int]:
    """`count` distinct TCP ports nothing listens on now (the OS's choices), none of `avoid` and none in Ray's
    worker-port range. Distinct because the OS hands a port out again until something binds it: a port given to
    a service that has not started yet is free to the OS too (CI saw Ray's dashboard agent given the dashboard's
    port, and `ray start` refused both)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in avoid and port not in RAY_WORKER_PORTS and port not in ports:
            ports.append(port)
    return ports
