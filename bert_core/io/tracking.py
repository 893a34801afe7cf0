"""Experiment tracking behind a small interface; MLflow is one implementation.

This is the only bert_core module that imports mlflow (ARCHITECTURE §1, §7). Training code calls
a `Tracker`; `NullTracker` does nothing (--no-tracking, and every worker but rank 0).

MLflow specifics:
- Tracking URI: MLFLOW_TRACKING_URI (or --tracking-uri) when set, else the embedded store
  `sqlite:///<home>/mlflow.db` with artifacts under `<home>/mlartifacts`, where home is
  $BERT_PIPELINE_HOME or ./.bert-pipeline. Any sqlite store keeps its artifacts beside its database
  (`mlartifacts/`); $BERT_PIPELINE_ARTIFACT_ROOT overrides (`artifact_location`).
- Tags: git_sha, pipeline_run_id (Airflow's AIRFLOW_CTX_DAG_RUN_ID when under Airflow), data_sha256.
- The final model is logged as an MLflow *logged model* named `model` (the task pyfunc of
  bert_core.deploy.mlflow_model, whose artifact is the model directory: config.json + model.safetensors +
  vocab.txt [+ task.json]), so the registry step can register it (from its own URI, `models:/m-...`, found by
  run and name) and `mlflow models serve` can serve it; a bare artifact directory could be neither.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bert_core.io.environment import env_default

log = logging.getLogger(__name__)

PRETRAIN_EXPERIMENT = "bert-pretrain"
_MAX_PARAM_LEN = 6000  # MLflow's limit on a param value


def pipeline_home() -> Path:
    return Path(os.environ.get("BERT_PIPELINE_HOME") or Path.cwd() / ".bert-pipeline").absolute()


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or embedded_tracking_uri()


def git_sha() -> str:
    """The commit of the code that runs: $GIT_SHA when given (e.g. by CI or Airflow), else `git rev-parse`."""
    if os.environ.get("GIT_SHA"):
        return os.environ["GIT_SHA"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def pipeline_run_id() -> str | None:
    return os.environ.get("AIRFLOW_CTX_DAG_RUN_ID") or None


def standard_tags(data_sha256: str | None) -> dict[str, str]:
    tags = {"git_sha": git_sha(), "data_sha256": data_sha256 or "unknown"}
    run_id = pipeline_run_id()
    if run_id:
        tags["pipeline_run_id"] = run_id
    return tags


def flatten_params(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out.update(flatten_params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)[:_MAX_PARAM_LEN]
    return out


PROGRESS_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


@contextlib.contextmanager
def quiet_artifact_transfers() -> Iterator[None]:
    """MLflow's artifact progress bars off inside (they are noise in a command's output and a log: a dozen
    carriage-return frames of `Downloading artifacts: 100%|...` before `predict --model models:/...`'s one line,
    and in `export --register --promote`'s serving check), unless the user set MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR."""
    with env_default(PROGRESS_BAR_ENV, "false"):
        yield


def embedded_tracking_uri() -> str:
    return f"sqlite:///{pipeline_home() / 'mlflow.db'}"


def ensure_experiment(name: str, tracking_uri: str | None = None) -> str:
    """The id of experiment `name`, created if needed. In the embedded store its artifacts go beside the
    database (<home>/mlartifacts), never to ./mlruns of whatever the working directory is; a configured
    server or store keeps its own artifact root.

    "Embedded" is decided by the URI itself, not by MLFLOW_TRACKING_URI being unset: mlflow.set_tracking_uri
    exports that variable, so the second experiment of a process would otherwise be misjudged."""
    import mlflow

    uri = tracking_uri or default_tracking_uri()
    mlflow.set_tracking_uri(uri)
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = artifact_location(name, uri)
    try:
        return mlflow.create_experiment(name, artifact_location=location)
    except mlflow.exceptions.MlflowException:  # created concurrently by another process
        return mlflow.get_experiment_by_name(name).experiment_id


ARTIFACT_ROOT_ENV = "BERT_PIPELINE_ARTIFACT_ROOT"


def artifact_location(experiment: str, tracking_uri: str) -> str | None:
    """Where a new experiment's artifacts go, tied to its store:

    - $BERT_PIPELINE_ARTIFACT_ROOT (a path or URI, e.g. s3://bucket/mlflow) when set: <root>/<experiment>;
    - a sqlite store: `mlartifacts/` beside its database file (the embedded home's layout), never MLflow's
      default `./mlruns` of the working directory, where two stores' experiment ids collide and a Ray worker's
      or an Airflow task's artifacts would land wherever it happened to run;
    - anything else (a tracking server, another database): None, the server's or store's own default.
    """
    root = os.environ.get(ARTIFACT_ROOT_ENV, "").strip()
    if root:
        if "://" not in root:
            root = Path(root).absolute().as_uri()
        return f"{root.rstrip('/')}/{experiment}"
    if tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri[len("sqlite:///"):].split("?", 1)[0])
        if not database.is_absolute():
            database = database.absolute()
        directory = database.parent / "mlartifacts"
        directory.mkdir(parents=True, exist_ok=True)
        return directory.as_uri()
    return None


