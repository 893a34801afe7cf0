"""Joining Ray from a bert-pipeline process: the cluster at RAY_ADDRESS, or a fresh local instance.

RAY_ADDRESS has two forms. The GCS form (`host:6379`, `ray://host:10001`, `auto`) names a cluster a
process joins as a driver: that is what this module does. The dashboard form (`http://host:8265`) names
a job server: the Airflow operators submit steps there (operators.ray_jobs), and `ray job submit` does
the same from a shell, but a driver cannot join through it. Ray's own error for that is about a
malformed GCS address; ours says what to do instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

from bert_core import logs
from bert_core.errors import BertPipelineError

log = logging.getLogger(__name__)

API_SERVER_ENV = "RAY_API_SERVER_ADDRESS"  # Ray's state API and job client read it before RAY_ADDRESS

# Environment the workers need from the driver. Ray starts workers from the raylet, not from the driver,
# so nothing of the driver's is inherited (on a cluster, or on a Ray head started by other means, such as
# `stack up`). Credentials are deliberately not forwarded: runtime envs and trial configs are visible in
# the Ray dashboard; nodes get them from their own environment or instance role. MLFLOW_RUN_CONTEXT: MLflow's
# tags for every run a process starts (the runs a worker starts, e.g. a search's trials, carry the driver's).
FORWARDED_ENV = ("MLFLOW_TRACKING_URI", "BERT_PIPELINE_CACHE", "BERT_MODEL_STORE", "AWS_ENDPOINT_URL",
                 "AWS_DEFAULT_REGION", "AWS_REGION", "AIRFLOW_CTX_DAG_RUN_ID", "GIT_SHA", "HF_HUB_OFFLINE",
                 "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "MLFLOW_RUN_CONTEXT")


def forwarded_env() -> dict[str, str]:
    """The driver's values of FORWARDED_ENV that are set."""
    return {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}


def worker_env() -> dict[str, str]:
    """What a training or search worker gets from its driver: FORWARDED_ENV, and the driver's home, so the
    embedded defaults (tracking store, caches) are the driver's, not the raylet's. MLflow's artifact progress bars
    are off (unless the driver's environment says otherwise): a worker's output is a log, never a terminal, and
    rank 0's log_model printed eight frames of `Downloading artifacts: 100%|...` into every run's log."""
    from bert_core.io.tracking import PROGRESS_BAR_ENV, pipeline_home

    return {PROGRESS_BAR_ENV: os.environ.get(PROGRESS_BAR_ENV) or "false", **forwarded_env(),
            "BERT_PIPELINE_HOME": str(pipeline_home())}


