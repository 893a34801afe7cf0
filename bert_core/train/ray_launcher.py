"""Run `pretrain` on Ray Train V2: a TorchTrainer with one worker per GPU (or CPU process), DDP over
NCCL (GPU) or gloo (CPU), checkpoints persisted to RunConfig(storage_path) so every node sees them, and
FailureConfig(max_failures) restarting the worker group from the last checkpoint.

This is the only training module that imports Ray. The driver (this process: the CLI, an Airflow task
or a `ray job submit` entrypoint) checks the inputs, opens the MLflow run, starts the trainer and waits;
each worker runs `bert_core.train.pretrain.pretrain` unchanged: Ray Train has set up
torch.distributed, and rank 0 logs into the driver's MLflow run and writes --output.

Ray Train V2 notes (Ray >= 2.43, default since 2.5x):
- `ray.train.report(metrics, checkpoint=...)` is a barrier: every worker calls it at the same steps;
  only rank 0 passes a checkpoint. Metrics without a checkpoint are not kept by Ray, so the
  training metrics go to MLflow and the final manifest comes back as the train function's return
  value (`Result.return_value`, rank 0's).
- A trainer created again with the same (storage_path, name) restores that run's checkpoints;
  `ray.train.get_checkpoint()` then returns the latest one. That is how `--resume` works here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from bert_core import storage
from bert_core.errors import BertPipelineError
from bert_core.tracking import NullTracker, build_tracker, pipeline_home
from bert_core.train.checkpointing import step_dir_name
from bert_core.train.pretrain import FAIL_ENV, PretrainConfig, check_inputs, pretrain

log = logging.getLogger(__name__)

# Environment the workers need from the driver. Ray starts workers from the raylet, not from this
# process, so nothing is inherited. Credentials are deliberately not forwarded: runtime envs are
# visible in the Ray dashboard; nodes get them from their own environment or instance role.
FORWARDED_ENV = ("MLFLOW_TRACKING_URI", "BERT_PIPELINE_CACHE", "BERT_MODEL_STORE", "AWS_ENDPOINT_URL",
                 "AWS_DEFAULT_REGION", "AWS_REGION", "AIRFLOW_CTX_DAG_RUN_ID", "GIT_SHA", "HF_HUB_OFFLINE",
                 "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", FAIL_ENV)
# Local paths in the config: made absolute, because Ray workers do not run in the driver's directory.
PATH_FIELDS = ("data", "data_eval", "output", "vocab", "ckpt_dir", "storage")


def run_name(config: PretrainConfig) -> str:
    """Stable per --output, so re-running the same command with --resume finds the run's checkpoints."""
    return config.run_name or "pretrain-" + hashlib.sha256(config.output.encode()).hexdigest()[:12]


def storage_path(config: PretrainConfig) -> str:
    return config.storage or str(pipeline_home() / "ray_results")


def _absolute(value: str | None, only_existing: bool = False) -> str | None:
    """Local paths (comma-separated lists too) made absolute; URIs unchanged. With only_existing, a
    value that is not an existing path is left alone (--model/--pretrained also take zoo names)."""
    if value is None or value in ("latest", "auto"):
        return value
    parts = []
    for part in (p.strip() for p in value.split(",")):
        keep = "://" in part or (only_existing and not Path(part).exists())
        parts.append(part if keep else str(Path(part).absolute()))
    return ",".join(parts)


def absolutize(config: PretrainConfig) -> PretrainConfig:
    changes = {f: _absolute(getattr(config, f)) for f in PATH_FIELDS}
    changes.update({f: _absolute(getattr(config, f), only_existing=True) for f in ("model", "pretrained")})
    changes["resume"] = _absolute(config.resume)
    return dataclasses.replace(config, **changes)


class RayCheckpointStore:
    """Checkpoints reported to Ray Train, which copies them to storage_path/<run name>/step-N.

    The controller registers a reported checkpoint asynchronously; a worker that dies in between
    would restart the run from the previous checkpoint (or from scratch). Every worker therefore
    waits until the checkpoint is committed: once `save` returns, a failure resumes from it.
    """

    def save(self, step: int, write: Callable[[Path], None] | None, metrics: dict[str, float]) -> None:
        if write is None:
            ray.train.report(metrics, checkpoint=None)
        else:
            with tempfile.TemporaryDirectory(prefix="bert-ckpt-") as tmp:
                write(Path(tmp))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp),
                                 checkpoint_dir_name=step_dir_name(step))
        ray.train.get_all_reported_checkpoints(consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED)


