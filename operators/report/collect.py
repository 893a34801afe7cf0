"""A run's records, gathered from its work directory (local or s3://) and its MLflow runs into one JSON-able
dict: the report's only input (kept beside it as report_data.json, so a report can be drawn again without the
run directory).

The work directory's layout is the plans' (operators/plan_demo.py, plan_pretraining.py, plan_finetune.py):
`pretrained[/<phase>]/manifest.json`, `finetune-<task>[/<trial>]/{manifest,metrics}.json` (and the search's
`search.json`), `registry/<name>-v<N>.json` (operators.registry.promote's decision reports) and
`tasks/*.json` (operators.run_records).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.io import storage
from operators.registry import PRETRAINED
from operators.run_records import TASKS_DIR

log = logging.getLogger(__name__)

FORMAT = 1  # of the record; a report_data.json of another format is refused by name
PRETRAINED_DIR, FINETUNE_PREFIX, REGISTRY_DIR = "pretrained", "finetune-", "registry"
# Pretraining's metric history that the report draws (bert_core/pretrain/step.py logs them).
PRETRAIN_HISTORY = ("loss", "mlm_accuracy", "eval_loss", "eval_mlm_accuracy", "eval_nsp_accuracy",
                    "eval_mlm_accuracy_chance", "eval_nsp_accuracy_chance")


def normalized_run_dir(run_dir: str) -> str:
    return run_dir.rstrip("/") if storage.is_s3(run_dir) else str(storage.local_path(run_dir).absolute())


def collect(run_dir: str, tracking_uri: str | None = None) -> dict[str, Any]:
    """Everything the report shows about the run in `run_dir`. `tracking_uri`: the MLflow store of its runs
    (default: the one its tasks recorded, else MLFLOW_TRACKING_URI / the embedded store)."""
    from bert_core.io.tracking import default_tracking_uri

    run_dir = normalized_run_dir(run_dir)
    files = storage.list_files(run_dir) if storage.exists(run_dir) else []
    if not files:
        raise BertPipelineError(f"{run_dir}: no such run directory, or it is empty")
    tasks = [_read_json(run_dir, rel) for rel in files if _under(rel, TASKS_DIR) and rel.endswith(".json")]
    tasks.sort(key=lambda t: (t.get("started_at") or "", t.get("task_id") or ""))
    uri = tracking_uri or _recorded_tracking_uri(tasks) or default_tracking_uri()
    records = {
        "format": FORMAT, "run_dir": run_dir,
        "dag_id": tasks[0].get("dag_id") if tasks else None,
        "dag_run_id": tasks[0].get("run_id") if tasks else None,
        "tracking_uri": uri, "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "pretraining": _pretraining(run_dir, files, uri), "finetuning": _finetuning(run_dir, files),
        "registry": _decisions(run_dir, files, uri), "tasks": tasks,
    }
    if not any(records[key] for key in ("pretraining", "finetuning", "registry", "tasks")):
        raise BertPipelineError(f"{run_dir}: holds none of a DAG run's records ({PRETRAINED_DIR}/, "
                                f"{FINETUNE_PREFIX}<task>/, {REGISTRY_DIR}/, {TASKS_DIR}/): is it a run's work "
                                "directory?")
    return records


def _under(rel: str, directory: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 2 and parts[0] == directory


def _read_json(run_dir: str, rel: str) -> dict[str, Any]:
    where = storage.join(run_dir, rel)
    try:
        value = json.loads(storage.read_text(where))
    except json.JSONDecodeError as exc:
        raise BertPipelineError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(value, dict):
        raise BertPipelineError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def _recorded_tracking_uri(tasks: list[dict[str, Any]]) -> str | None:
    """The store the tasks logged to, unless its record had a password masked out (then it cannot be used)."""
    uris = [t["tracking_uri"] for t in tasks if t.get("tracking_uri")]
    return uris[-1] if uris and "***" not in uris[-1] else None


def _pretraining(run_dir: str, files: list[str], uri: str) -> list[dict[str, Any]]:
    phases = []
    for rel in files:
        parts = rel.split("/")
        if parts[0] != PRETRAINED_DIR or parts[-1] != "manifest.json" or len(parts) > 3:
            continue
        manifest = _read_json(run_dir, rel)
        if manifest.get("step") != "pretrain":
            continue
        training = manifest.get("training") or {}
        run_id = manifest.get("mlflow_run_id")
        history, note = _metric_history(run_id, PRETRAIN_HISTORY, uri)
        phases.append({
            "phase": parts[1] if len(parts) == 3 else "", "output": storage.join(run_dir, *parts[:-1]),
            "mlflow_run_id": run_id, "metrics": manifest.get("metrics") or {},
            "metrics_on": training.get("metrics_on"), "steps": training.get("steps"),
            "world_size": training.get("world_size"), "tokens": training.get("tokens_this_run"),
            "resumed_from": training.get("resumed_from"), "recipe": manifest.get("recipe") or {},
            "learning_check": manifest.get("learning_check") or {}, "config": manifest.get("config") or {},
            "precision": manifest.get("precision") or {},
            "started_at": manifest.get("started_at"), "finished_at": manifest.get("finished_at"),
            "history": history, "history_note": note,
        })
    return sorted(phases, key=lambda p: p["phase"])


def _finetuning(run_dir: str, files: list[str]) -> list[dict[str, Any]]:
    found = []
    for rel in files:
        parts = rel.split("/")
        if not parts[0].startswith(FINETUNE_PREFIX) or parts[-1] != "metrics.json" or len(parts) > 3:
            continue
        metrics = _read_json(run_dir, rel)
        if "epochs" not in metrics:
            continue
        directory = "/".join(parts[:-1])
        manifest = _read_json(run_dir, f"{directory}/manifest.json") if f"{directory}/manifest.json" in files else {}
        trial = parts[1] if len(parts) == 3 else None
        best = True
        if trial is not None and f"{parts[0]}/search.json" in files:
            best = _read_json(run_dir, f"{parts[0]}/search.json").get("best") == trial
        found.append({
            "task": manifest.get("task") or parts[0][len(FINETUNE_PREFIX):], "trial": trial, "best": best,
            "output": storage.join(run_dir, directory), "main_metric": metrics.get("main_metric"),
            "best_epoch": metrics.get("best_epoch"), "dev": metrics.get("dev") or {},
            "epochs": metrics.get("epochs") or [], "mlflow_run_id": manifest.get("mlflow_run_id"),
            "started_at": manifest.get("started_at"), "finished_at": manifest.get("finished_at"),
        })
    return sorted(found, key=lambda f: (f["task"], f["trial"] or ""))


def _decisions(run_dir: str, files: list[str], uri: str) -> list[dict[str, Any]]:
    decisions = []
    for rel in files:
        if not _under(rel, REGISTRY_DIR) or not rel.endswith(".json"):
            continue
        report = _read_json(run_dir, rel)
        if not {"name", "candidate", "promoted"} <= set(report):
            continue  # e.g. the run's summary.json
        report = {**report, "serving_example": None}
        if report["promoted"]:
            report["serving_example"] = _serving_example(report["name"], report["candidate"], uri)
        decisions.append(report)
    # The pretrained model first (the fine-tuned ones may start from it), then by name.
    return sorted(decisions, key=lambda d: (d["name"] != PRETRAINED, d["name"], str(d["candidate"]).zfill(9)))


@contextlib.contextmanager
def mlflow_client(uri: str) -> Iterator[Any]:
    """An MLflow client on `uri`, with MLflow's download progress bars off (they are noise in a command's output)."""
    from mlflow import MlflowClient

    before = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield MlflowClient(tracking_uri=uri, registry_uri=uri)
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = before


def _metric_history(run_id: str | None, keys: tuple[str, ...], uri: str) -> tuple[dict[str, list], str | None]:
    """{metric: [[step, value], ...]} of an MLflow run (the last value logged at a step wins), and why it is
    empty when it is."""
    if not run_id:
        return {}, "the run was not tracked (no MLflow run): no curves"
    from mlflow.exceptions import MlflowException

    history: dict[str, list] = {}
    try:
        with mlflow_client(uri) as client:
            client.get_run(run_id)
            for key in keys:
                points = {m.step: m.value for m in sorted(client.get_metric_history(run_id, key),
                                                          key=lambda m: (m.step, m.timestamp))}
                if points:
                    history[key] = [[step, value] for step, value in sorted(points.items())]
    except MlflowException as exc:
        return {}, f"MLflow run {run_id} could not be read from {uri}: {exc.message.splitlines()[0]}"
    return history, None


def _serving_example(name: str, version: str, uri: str) -> Any:
    """The request body the registered model's signature came with (MLflow's serving_input_example.json), or
    None when the version has none."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        with mlflow_client(uri) as client, tempfile.TemporaryDirectory(prefix="bert-report-") as scratch:
            # The version's source is its logged model (models:/m-...). Its artifact location is a file:// or
            # s3:// URI, or, where a server with --serve-artifacts made the experiment (the stack's), an
            # mlflow-artifacts: one that only that server resolves: read through `uri`, not MLflow's
            # process-wide tracking URI.
            source = client.get_model_version(name, str(version)).source
            location = client.get_logged_model(source.removeprefix("models:/")).artifact_location
            path = mlflow.artifacts.download_artifacts(artifact_uri=f"{location}/serving_input_example.json",
                                                       dst_path=scratch, tracking_uri=uri)
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    except (MlflowException, OSError, json.JSONDecodeError) as exc:
        log.info("%s version %s: no serving input example (%s)", name, version, exc)
        return None
