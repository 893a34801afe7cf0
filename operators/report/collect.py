"""A run's records, gathered from its work directory (local or s3://) and its MLflow runs into one JSON-able
dict: the report's only input (kept beside it as report_data.json, so a report can be drawn again without the
run directory).

The work directory's layout is the plans' (operators/plan_demo.py, plan_pretraining.py, plan_finetune.py):
`pretrained[/<phase>]/manifest.json`, `finetune-<task>[/<trial>]/{manifest,metrics}.json` (and the search's
`search.json`), `registry/<name>-v<N>.json` (operators.registry.promote's decision reports) and
`tasks/*.json` (operators.run_records). What the run trained on comes from its data steps' own records, wherever
the plan put them: the `manifest.json` of each `segment` and `make-shards` output and each `validate-shards`
result (`validation.json`), tied to the pretraining phases by the shard files each phase's manifest lists as
its inputs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fnmatch
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.io import storage
from bert_core.io.tracking import quiet_artifact_transfers
from operators.registry import PRETRAINED
from operators.run_records import TASKS_DIR

log = logging.getLogger(__name__)

FORMAT = 1  # of the record; a report_data.json of another format is refused by name
PRETRAINED_DIR, FINETUNE_PREFIX, REGISTRY_DIR = "pretrained", "finetune-", "registry"
# The nightly regression's own report (operators.nightly.compare_and_report writes them under work_dir/report/).
NIGHTLY_RESULTS, NIGHTLY_PLOTS = "report/results.json", "report/plots/"
# Pretraining's metric history that the report draws (bert_core/pretrain/step.py logs them).
PRETRAIN_HISTORY = ("loss", "mlm_accuracy", "eval_loss", "eval_mlm_accuracy", "eval_nsp_accuracy",
                    "eval_mlm_accuracy_chance", "eval_nsp_accuracy_chance")
# The data steps' records (bert_core.data.segment / make_shards / validate_shards: their STEP and RESULT_FILE).
SEGMENT_STEP, SHARDS_STEP, VALIDATE_STEP = "segment", "make-shards", "validate-shards"
MANIFEST_FILE, VALIDATION_FILE = "manifest.json", "validation.json"
# The make-shards settings the report shows of each shard directory.
SHARD_SETTINGS = ("max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob", "dupe_factor",
                  "whole_word_mask", "do_lower_case", "holdout_fraction", "random_seed", "split")


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
    pretraining = _pretraining(run_dir, files, uri)
    records = {
        "format": FORMAT, "run_dir": run_dir,
        "dag_id": tasks[0].get("dag_id") if tasks else None,
        "dag_run_id": tasks[0].get("run_id") if tasks else None,
        "tracking_uri": uri, "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "data": _data(run_dir, files, pretraining),
        "pretraining": pretraining, "finetuning": _finetuning(run_dir, files),
        "registry": _decisions(run_dir, files, uri), "tasks": tasks,
        "nightly": _nightly(run_dir, files),
    }
    if not any(records[key] for key in ("pretraining", "finetuning", "registry", "tasks", "nightly")):
        raise BertPipelineError(f"{run_dir}: holds none of a DAG run's records ({PRETRAINED_DIR}/, "
                                f"{FINETUNE_PREFIX}<task>/, {REGISTRY_DIR}/, {TASKS_DIR}/): is it a run's work "
                                "directory?")
    return records


def _nightly(run_dir: str, files: list[str]) -> dict[str, Any] | None:
    """A nightly regression's judgment (operators.nightly.compare_and_report's `report/results.json`) and its
    history plots (`report/plots/*.png`, base64, so a report drawn again from MLflow has them); None for another
    DAG's run."""
    import base64

    if NIGHTLY_RESULTS not in files:
        return None
    results = _read_json(run_dir, NIGHTLY_RESULTS)
    plots = {}
    for rel in files:
        if rel.startswith(NIGHTLY_PLOTS) and rel.endswith(".png"):
            with storage.local_file(storage.join(run_dir, rel)).open("rb") as png:
                plots[rel.removeprefix(NIGHTLY_PLOTS)] = base64.b64encode(png.read()).decode("ascii")
    return {"status": results.get("status"), "tonight": results.get("tonight") or {},
            "findings": results.get("findings") or [], "notes": results.get("notes") or [],
            "versions": [{"name": s.get("name"), "version": s.get("version"), "role": s.get("role")}
                         for group in ("champions", "candidates") for s in (results.get(group) or {}).values()],
            "last_good_run": results.get("last_good_run"), "mlflow_run_id": results.get("mlflow_run_id"),
            "tolerances": results.get("tolerances") or {}, "report": storage.join(run_dir, "report", "report.md"),
            "plots": plots}


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
            "total_steps": training.get("total_steps"), "data": _phase_inputs(run_dir, manifest),
            "history": history, "history_note": note,
        })
    return sorted(phases, key=lambda p: p["phase"])


