"""make-shards with its units sent to a Ray cluster as Ray tasks (the "ray" backend; chosen by default when
RAY_ADDRESS is set). The data layer knows nothing of Ray: `make_shards` here is bert_core.data's with this
module's executor; the CLI and the Airflow tasks call it, so every backend is one call away."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from bert_core.data import make_shards as data_shards
from bert_core.data.instances import ShardConfig, UnitResult
from bert_core.data.make_shards import Unit
from bert_core.io import manifest
from bert_core.launch.ray_cluster import cluster_address, connect

# Attempts after the first for a unit whose node (or worker process) died.
UNIT_RETRIES = 3


def _run_unit_on_ray(vocab_bytes: bytes, vocab_sha256: str, do_lower_case: bool, config: ShardConfig,
                     unit: Unit) -> UnitResult:
    # The vocab travels with the task: a Ray node need not see the driver's files.
    path = Path(tempfile.gettempdir()) / "bert-pipeline-vocab" / f"{vocab_sha256}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(vocab_bytes)
        os.replace(tmp, path)
    return data_shards.run_unit(str(path), do_lower_case, config, unit)


@contextlib.contextmanager
def open_ray_executor(vocab_file: Path, config: ShardConfig, workers: int, stats: data_shards.RunStats):
    """Units -> results in unit order, as Ray tasks of one CPU each, a few more in flight than CPUs."""
    import ray

    if os.environ.get("RAY_ADDRESS"):
        cluster_address()  # refuses a job server URL, which a driver cannot join
    # Workers' output is forwarded (Ray's default): this connection is the process's, and a later step of the same
    # process (an Airflow task process under dag.test(), pretraining after make-shards) would otherwise lose its
    # workers' lines from the task's log; a unit itself only says something worth reading (an empty input).
    connect()
    # A unit is a pure function of its arguments (its own seed), so running it again on another node gives the
    # same bytes. Ray retries a task whose worker or node died, and runs a finished one again when its result
    # was lost with its node before the driver fetched it; both use up max_retries. Errors the unit raises
    # itself (bad input) are not retried (retry_exceptions stays off). 3 is Ray's default, written here
    # because losing nodes mid-run depends on it (tests/bert_core/launch/test_ray_shards_multinode.py).
    remote = ray.remote(num_cpus=1, max_retries=UNIT_RETRIES)(_run_unit_on_ray)
    vocab_ref = ray.put(vocab_file.read_bytes())
    vocab_sha = manifest.sha256_file(vocab_file)
    window = max(workers, int(ray.available_resources().get("CPU", 1))) + 1

    def submit(unit: Unit):
        # SPREAD: the units go round the nodes that have a free CPU, rather than filling one node first (Ray's
        # default packs short tasks onto few nodes), so the work and a lost node's share are spread evenly.
        # Named for the dashboard and Ray's state API: which file and chunk ran where, and how often.
        return remote.options(name=unit_task_name(unit), scheduling_strategy="SPREAD").remote(
            vocab_ref, vocab_sha, config.do_lower_case, config, unit)

    yield lambda units: data_shards.ordered(submit, ray.get, units, window, stats)


def unit_task_name(unit: Unit) -> str:
    return f"make-shards unit {unit[0]}:{unit[1]}"


def make_shards(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """bert_core.data.make_shards.make_shards, able to use the "ray" backend."""
    return data_shards.make_shards(*args, remote=open_ray_executor, **kwargs)


def make_split_shards(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """bert_core.data.make_shards.make_split_shards, able to use the "ray" backend."""
    return data_shards.make_split_shards(*args, remote=open_ray_executor, **kwargs)
