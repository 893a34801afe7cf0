"""Run `pretrain` and `finetune` on Ray Train V2: a TorchTrainer with one worker per GPU (or CPU
process), DDP over NCCL (GPU) or gloo (CPU), checkpoints persisted to RunConfig(storage_path) so every
node sees them, and FailureConfig(max_failures) restarting the worker group from the last checkpoint.

This is the only training module that imports Ray. The driver (this process: the CLI, an Airflow task
or a `ray job submit` entrypoint) checks the inputs, opens the MLflow run, starts the trainer and waits;
each worker runs the step's function unchanged (`bert_core.train.pretrain.pretrain`,
`bert_core.finetune.train`): Ray Train has set up torch.distributed, and rank 0 logs into the driver's
MLflow run and writes --output. Both steps go through the same pieces here: paths made absolute, the
Ray instance (local unless RAY_ADDRESS), the workers' environment and device, rank 0's tracker, the
trainer, and the error that comes back.

Ray Train V2 notes (Ray >= 2.43, default since 2.5x):
- `ray.train.report(metrics, checkpoint=...)` is a barrier: every worker calls it at the same steps;
  only rank 0 passes a checkpoint. Metrics without a checkpoint are not kept by Ray, so the
  training metrics go to MLflow and the final manifest comes back as the train function's return
  value (`Result.return_value`, rank 0's).
- A trainer created again with the same (storage_path, name) restores that run's checkpoints;
  `ray.train.get_checkpoint()` then returns the latest one. That is how pretraining's `--resume`
  works here. Fine-tuning keeps no checkpoints (a run is minutes to hours, and restarts from scratch):
  each run gets a fresh name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from bert_core import storage
from bert_core.errors import BertPipelineError
from bert_core.finetune import FinetuneConfig, Scorer, prepare, train
from bert_core.ray_cluster import cluster_address, connect
from bert_core.tracking import NullTracker, Tracker, build_tracker, pipeline_home
from bert_core.train.checkpointing import step_dir_name
from bert_core.train.pretrain import FAIL_ENV, PretrainConfig, check_inputs, pretrain

log = logging.getLogger(__name__)

# Environment the workers need from the driver. Ray starts workers from the raylet, not from this
# process, so nothing is inherited. Credentials are deliberately not forwarded: runtime envs are
# visible in the Ray dashboard; nodes get them from their own environment or instance role.
FORWARDED_ENV = ("MLFLOW_TRACKING_URI", "BERT_PIPELINE_CACHE", "BERT_MODEL_STORE", "AWS_ENDPOINT_URL",
                 "AWS_DEFAULT_REGION", "AWS_REGION", "AIRFLOW_CTX_DAG_RUN_ID", "GIT_SHA", "HF_HUB_OFFLINE",
                 "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", FAIL_ENV)
# Local paths in each step's config: made absolute, because Ray workers do not run in the driver's
# directory. (paths, names): names may also be zoo names, made absolute only when such a path exists.
PATH_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {
    PretrainConfig: (("data", "data_eval", "output", "vocab", "ckpt_dir", "storage", "resume"), ("model", "pretrained")),
    FinetuneConfig: (("data_dir", "output", "train_file", "storage"), ("model",)),
}


def run_name(config: PretrainConfig) -> str:
    """Stable per --output, so re-running the same command with --resume finds the run's checkpoints."""
    return config.run_name or "pretrain-" + hashlib.sha256(config.output.encode()).hexdigest()[:12]


def storage_path(config: PretrainConfig | FinetuneConfig) -> str:
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


def absolutize(config: PretrainConfig | FinetuneConfig) -> PretrainConfig | FinetuneConfig:
    paths, names = PATH_FIELDS[type(config)]
    changes = {f: _absolute(getattr(config, f)) for f in paths}
    changes.update({f: _absolute(getattr(config, f), only_existing=True) for f in names})
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


def _worker_setup(payload: dict[str, Any], use_gpu: bool) -> tuple[torch.device, Tracker]:
    """Logging, this worker's device and its tracker: rank 0 logs into the driver's MLflow run."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    device = torch.device("cpu")
    if use_gpu:
        device = ray.train.torch.get_device()
        torch.cuda.set_device(device)
    tracker: Tracker = NullTracker()
    if ray.train.get_context().get_world_rank() == 0 and payload["mlflow_run_id"]:
        tracker = build_tracker(True, payload["tracking_uri"], run_id=payload["mlflow_run_id"])
    return device, tracker


def _pretrain_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The function every pretraining worker runs."""
    config = PretrainConfig(**payload["config"])
    device, tracker = _worker_setup(payload, config.use_gpu)
    checkpoint = ray.train.get_checkpoint()  # set after a worker failure, or when resuming the named run
    with checkpoint.as_directory() if checkpoint else contextlib.nullcontext() as ckpt_dir:
        resume_dir = Path(ckpt_dir) if ckpt_dir else None
        if resume_dir is not None or config.resume in ("latest", "auto"):
            config = dataclasses.replace(config, resume=None)
        return pretrain(config, tracker, device=device, store=RayCheckpointStore(), resume_dir=resume_dir)