class Tracker:
    """What training reports. Every method is best-effort for callers: implementations log, not raise,
    on transient backend errors only where they say so."""

    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None: ...

    def log_model_dir(self, model_dir: str | os.PathLike, name: str = "model") -> None:
        """Log a model directory as an MLflow logged model (see MlflowTracker's `pyfunc`)."""

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def end(self, status: str = "FINISHED") -> None: ...


class NullTracker(Tracker):
    """Tracks nothing."""


PyfuncSpec = Callable[[str | os.PathLike], dict[str, Any]]


class MlflowTracker(Tracker):
    """One MLflow run: a new one in `experiment`, or an existing one (`run_id`) that another process
    started, e.g. the Ray driver's run that rank 0 logs into.

    `pyfunc(model_dir)` -> mlflow.pyfunc.log_model's arguments for a model directory: the launchers pass
    bert_core.deploy.mlflow_model.pyfunc_spec (the task pyfunc, its signature and input example). It is
    given here, by whoever builds the tracker, because the steps that log models must not depend on
    deployment (pretraining would reach fine-tuning's task code through it)."""

    def __init__(self, experiment: str = PRETRAIN_EXPERIMENT, tracking_uri: str | None = None,
                 run_id: str | None = None, run_name: str | None = None, pyfunc: PyfuncSpec | None = None):
        import mlflow

        self.pyfunc = pyfunc

        self._mlflow = mlflow
        self.tracking_uri = tracking_uri or default_tracking_uri()
        mlflow.set_tracking_uri(self.tracking_uri)
        if run_id is None:
            experiment_id = ensure_experiment(experiment, self.tracking_uri)
            run = mlflow.start_run(experiment_id=experiment_id, run_name=run_name)
        else:
            run = mlflow.start_run(run_id=run_id)
        self.run_id = run.info.run_id
        self.experiment_id = run.info.experiment_id
        if run_id is not None:  # attached: the run's own experiment, not this constructor's default
            experiment = mlflow.get_experiment(self.experiment_id).name
        log.info("MLflow run %s in experiment %r at %s", self.run_id, experiment, self.tracking_uri)

    def log_params(self, params: dict[str, Any]) -> None:
        """Log params; one the run already has with another value keeps its first value. MLflow refuses to change
        a param, and a Ray Train worker group restarted without a checkpoint (a node lost before the first one)
        logs its params again into the driver's run, with its own world size."""
        flat = flatten_params(params)
        logged = self._mlflow.MlflowClient(self.tracking_uri).get_run(self.run_id).data.params
        kept = {k: (logged[k], v) for k, v in flat.items() if k in logged and logged[k] != v}
        if kept:
            log.info("MLflow run %s keeps the first value of %s", self.run_id,
                     ", ".join(f"{k}={old} (now {new})" for k, (old, new) in kept.items()))
        self._mlflow.log_params({k: v for k, v in flat.items() if k not in kept})

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self._mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def log_model_dir(self, model_dir: str | os.PathLike, name: str = "model") -> None:
        import mlflow.pyfunc

        if self.pyfunc is None:
            from bert_core.errors import BertPipelineError

            raise BertPipelineError("this MLflow tracker was built without `pyfunc`, so it cannot log a model: "
                                    "build it with pyfunc=bert_core.deploy.mlflow_model.pyfunc_spec")
        mlflow.pyfunc.log_model(name=name, **self.pyfunc(model_dir))

    def set_tags(self, tags: dict[str, str]) -> None:
        self._mlflow.set_tags(tags)

    def end(self, status: str = "FINISHED") -> None:
        active = self._mlflow.active_run()
        if active is not None and active.info.run_id == self.run_id:
            self._mlflow.end_run(status=status)
        else:
            self._mlflow.MlflowClient(self.tracking_uri).set_terminated(self.run_id, status=status)


def build_tracker(enabled: bool, tracking_uri: str | None = None, experiment: str = PRETRAIN_EXPERIMENT,
                  run_id: str | None = None, run_name: str | None = None, pyfunc: PyfuncSpec | None = None) -> Tracker:
    if not enabled:
        return NullTracker()
    return MlflowTracker(experiment, tracking_uri, run_id=run_id, run_name=run_name, pyfunc=pyfunc)
