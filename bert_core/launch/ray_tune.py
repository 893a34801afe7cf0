"""A hyperparameter search over fine-tuning runs with Ray Tune: every point of a grid (e.g. the BERT paper's
learning rates x seeds) is one fine-tuning trial, run in parallel as the cluster's resources allow.

Each trial is an ordinary fine-tuning run (bert_core.finetune.step.finetune, one worker) writing its own
output directory `<sweep dir>/<trial name>` and, when tracking, its own MLflow run, a child of the sweep's
parent run (tag `mlflow.parentRunId`), holding the trial's logged model. The sweep returns every trial's dev
metrics and picks the best by the task's main metric (ties: the first trial of the grid).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core import logs
from bert_core.errors import BertPipelineError

log = logging.getLogger(__name__)


@dataclass
class Trial:
    name: str
    values: dict[str, Any]  # the grid's values of this trial
    output: str
    metrics: dict[str, float]
    mlflow_run_id: str | None
    error: str | None = None


def trial_name(values: dict[str, Any]) -> str:
    return ",".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                    for key, value in values.items())


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [dict(zip(keys, combination)) for combination in itertools.product(*(grid[k] for k in keys))]


def _run_trial(config: dict[str, Any]) -> None:
    """One trial, in a Ray Tune actor: fine-tune with the grid's values; the result is the dev metrics."""
    import torch
    from ray import tune

    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.finetune.step import FinetuneConfig, experiment_name, finetune
    from bert_core.io.tracking import NullTracker, build_tracker

    # The driver's tracking store, model store and the like: a trial runs in a worker that the raylet started,
    # with the raylet's environment, not the driver's.
    os.environ.update(config["env"])
    logs.configure()  # as a Ray Train worker's: under Airflow, below ERROR to stdout (bert_core/logs.py)
    torch.set_num_threads(max(1, int(config["threads"])))
    values = {k: config[k] for k in config["grid_keys"]}
    name = trial_name(values)
    cfg = FinetuneConfig(**{**config["base"], **values, "output": f"{config['sweep_dir']}/{name}"})
    tracker = NullTracker()
    if cfg.tracking:
        tracker = build_tracker(True, cfg.tracking_uri, experiment=experiment_name(cfg.task), run_name=name,
                                pyfunc=pyfunc_spec)
        tags = {"sweep.trial": name, **{f"sweep.{k}": str(v) for k, v in values.items()}}
        if config["parent_run_id"]:
            tags["mlflow.parentRunId"] = config["parent_run_id"]
        tracker.set_tags(tags)
    before = _finished_at(cfg.output)
    try:
        result = finetune(cfg, tracker)
        if before is not None and before == (result["started_at"], result["finished_at"]):
            # A retried search finds this trial's output up to date: finetune() logged nothing, so this run
            # records the existing model, keeping every trial registrable.
            tracker.log_metrics({f"best/{k}": v for k, v in result["metrics"].items()}, step=0)
            tracker.set_tags({"reused_output": cfg.output})
            tracker.log_model_dir(Path(cfg.output) / "model")
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end()
    metrics = {k: float(v) for k, v in result["metrics"].items()}
    # Reported once, at the end (a returned value would be a second result without the score).
    tune.report({**metrics, "score": metrics.get(config["metric"], math.nan)})


def sweep(base, grid: dict[str, list[Any]], sweep_dir: str, metric: str, parent_run_id: str | None = None,
          max_concurrent: int = 0, cpus_per_trial: int = 1) -> dict[str, Any]:
    """Run every grid point of fine-tuning config `base` (a FinetuneConfig; its output is replaced by
    `<sweep_dir>/<trial name>`) as a Ray Tune trial; {"best": Trial, "trials": [Trial, ...], "metric"}.

    max_concurrent: at most this many trials at once (0: as the cluster's CPUs/GPUs allow). A failed trial
    is reported with its error; the sweep fails only when every trial failed."""
    from ray import tune

    from bert_core.launch.ray_cluster import connect, worker_env

    if not grid:
        raise BertPipelineError("a search needs at least one setting with values to try")
    if base.num_workers != 1:
        raise BertPipelineError(f"search trials run one worker each (num_workers=1), got num_workers="
                                f"{base.num_workers}: trials run in parallel instead")
    points = grid_points(grid)
    connect()
    resources: dict[str, float] = {"cpu": cpus_per_trial}
    if base.use_gpu:
        resources["gpu"] = 1
    base_values = {k: v for k, v in dataclasses.asdict(base).items() if k != "output"}
    param_space = {"base": base_values, "sweep_dir": sweep_dir.rstrip("/"), "metric": metric, "grid_keys": list(grid),
                   "parent_run_id": parent_run_id, "threads": cpus_per_trial,
                   "env": worker_env(),
                   **{key: tune.grid_search(values) for key, values in grid.items()}}
    storage = Path(sweep_dir).absolute() / ".ray-tune" if "://" not in sweep_dir else None
    log.info("search over %s: %d trial(s), %s per trial", ", ".join(grid), len(points), resources)
    tuner = tune.Tuner(
        tune.with_resources(_run_trial, resources),
        param_space=param_space,
        tune_config=tune.TuneConfig(metric="score", mode="max", max_concurrent_trials=max_concurrent or None),
        run_config=tune.RunConfig(name="sweep", storage_path=str(storage) if storage else None, verbose=1,
                                  failure_config=tune.FailureConfig(fail_fast=False)),
    )
    grid_results = tuner.fit()
    by_name: dict[str, Trial] = {}
    for result in grid_results:
        values = {k: result.config[k] for k in grid}
        name = trial_name(values)
        output = f"{sweep_dir.rstrip('/')}/{name}"
        metrics = {k: float(v) for k, v in (result.metrics or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in _TUNE_KEYS}
        metrics.pop("score", None)
        by_name[name] = Trial(name, values, output, metrics, _run_id(output),
                              None if result.error is None else f"{type(result.error).__name__}: {result.error}")
    trials = [by_name[trial_name(p)] for p in points if trial_name(p) in by_name]
    done = [t for t in trials if t.error is None and not math.isnan(t.metrics.get(metric, math.nan))]
    if not done:
        raise BertPipelineError("every search trial failed: " + "; ".join(f"{t.name}: {t.error}" for t in trials))
    best = max(done, key=lambda t: (t.metrics[metric], -trials.index(t)))
    return {"best": best, "trials": trials, "metric": metric}


# Bookkeeping Tune adds to every result; not dev metrics.
_TUNE_KEYS = {"timestamp", "time_this_iter_s", "time_total_s", "training_iteration", "pid", "time_since_restore",
              "iterations_since_restore", "done", "should_checkpoint"}


def _finished_at(output: str) -> tuple[str, str] | None:
    from bert_core.io import manifest

    try:
        found = manifest.read(output)
    except (FileNotFoundError, BertPipelineError, OSError):
        return None
    return found.get("started_at"), found.get("finished_at")


def _run_id(output: str) -> str | None:
    from bert_core.io import manifest

    try:
        return manifest.read(output).get("mlflow_run_id")  # fine-tuning records its run in the manifest
    except (FileNotFoundError, BertPipelineError, OSError):
        return None


def spread(trials: list[Trial], metric: str) -> dict[str, float]:
    """min / max / mean / std of `metric` over the trials that finished."""
    values = [t.metrics[metric] for t in trials if t.error is None and metric in t.metrics]
    if not values:
        return {}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"min": min(values), "max": max(values), "mean": mean, "std": std, "trials": float(len(values))}