def _finetune_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The function every fine-tuning worker runs; the inputs were hashed once, by the driver."""
    cfg = FinetuneConfig(**payload["config"])
    device, tracker = _worker_setup(payload, cfg.use_gpu)
    return train(cfg, payload["scorer"], tracker, prepare(cfg, inputs=payload["inputs"]), device=device)


def _root_error(exc: BaseException) -> BaseException:
    """The user-level exception inside Ray's wrappers (WorkerGroupError -> RayTaskError -> cause)."""
    failures = getattr(exc, "worker_failures", None)
    if failures:
        exc = failures[min(failures)]
    while getattr(exc, "cause", None) is not None and exc.cause is not exc:
        exc = exc.cause
    return exc


@dataclass
class _Job:
    name: str  # the Ray run's name under storage
    storage: str
    num_workers: int
    use_gpu: bool
    max_failures: int = 0
    keep_checkpoints: int | None = None


def _tracking_payload(tracker: Tracker) -> dict[str, Any]:
    return {"mlflow_run_id": tracker.run_id, "tracking_uri": getattr(tracker, "tracking_uri", None)}


def _fit(worker: Callable[[dict[str, Any]], Any], payload: dict[str, Any], job: _Job) -> Any:
    """Start (or attach to) Ray, run `worker` on every worker of a TorchTrainer, return rank 0's result.
    A BertPipelineError raised on a worker comes back as one (the user's mistake, said once)."""
    connect(local_cpus=max(job.num_workers, os.cpu_count() or 1))  # locally, enough CPUs for one worker each
    env = {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}
    env["BERT_PIPELINE_HOME"] = str(pipeline_home())
    trainer = TorchTrainer(
        worker,
        train_loop_config=payload,
        scaling_config=ScalingConfig(num_workers=max(1, job.num_workers), use_gpu=job.use_gpu),
        run_config=RunConfig(
            name=job.name,
            storage_path=job.storage,
            failure_config=FailureConfig(max_failures=job.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=job.keep_checkpoints),
            worker_runtime_env={"env_vars": env},
        ),
    )
    log.info("Ray Train: %d worker(s)%s, run %r under %s", job.num_workers, " on GPUs" if job.use_gpu else "",
             job.name, job.storage)
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as exc:
        root_error = _root_error(exc)
        if isinstance(root_error, BertPipelineError):
            raise BertPipelineError(str(root_error)) from exc
        raise
    if result.return_value is None:
        raise BertPipelineError(f"Ray run {job.name!r} finished without a result from rank 0")
    return result.return_value


def launch(config: PretrainConfig) -> dict[str, Any]:
    """Check inputs, start (or attach to) Ray, run the TorchTrainer, and return the output manifest."""
    cluster_address()  # a job server URL in RAY_ADDRESS is refused before any work or MLflow run
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
    tracker = build_tracker(config.tracking, config.tracking_uri, run_name=name)
    job = _Job(name, root, config.num_workers, config.use_gpu, config.max_failures, config.keep_checkpoints or None)
    try:
        result = _fit(_pretrain_worker, {"config": dataclasses.asdict(config), **_tracking_payload(tracker)}, job)
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")
    return result


def launch_finetune(cfg: FinetuneConfig, scorer: Scorer, tracker: Tracker, inputs: dict[str, str]) -> dict[str, Any]:
    """Fine-tune on Ray Train; called by `bert_core.finetune.finetune`, which has made the paths absolute,
    checked the inputs and the output, hashed the inputs and opened the MLflow run (`tracker`, logged
    into by rank 0 and left open). Returns the output manifest."""
    task = cfg.task.lower()
    name = f"finetune-{task}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    payload = {"config": dataclasses.asdict(cfg), "scorer": scorer, "inputs": inputs, **_tracking_payload(tracker)}
    return _fit(_finetune_worker, payload, _Job(name, storage_path(cfg), cfg.num_workers, cfg.use_gpu))
