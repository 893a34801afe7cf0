"""A real multi-node Ray cluster on one machine (loopback), and the moto S3 server its nodes share (nodes of a real
cluster share no disk). The multi-node tests (tests/multinode_cluster.py) and the elastic-recovery benchmark
(evaluation.elastic_recovery) run on it.

Each node is a `ray start ... --block` process on 127.0.0.1 with its own raylet, as an operator starts them on
separate machines; each in its own process group, stopped by signalling that group (never `ray stop`, which
would stop every Ray instance on the machine). A node is lost by SIGKILLing its raylet (the machine vanishes),
drained through Ray's GCS drain API (what `ray drain-node` and a cloud's spot notice send), and started again
under the same name (a new raylet, so a new node id, with the same resources).

Several Ray instances on one machine (other tests, other jobs) must not see each other. Ray Train's
PlacementGroupCleaner asks the state API whether the run's controller is alive, at the address Ray finds by
itself: RAY_ADDRESS, else the machine's latest `ray start` or any GCS it finds; a head without a dashboard still
records the default dashboard port 8265 in its GCS. Another instance's dashboard on 8265 then answers "no such
actor", and the cleaner removes the placement group of a healthy run, killing its workers (seen on this machine
while another job's local Ray was up). So every node here gets RAY_ADDRESS of its own cluster, and the head a
dashboard port of its own.
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
from collections.abc import Callable, Iterator
from pathlib import Path

from bert_core.launch.ports import free_ports

# The environment every node and the driver get (set before a node starts: its raylet passes it on to the
# workers).
NODE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
    "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
    # A lost node is declared dead after ~1.5 s instead of Ray's default ~30 s.
    "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}

def drain_node(node_id: str, deadline_s: float, message: str) -> int:
    """Drain a node as a spot/preemption notice does (Ray's GCS drain API, reason PREEMPTION, a deadline
    `deadline_s` seconds ahead), from any process connected to the cluster. Returns the deadline (epoch ms)."""
    import ray
    from ray.core.generated import autoscaler_pb2

    deadline_ms = int((time.time() + deadline_s) * 1000)
    accepted, why = ray._private.worker.global_worker.gcs_client.drain_node(
        node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"), message, deadline_ms)
    if not accepted:
        raise RuntimeError(f"Ray refused to drain node {node_id}: {why}")
    return deadline_ms


class LoopbackCluster:
    """A head with 0 CPUs (the driver's node: no work lands there) and worker nodes added one by one."""

    def __init__(self, temp_dir: str, env: dict[str, str], dashboard: bool = False):
        self.temp_dir = temp_dir
        self.procs: dict[str, subprocess.Popen] = {}  # node name -> its `ray start --block`
        self.worker_cpus: dict[str, int] = {}
        port, dashboard_port = free_ports(2)
        self.address = f"127.0.0.1:{port}"
        self.env = {**env, "RAY_ADDRESS": self.address}  # see the module doc
        # The dashboard serves Ray's state API (which task ran on which node, how many attempts).
        self.dashboard_url = f"http://127.0.0.1:{dashboard_port}" if dashboard else None
        board = ["--include-dashboard", "true" if dashboard else "false", "--dashboard-port", str(dashboard_port)]
        if dashboard:
            board += ["--dashboard-host", "127.0.0.1"]
        self._start("head", ["--head", "--port", str(port), "--num-cpus", "0", *board, "--temp-dir", temp_dir,
                             "--disable-usage-stats"])

    def _start(self, name: str, args: list[str]) -> None:
        ray_bin = str(Path(sys.executable).with_name("ray"))
        self.procs[name] = subprocess.Popen([ray_bin, "start", "--block", "--node-ip-address", "127.0.0.1", *args],
                                            env=self.env, start_new_session=True, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)

    def add_worker(self, name: str, cpus: int = 1) -> None:
        """A worker node with `cpus` CPUs and a custom resource `name` that tells its node id apart."""
        self.worker_cpus[name] = cpus
        self._start(name, ["--address", self.address, "--num-cpus", str(cpus), "--resources", json.dumps({name: 1})])
        self.wait_for(lambda nodes: any(name in n["Resources"] for n in nodes))

    def ready(self, name: str, timeout: float = 120.0) -> None:
        """Wait until node `name` runs a 1-CPU task: its raylet starts workers, and its CPU is free (a node listed
        alive may not start workers yet, and an earlier run's workers may still hold its CPU)."""
        import ray

        @ray.remote(num_cpus=1, resources={name: 1}, max_retries=0)
        def probe() -> str:
            return ray.get_runtime_context().get_node_id()

        ray.get(probe.remote(), timeout=timeout)
        # Ray Train's elastic policy sizes a new group by what Ray's AutoscalingCoordinator (one detached actor per
        # cluster) has seen of the nodes, which it refreshes every 20 s: a run started just after a node joins would
        # begin without it (and grow later). Fine on a real cluster; a test that describes its run's first group
        # has the coordinator look now. Private API, so only here.
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            get_or_create_autoscaling_coordinator,
        )

        ray.get(get_or_create_autoscaling_coordinator().get_reserved_resources.remote("loopback-ready", recompute=True),
                timeout=timeout)

    def alive(self, name: str) -> bool:
        """Whether a live node is called `name`."""
        import ray

        return any(n["Alive"] and name in n["Resources"] for n in ray.nodes())

    def restart_worker(self, name: str) -> None:
        """Start the lost node `name` again, as a replacement machine joins: once the cluster has marked the old
        one dead, its `ray start` is stopped and a new one joins with the same resources (a new node id)."""
        self.wait_for(lambda nodes: not any(name in n["Resources"] for n in nodes))
        if name in self.procs:
            self.stop(name)
        self.add_worker(name, self.worker_cpus.get(name, 1))

    def wait_for(self, condition: Callable[[list[dict]], bool], timeout: float = 120.0) -> None:
        """Wait until `condition(live nodes)` holds (ray.nodes() of the driver's connection)."""
        import ray

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ray.is_initialized() and condition([n for n in ray.nodes() if n["Alive"]]):
                return
            time.sleep(0.5)
        raise TimeoutError("Ray nodes did not reach the expected state")

    def node_id(self, name: str) -> str:
        """The id of the live node called `name`."""
        import ray

        return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and name in n["Resources"])

    def name_of(self, node_id: str) -> str:
        """The name of the node (live or dead) with this id."""
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

    def drain(self, name: str, deadline_s: float, message: str = "spot instance reclaimed (loopback)") -> int:
        """A preemption notice for node `name` with a deadline `deadline_s` ahead; returns it (epoch ms)."""
        return drain_node(self.node_id(name), deadline_s, message)

    def stop(self, name: str) -> None:
        """Stop the node's process group: SIGTERM, and SIGKILL after a few seconds (a `ray start --block` often
        takes more than 20 s to shut down on SIGTERM; these nodes keep nothing worth a clean shutdown)."""
        proc = self.procs.pop(name)
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group

    def stop_all(self) -> None:
        """The worker nodes (all signalled at once: each takes seconds to shut down), then the head."""
        workers = [n for n in self.procs if n != "head"]
        for name in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.procs[name].pid, signal.SIGTERM)
        for name in [*workers, "head"]:
            if name in self.procs:
                self.stop(name)


