"""`run_step`: the one way to run a training step, in this process or on Ray Train.

The CLI (`bert-pipeline pretrain|finetune`), the Airflow tasks (operators.tasks) and `ray job submit`
entrypoints all call `run_step(PRETRAIN, config)` / `run_step(FINETUNE, config)`. The step decides nothing
about Ray: its config says how many workers (`runs_on_ray()`: more than one, or one with RAY_ADDRESS naming
a cluster), and this function either calls the step's `work` here or hands it to Ray Train
(bert_core.launch.ray_train), after the same checks on the driver in both cases.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bert_core.deploy.mlflow_model import pyfunc_spec
from bert_core.errors import BertPipelineError
from bert_core.io.tracking import Tracker, build_tracker
from bert_core.train.step_spec import StepHook, StepSpec, Worker

log = logging.getLogger(__name__)


def _absolute(value: str | None, only_existing: bool = False) -> str | None:
    """Local paths (comma-separated lists too) made absolute; URIs unchanged. With only_existing, a
    value that is not an existing path is left alone (--model/--pretrained also take zoo names)."""
    if value is None or value in ("latest", "auto"):
        return value
    parts = []
    for part in (p.strip() for p in value.split(",")):
        keep = "://" in part or (only_existing and not Path(part).exists())
        parts.append(part if keep else os.path.abspath(part))
    return ",".join(parts)


def absolutize(spec: StepSpec, config: Any) -> Any:
    """The config with its local paths made absolute: Ray workers do not run in the driver's directory, and the
    manifest and MLflow params say where the inputs were, whatever directory the command ran in."""
    changes = {f: _absolute(getattr(config, f)) for f in spec.path_fields}
    changes.update({f: _absolute(getattr(config, f), only_existing=True) for f in spec.name_fields})
    return dataclasses.replace(config, **changes)


def naming_flag(spec: StepSpec, config: Any, error: BertPipelineError) -> BertPipelineError:
    """`error` with the flag in front when its message starts with one of the step's paths or URIs and names no
    flag itself: storage's errors name the URI ("s3://b/x: the S3 bucket 'b' does not exist on ...", "s3://b/x: no
    objects under this prefix"), which the user may have given to any of several flags."""
    message = str(error)
    if message.startswith("--"):
        return error
    named = []
    for field in (*spec.path_fields, *spec.name_fields):
        value = getattr(config, field, None)
        if isinstance(value, str) and value and message.startswith(value) and \
                message[len(value):len(value) + 1] in (":", "/"):
            named.append((len(value), field))
    if not named:
        return error
    flag = "--" + max(named)[1].replace("_", "-")
    try:
        return type(error)(f"{flag}: {message}")  # the same kind of error (ModelNotFoundError, ...)
    except TypeError:
        return BertPipelineError(f"{flag}: {message}")


def run_step(spec: StepSpec, config: Any, tracker: Tracker | None = None,
             hooks: Sequence[StepHook] = ()) -> dict[str, Any]:
    """Check, then run `spec` with `config`; returns the output manifest (the existing one, without running,
    when the output already holds this exact result).

    With no `tracker`, opens its own MLflow run in the step's experiment (unless config.tracking is off) and
    ends it FINISHED or FAILED; a given tracker is logged into and left open for the caller. `hooks` are
    called after every optimizer step on every worker (they travel to Ray workers pickled).
    """
    config.validate()
    on_ray = config.runs_on_ray()
    name = None
    if on_ray:
        # Imported only here: an in-process run does not pay for importing Ray.
        from bert_core.launch import ray_train
        from bert_core.launch.ray_cluster import cluster_address

        cluster_address()  # a job server URL in RAY_ADDRESS is refused before any work or MLflow run
    config = absolutize(spec, config)
    try:
        plan = spec.plan(config)
        if plan.done is None and on_ray:
            ray_train.check_run_state(spec, config)
    except BertPipelineError as exc:
        raise naming_flag(spec, config, exc) from exc
    if plan.done is not None:
        log.info("%s is up to date (same config and inputs): nothing to do", config.output)
        return plan.done
    if on_ray:
        name = ray_train.run_name(spec, config)
    own_tracker = tracker is None
    if tracker is None:
        tracker = build_tracker(config.tracking, config.tracking_uri, experiment=spec.experiment(config),
                                run_name=name or getattr(config, "run_name", None), pyfunc=pyfunc_spec)
    try:
        if on_ray:
            result = ray_train.fit(spec, config, plan, tracker, name, tuple(hooks))
        else:
            result = spec.work(config, plan, tracker, Worker(hooks=tuple(hooks)))
    except BaseException:
        if own_tracker:
            tracker.end("FAILED")
        raise
    if own_tracker:
        tracker.end("FINISHED")
    return result
