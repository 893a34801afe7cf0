"""A real multi-node Ray cluster on loopback, and the moto S3 server its nodes share (nodes share no disk).

Each node is a `ray start ... --block` process on 127.0.0.1 with its own raylet, as an operator starts them on
separate machines; each in its own process group, stopped by signalling that group (never `ray stop`, which
would stop every Ray instance on the machine). Used by the multi-node pretraining and make-shards tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bert_pipeline.stack.state import free_port

# The environment every node and the driver get (set before a node starts: its raylet passes it on to the
# workers).
NODE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
    "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
    # A lost node is declared dead after ~1.5 s instead of Ray's default ~30 s.
    "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}


class LoopbackCluster:
    """A head with 0 CPUs (the driver's node: no work lands there) and worker nodes added one by one."""

    def __init__(self, temp_dir: str, env: dict[str, str], dashboard: bool = False):
        self.temp_dir, self.env = temp_dir, env
        self.procs: dict[str, subprocess.Popen] = {}  # node name -> its `ray start --block`
        port = self._port()
        self.address = f"127.0.0.1:{port}"
        # The dashboard serves Ray's state API (which task ran on which node, how many attempts).
        self.dashboard_url = f"http://127.0.0.1:{self._port()}" if dashboard else None
        board = (["--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port",
                  self.dashboard_url.rsplit(":", 1)[1]] if dashboard else ["--include-dashboard", "false"])
        self._start("head", ["--head", "--port", str(port), "--num-cpus", "0", *board, "--temp-dir", temp_dir,
                             "--disable-usage-stats"])

    @staticmethod
    def _port() -> int:
        port = free_port()
        while 10002 <= port <= 19999:  # Ray's worker-port range: refused for the head
            port = free_port()
        return port

    def _start(self, name: str, args: list[str]) -> None:
        ray_bin = str(Path(sys.executable).with_name("ray"))
        self.procs[name] = subprocess.Popen([ray_bin, "start", "--block", "--node-ip-address", "127.0.0.1", *args],
                                            env=self.env, start_new_session=True, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)

    def add_worker(self, name: str) -> None:
        """A 1-CPU worker node, with a custom resource `name` that tells its node id apart."""
        self._start(name, ["--address", self.address, "--num-cpus", "1", "--resources", json.dumps({name: 1})])
        self.wait_for(lambda nodes: any(name in n["Resources"] for n in nodes))

    def wait_for(self, condition, timeout: float = 120.0) -> None:
        import ray

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ray.is_initialized() and condition([n for n in ray.nodes() if n["Alive"]]):
                return
            time.sleep(0.5)
        raise TimeoutError("Ray nodes did not reach the expected state")

    def node_id(self, name: str) -> str:
        import ray

        return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and name in n["Resources"])

    def name_of(self, node_id: str) -> str:
        import ray

        node = next(n for n in ray.nodes() if n["NodeID"] == node_id)
        return next(name for name in self.procs if name in node["Resources"])

    def nodes_running(self, title: str) -> set[str]:
        """Names of the nodes that run a process titled `title...` (Ray titles an actor's process
        `ray::<class>`, e.g. ray::RayTrainWorker), found in each node's process tree."""
        import psutil

        found = set()
        for name, proc in self.procs.items():
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            for child in children:
                try:
                    if (child.cmdline() or [""])[0].startswith(title):
                        found.add(name)
                except psutil.Error:
                    continue
        return found

    def kill_raylet(self, name: str) -> None:
        """SIGKILL the node's raylet, as when the machine vanishes; its workers die with it."""
        import psutil

        parent = psutil.Process(self.procs[name].pid)
        raylet = next(p for p in parent.children(recursive=True) if p.name() == "raylet")
        raylet.send_signal(signal.SIGKILL)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=20)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group

    def stop_all(self) -> None:
        for name in [n for n in self.procs if n != "head"] + ["head"]:
            if name in self.procs:
                self.stop(name)


@contextlib.contextmanager
def moto_s3(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """The moto S3 server on loopback, with NODE_ENV (and `extra_env`) set in this process, so the nodes started
    meanwhile inherit it; yields the endpoint URL. RAY_ADDRESS is unset: the tests choose their cluster."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in {"AWS_ENDPOINT_URL": f"http://{host}:{port}", **NODE_ENV, **(extra_env or {})}.items():
                mp.setenv(key, value)
            mp.delenv("RAY_ADDRESS", raising=False)
            yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def joined_cluster(workers: tuple[str, ...] = ("node_a", "node_b"), dashboard: bool = False
                   ) -> Iterator[LoopbackCluster]:
    """A fresh cluster (a 0-CPU head and 1-CPU `workers`) that this process joins as the driver; torn down
    after, whatever happened."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="rmn", dir="/tmp")  # socket paths must stay short
    nodes = None
    try:
        nodes = LoopbackCluster(temp_dir, dict(os.environ), dashboard=dashboard)
        deadline = time.monotonic() + 60
        while True:
            try:
                ray.init(address=nodes.address, include_dashboard=False, configure_logging=False, log_to_driver=True)
                break
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        for name in workers:  # one after another: simultaneous starts race for ports
            nodes.add_worker(name)
        yield nodes
    finally:
        ray.shutdown()
        if nodes is not None:
            nodes.stop_all()
        shutil.rmtree(temp_dir, ignore_errors=True)