@contextlib.contextmanager
def environment(values: dict[str, str], unset: tuple[str, ...] = ()) -> Iterator[None]:
    """os.environ with `values` set and `unset` removed, restored afterwards."""
    saved = {key: os.environ.get(key) for key in (*values, *unset)}
    os.environ.update(values)
    for key in unset:
        os.environ.pop(key, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def moto_s3(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """The moto S3 server on loopback, with NODE_ENV (and `extra_env`) set in this process, so the nodes started
    meanwhile inherit it; yields the endpoint URL. RAY_ADDRESS is unset here: the caller chooses its cluster."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # moto comes with the `test` extra
        raise RuntimeError("the loopback S3 server needs moto[server] (pip install -e '.[test]')") from exc

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    try:
        with environment({"AWS_ENDPOINT_URL": f"http://{host}:{port}", **NODE_ENV, **(extra_env or {})},
                         unset=("RAY_ADDRESS",)):
            yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def joined_cluster(workers: tuple[str, ...] = ("node_a", "node_b"), dashboard: bool = False,
                   log_to_driver: bool = True) -> Iterator[LoopbackCluster]:
    """A fresh cluster (a 0-CPU head and 1-CPU `workers`) that this process joins as the driver (printing what
    Ray's processes log, with `log_to_driver`); torn down after, whatever happened."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="rmn", dir="/tmp")  # socket paths must stay short
    nodes = None
    try:
        nodes = LoopbackCluster(temp_dir, dict(os.environ), dashboard=dashboard)
        deadline = time.monotonic() + 60
        while True:
            try:
                ray.init(address=nodes.address, include_dashboard=False, configure_logging=False,
                         log_to_driver=log_to_driver)
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