def _relative(run_dir: str, uri: str) -> str | None:
    """`uri` relative to the run directory; None outside it."""
    prefix = run_dir.rstrip("/") + "/"
    return uri[len(prefix):] if uri.startswith(prefix) else None


def _in_spec(uri: str, spec: str) -> bool:
    """Whether a shard file is one of a --data/--data-eval spec's (comma-separated files, directories, globs)."""
    for part in (p.strip().rstrip("/") for p in spec.split(",") if p.strip()):
        if uri == part or uri.startswith(part + "/") or fnmatch.fnmatchcase(uri, part):
            return True
    return False


def _phase_inputs(run_dir: str, manifest: dict[str, Any]) -> dict[str, list[str]]:
    """The shard directories (relative to the run directory) a pretrain manifest lists as its inputs, training and
    held-out ones apart (the held-out ones are its config's data_eval)."""
    data_eval = (manifest.get("config") or {}).get("data_eval") or ""
    found: dict[str, list[str]] = {"train": [], "heldout": []}
    for entry in manifest.get("inputs") or []:
        uri = str(entry.get("uri") or "")
        rel = _relative(run_dir, uri)
        if rel is None or not rel.endswith(".npz"):
            continue  # the starting weights, or shards from outside the run
        role = "heldout" if data_eval and _in_spec(uri, data_eval) else "train"
        directory = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if directory not in found[role]:
            found[role].append(directory)
    return found


def _data(run_dir: str, files: list[str], pretraining: list[dict[str, Any]]) -> dict[str, Any]:
    """What the run trained on, as its data steps recorded it: the segmented text (documents, sentences), each
    shard directory (make-shards' totals and settings, its files' size, its validate-shards result) and, per
    pretraining phase, the shards it read with its batch and steps. Empty when the run made no data."""
    text, shard_sets = [], []
    for rel in files:
        parts = rel.split("/")
        if parts[-1] != MANIFEST_FILE or parts[0] in (PRETRAINED_DIR, REGISTRY_DIR, TASKS_DIR) or parts[0].startswith(
                FINETUNE_PREFIX):
            continue
        manifest = _read_json(run_dir, rel)
        directory = "/".join(parts[:-1])
        if manifest.get("step") == SEGMENT_STEP:
            text.append(_segmented(run_dir, directory, manifest))
        elif manifest.get("step") == SHARDS_STEP:
            validation = f"{directory}/{VALIDATION_FILE}" if directory else VALIDATION_FILE
            shard_sets.append(_shard_set(run_dir, directory, manifest, files,
                                         _read_json(run_dir, validation) if validation in files else None))
    if not text and not shard_sets:
        return {}
    by_dir = {s["dir"]: s for s in shard_sets}
    phases = []
    for phase in pretraining:
        inputs = phase.get("data") or {}
        train = [by_dir[d] for d in inputs.get("train", []) if d in by_dir]
        heldout = [by_dir[d] for d in inputs.get("heldout", []) if d in by_dir]
        for s in train + heldout:
            s["phases"].append(phase["phase"])
        for s in heldout:
            s["side"] = "heldout"
        config = phase.get("config") or {}
        phases.append({
            "phase": phase["phase"], "train": [s["dir"] for s in train], "heldout": [s["dir"] for s in heldout],
            "max_seq_length": _one({s["config"].get("max_seq_length") for s in train}),
            "max_predictions_per_seq": _one({s["config"].get("max_predictions_per_seq") for s in train}),
            "batch_size": config.get("batch_size"), "accumulate": config.get("accumulate", 1),
            "use_avg_len": config.get("use_avg_len", False), "world_size": phase.get("world_size"),
            "steps": phase.get("steps"), "total_steps": phase.get("total_steps"),
            "instances": _sum(s["instances"] for s in train), "documents": _sum(s["documents"] for s in train),
            "heldout_instances": _sum(s["instances"] for s in heldout),
            "heldout_documents": _sum(s["documents"] for s in heldout),
        })
    return {"text": text, "shard_sets": sorted(shard_sets, key=lambda s: (s["side"] == "heldout", s["dir"])),
            "phases": phases}