def _train_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The function every Ray Train worker runs."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = PretrainConfig(**payload["config"])
    rank = ray.train.get_context().get_world_rank()
    device = torch.device("cpu")
    if config.use_gpu:
        device = ray.train.torch.get_device()
        torch.cuda.set_device(device)
    tracker = NullTracker()
    if rank == 0 and payload["mlflow_run_id"]:
        tracker = build_tracker(True, payload["tracking_uri"], run_id=payload["mlflow_run_id"])
    checkpoint = ray.train.get_checkpoint()  # set after a worker failure, or when resuming the named run
    with checkpoint.as_directory() if checkpoint else contextlib.nullcontext() as ckpt_dir:
        resume_dir = Path(ckpt_dir) if ckpt_dir else None
        if resume_dir is not None or config.resume in ("latest", "auto"):
            config = dataclasses.replace(config, resume=None)
        return pretrain(config, tracker, device=device, store=RayCheckpointStore(), resume_dir=resume_dir)


def _root_error(exc: BaseException) -> BaseException:
    """The user-level exception inside Ray's wrappers (WorkerGroupError -> RayTaskError -> cause)."""
    failures = getattr(exc, "worker_failures", None)
    if failures:
        exc = failures[min(failures)]
    while getattr(exc, "cause", None) is not None and exc.cause is not exc:
        exc = exc.cause
    return exc


def launch(config: PretrainConfig) -> dict[str, Any]:
    """Check inputs, start (or attach to) Ray, run the TorchTrainer, and return the output manifest."""
    config = absolutize(config)
    _, done = check_inputs(config)
    if done is not None:
        log.info("%s is up to date (same config and inputs): nothing to do", config.output)
        return done
    name, root = run_name(config), storage_path(config)
    previous = storage.exists(storage.join(root, name))
    if previous and not config.resume:
        raise BertPipelineError(f"Ray run {name!r} already has state under {root}: pass --resume to continue it, "
                                "or --run-name NAME (or another --output) to start a new run")
    if config.resume == "latest" and not previous:
        raise BertPipelineError(f"--resume: no Ray run {name!r} under {root} (give the --storage and "
                                "--run-name/--output of the interrupted run)")

    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        # Without RAY_ADDRESS always a fresh local instance ("local"), never whatever cluster a stale
        # /tmp/ray file points at; enough CPUs for one worker each.
        ray.init(address=address or "local",
                 num_cpus=None if address else max(config.num_workers, os.cpu_count() or 1))
    env = {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}
    env["BERT_PIPELINE_HOME"] = str(pipeline_home())

    tracker = build_tracker(config.tracking, config.tracking_uri, run_name=name)
    payload = {"config": dataclasses.asdict(config), "mlflow_run_id": tracker.run_id,
               "tracking_uri": getattr(tracker, "tracking_uri", None)}
    trainer = TorchTrainer(
        _train_worker,
        train_loop_config=payload,
        scaling_config=ScalingConfig(num_workers=max(1, config.num_workers), use_gpu=config.use_gpu),
        run_config=RunConfig(
            name=name,
            storage_path=root,
            failure_config=FailureConfig(max_failures=config.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=config.keep_checkpoints or None),
            worker_runtime_env={"env_vars": env},
        ),
    )
    log.info("Ray Train: %d worker(s)%s, run %r, checkpoints under %s", config.num_workers,
             " on GPUs" if config.use_gpu else "", name, storage.join(root, name))
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as exc:
        tracker.end("FAILED")
        root_error = _root_error(exc)
        if isinstance(root_error, BertPipelineError):
            raise BertPipelineError(str(root_error)) from exc
        raise
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")
    if result.return_value is None:
        raise BertPipelineError(f"Ray run {name!r} finished without a result from rank 0")
    return result.return_value