def cluster_address() -> str | None:
    """RAY_ADDRESS when it names a cluster to join; None for a local instance; an error for a job server URL."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if re.match(r"https?://", address):
        raise BertPipelineError(
            f"RAY_ADDRESS={address} is a Ray dashboard (job server) URL: a process joins a cluster by its GCS "
            "address (host:6379, or ray://host:10001). Either set RAY_ADDRESS to that, or submit the command "
            f"as a job: ray job submit --address {address} --working-dir . -- bert-pipeline ...")
    return address or None


# How long a driver waits for a cluster's head to accept connections (a head restarting after a spot loss comes
# back within this); then the task fails and Airflow's retries take over. Ray's own wait for an absent head is
# 20 tries of ~40 s each.
HEAD_WAIT_S = 60.0


def wait_for_head(address: str, timeout: float | None = None) -> None:
    """A ConnectionError (retryable: the head may be restarting) naming the address when nothing accepts TCP
    connections at the GCS address HOST:PORT within `timeout` seconds (default HEAD_WAIT_S); other forms (auto,
    ray://) are left to Ray."""
    import socket
    import time

    match = re.fullmatch(r"([^:/\s]+):(\d+)", address)
    if not match:
        return
    deadline = time.monotonic() + (HEAD_WAIT_S if timeout is None else timeout)
    while True:
        try:
            socket.create_connection((match[1], int(match[2])), timeout=5).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ConnectionError(f"RAY_ADDRESS={address}: no Ray head answers there "
                                      f"({exc.strerror or exc}); is the cluster up?") from None
            time.sleep(1.0)


# The GCS address of the local instance connect() started in this process (None: it joined a cluster, or
# started none): such an instance is this machine alone, and no other node joins it.
_local_instance: str | None = None


def connect(local_cpus: int | None = None, **init_kwargs: Any) -> None:
    """Join the cluster at RAY_ADDRESS, or start a fresh local Ray with `local_cpus` CPUs (None: all).

    Without RAY_ADDRESS always a new local instance ("local"), never whatever cluster a stale /tmp/ray
    file points at. A process already connected (a test, a notebook, a job driver) stays as it is."""
    import ray

    global _local_instance
    if ray.is_initialized():
        return
    if logs.for_airflow_task():
        # The driver's `ray` logger has a stderr handler of its own, and Airflow records a task's stderr as
        # errors: "Started a local Ray instance", "Connected to Ray cluster" were red lines in every task log.
        logs.info_to_stdout(logging.getLogger("ray"))
    address = cluster_address()
    with _own_sigterm_kept():
        if address:
            wait_for_head(address)
            ray.init(address=address, **init_kwargs)
            _local_instance = None
            return
        _start_local(local_cpus, **init_kwargs)
    _local_instance = ray.get_runtime_context().gcs_address


@contextlib.contextmanager
def _own_sigterm_kept() -> Iterator[None]:
    """ray.init puts a SIGTERM handler of its own (sys.exit) in the driver's main thread. A process with its own
    (`bert-pipeline run`'s stop of a DAG run, Airflow's task runner ending a task) lost it at its first Ray step: a
    SIGTERM then exited from inside whatever ran, and the DAG run stayed `running`. Ray's stays only where the
    process had the default."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if before not in (None, signal.SIG_DFL):
            signal.signal(signal.SIGTERM, before)


def _start_local(local_cpus: int | None, **init_kwargs: Any) -> None:
    """A fresh local Ray whose processes know it as theirs. Ray's state API, which Ray Train's placement-group
    cleaner calls from its own worker, finds "its" cluster by looking around the machine (RAY_ADDRESS, else
    /tmp/ray's last cluster file, else the GCS processes it sees): with another Ray on the machine, or a stale
    file, it asked another cluster whether this run's controller was alive (a hung GCS client, "Failed to stop
    PlacementGroupCleaner gracefully" and a 12 s wait at the end of every run here; an answer of "dead" from
    the wrong cluster would remove a healthy run's placement group). RAY_API_SERVER_ADDRESS, set while ray.init
    starts the raylet (whose environment every worker inherits), names this instance's own dashboard, the
    state API's server, at a port chosen here."""
    import ray

    from bert_core.launch.ports import free_ports

    port = init_kwargs.pop("dashboard_port", None) or free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    before = os.environ.get(API_SERVER_ENV)
    os.environ[API_SERVER_ENV] = url
    try:
        context = ray.init(address="local", num_cpus=local_cpus, dashboard_port=port, **init_kwargs)
    finally:  # the driver's own environment as it was: a later cluster must not be mistaken for this one
        if before is None:
            os.environ.pop(API_SERVER_ENV, None)
        else:
            os.environ[API_SERVER_ENV] = before
    served = getattr(context, "dashboard_url", None)
    if served and served.removeprefix("http://") != url.removeprefix("http://"):
        log.warning("the local Ray's dashboard is at %s, not %s: Ray Train's cleanup may look for this cluster "
                    "elsewhere", served, url)


def on_local_instance() -> bool:
    """Whether this process is connected to the single-machine Ray that connect() started here (not to a
    cluster it joined, nor to one a test or notebook connected to itself)."""
    import ray

    return ray.is_initialized() and _local_instance is not None and \
        ray.get_runtime_context().gcs_address == _local_instance