def _one(values: set[Any]) -> Any:
    """The value all of a phase's shards share; a list of them where they differ; None with none recorded."""
    values = {v for v in values if v is not None}
    return next(iter(values)) if len(values) == 1 else (sorted(values) or None)


def _sum(values: Iterator[Any]) -> int | None:
    found = [v for v in values if isinstance(v, int | float)]
    return sum(found) if found else None


def _segmented(run_dir: str, directory: str, manifest: dict[str, Any]) -> dict[str, Any]:
    totals = manifest.get("totals") or {}
    return {"dir": directory, "output": storage.join(run_dir, directory) if directory else run_dir,
            "inputs": [entry.get("uri") for entry in manifest.get("inputs") or []],
            "files": len(manifest.get("files") or manifest.get("outputs") or []),
            "documents": totals.get("documents"), "sentences": totals.get("sentences"),
            "dropped_empty_documents": totals.get("dropped_empty_documents"),
            "sentence_splitter": manifest.get("sentence_splitter") or {}}


def _shard_set(run_dir: str, directory: str, manifest: dict[str, Any], files: list[str],
               validation: dict[str, Any] | None) -> dict[str, Any]:
    config, totals = manifest.get("config") or {}, manifest.get("totals") or {}
    listed = [entry.get("path") for entry in manifest.get("shards") or []]
    vocab = manifest.get("vocab") or {}
    return {"dir": directory, "output": storage.join(run_dir, directory) if directory else run_dir,
            # Held-out: made as a split's held-out side, or read by a phase as its data_eval (set below).
            "side": "heldout" if config.get("split") == "heldout" else "train", "shards": len(listed),
            "bytes": _size(run_dir, directory, listed, files),
            "instances": totals.get("instances"), "documents": totals.get("documents"),
            "other_side_documents": totals.get("other_side_documents"), "tokens": totals.get("tokens"),
            "masked": totals.get("masked"), "random_next": totals.get("random_next"),
            "config": {key: config[key] for key in SHARD_SETTINGS if key in config},
            "vocab": {"uri": vocab.get("uri"), "size": vocab.get("size")},
            "validation": _validation(validation) if validation is not None else None, "phases": [],
            # A side of a held-out split with no document of an input file: no shard, by design (make-shards'
            # empty_side_ok), and why.
            "empty_side": manifest.get("empty_side")}


def _size(run_dir: str, directory: str, names: list[str], files: list[str]) -> int | None:
    """Bytes of a directory's shard files (make-shards records their count and hashes, not their size): None when
    one is missing or the sizes cannot be read."""
    rels = [f"{directory}/{name}" if directory else name for name in names]
    if not rels:
        return 0
    if not set(rels) <= set(files):
        return None
    try:
        if not storage.is_s3(run_dir):
            return sum(os.path.getsize(storage.join(run_dir, rel)) for rel in rels)
        bucket, key = storage.split_s3(storage.join(run_dir, directory) if directory else run_dir)
        prefix = key.rstrip("/") + "/" if key else ""
        wanted, total = {prefix + name for name in names}, 0
        for page in storage.s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            total += sum(obj["Size"] for obj in page.get("Contents", []) if obj["Key"] in wanted)
        return total
    except Exception as exc:  # noqa: BLE001 - a size is a detail of the report, never its failure
        log.info("%s: shard sizes not read (%s)", run_dir, exc)
        return None


def _validation(result: dict[str, Any]) -> dict[str, Any]:
    """validate-shards' result in brief: passed or not, what it checked (its suites' checks), what failed, and
    the masking statistics it measured."""
    checks = result.get("checks") or []
    suites: dict[str, list[str]] = {}
    for check in checks:
        suite = str(check.get("suite") or "checks").removeprefix("bert-shards-")
        suites.setdefault(suite, []).append(str(check.get("check") or check.get("expectation")))
    statistics = result.get("statistics") or {}
    return {"success": bool(result.get("success")), "shards": result.get("shards"), "checks": len(checks),
            "suites": suites, "failed": [f.get("message") or f.get("check") for f in result.get("failed") or []],
            "statistics": {key: statistics[key] for key in (
                "instances", "tokens", "predictions", "shown_mask", "shown_original", "random_next",
                "masked_fraction", "shown_mask_fraction", "shown_original_fraction", "random_next_fraction")
                if key in statistics},
            "finished_at": result.get("finished_at")}


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

    with quiet_artifact_transfers():
        yield MlflowClient(tracking_uri=uri, registry_uri=uri)


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
