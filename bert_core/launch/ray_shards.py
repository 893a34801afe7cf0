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
    connect(log_to_driver=False)
    remote = ray.remote(num_cpus=1)(_run_unit_on_ray)
    vocab_ref = ray.put(vocab_file.read_bytes())
    vocab_sha = manifest.sha256_file(vocab_file)
    window = max(workers, int(ray.available_resources().get("CPU", 1))) + 1
    yield lambda units: data_shards.ordered(
        lambda unit: remote.remote(vocab_ref, vocab_sha, config.do_lower_case, config, unit),
        ray.get, units, window, stats)


def make_shards(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """bert_core.data.make_shards.make_shards, able to use the "ray" backend."""
    return data_shards.make_shards(*args, remote=open_ray_executor, **kwargs)


def make_split_shards(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """bert_core.data.make_shards.make_split_shards, able to use the "ray" backend."""
    return data_shards.make_split_shards(*args, remote=open_ray_executor, **kwargs)
