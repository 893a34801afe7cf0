"""Small task functions for the DAGs: each runs one bert_core step in-process and returns what the next
task needs (output paths, metrics, MLflow run ids) as plain JSON-able values, so they can be XCom values.

They know nothing about Airflow: a DAG wraps them in `@task`, and tests call them directly. What they run
(settings, locations) comes from the DAG's plan (operators.plan_pretraining, plan_finetune, plan_demo), made
once in the DAG's first task.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from operators import ray_jobs
from operators.params import known_settings

if TYPE_CHECKING:
    from operators.plan_pretraining import PretrainingPlan

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def on_ray_cluster_when_asked(step: F) -> F:
    """Run the step as a Ray job (operators.ray_jobs) when RAY_ADDRESS is a Ray dashboard URL, else here.

    The job runs this same function on the cluster (operators.step_runner), so both paths compute the same
    thing. BERT_PIPELINE_RAY_WORKING_DIR uploads a code directory with the job, for clusters that do not
    have the project installed."""

    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        address = ray_jobs.submission_address()
        if address is None:
            return step(*args, **kwargs)
        bound = inspect.signature(step).bind(*args, **kwargs)
        bound.apply_defaults()
        config = ray_jobs.JobConfig(address, ray_jobs.default_submission_id(step.__name__),
                                    working_dir=os.environ.get("BERT_PIPELINE_RAY_WORKING_DIR") or None)
        return ray_jobs.run_step_as_job(step.__name__, dict(bound.arguments), config)

    return wrapper  # type: ignore[return-value]


def ensure_experiment(name: str) -> None:
    """Create the MLflow experiment if needed (artifacts under $BERT_PIPELINE_HOME/mlartifacts in the embedded
    store), before a step or a Ray job logs into it."""
    from bert_core.io.tracking import ensure_experiment as ensure

    ensure(name)


def segment(inputs: list[str], output: str) -> str:
    from bert_core.data.segment import segment as run

    run(list(inputs), output)
    return output


@on_ray_cluster_when_asked
def make_shards(segmented: str | list[str], output: str, vocab: str, settings: dict[str, Any] | None = None,
                split: str = "all") -> str:
    """Shards of `segmented`; with a holdout_fraction, only one side of the held-out split (`split`:
    "train", or "heldout" for the evaluation shards: one masking pass). `settings`: ShardConfig fields; the
    library's defaults for the rest.

    The DAGs make the training side one input file at a time and the held-out side of all the files at once, so
    the held-out task judges the corpus: it fails, naming the Param holdout_fraction and the files, when either
    side of the whole corpus is empty. A training side with no document (a one-document file whose document is
    held out) is an output with no shard whose manifest records why; that file gives no training shards and the
    run trains on the others' (pretrain_phases)."""
    from bert_core.data.instances import ShardConfig
    from bert_core.data.make_shards import heldout_config
    from bert_core.launch.ray_shards import make_shards as run

    inputs = [segmented] if isinstance(segmented, str) else list(segmented)
    config = ShardConfig(**known_settings(ShardConfig, settings, "make_shards settings", exclude=("split",)),
                         split="train" if split == "heldout" else split)
    made = run(inputs, output, vocab, heldout_config(config) if split == "heldout" else config, progress=False,
               empty_side_ok=split in ("train", "heldout"))
    totals = made.get("totals", {})
    if split == "train" and made.get("empty_side"):
        log.warning("%s: all %s of its document(s) are held out (holdout_fraction %s): it gives no training "
                    "shards; the run trains on the other files'", _names(inputs),
                    totals.get("other_side_documents"), config.holdout_fraction)
    if split == "heldout":
        _check_both_sides(inputs, config.holdout_fraction, held=int(totals.get("documents", 0)),
                          trained=int(totals.get("other_side_documents", 0)))
    return output


def _names(files: list[str], most: int = 5) -> str:
    """'a.txt, b.txt' (at most `most` names, then how many in all): the input files as the DAG user named them
    (a segmented file has its input's name)."""
    names = [Path(f).name for f in files]
    return ", ".join(names[:most]) + (f", ... ({len(names)} files)" if len(names) > most else "")


def _check_both_sides(files: list[str], fraction: float, held: int, trained: int) -> None:
    """The held-out split of the whole corpus, in the DAG's terms: both sides need a document."""
    from bert_core.errors import BertPipelineError

    total = held + trained
    if not held:
        raise BertPipelineError(
            f"holdout_fraction {fraction} held out none of the {total} document(s) of the input file(s) "
            f"{_names(files)}: the promotion gate scores the model on held-out documents; raise the Param "
            "holdout_fraction (each document is held out with that probability, by a hash of its text) or give "
            "more documents")
    if not trained:
        raise BertPipelineError(
            f"holdout_fraction {fraction} held out every one of the {total} document(s) of the input file(s) "
            f"{_names(files)}: none is left to train on; lower the Param holdout_fraction or give more documents")


def validate_shards(shards_dir: str) -> dict[str, Any]:
    """Fails the task (raises) when any expectation fails; returns the statistics otherwise."""
    from bert_core.data.validate_shards import validate_shards as run
    from bert_core.errors import BertPipelineError

    result = run(shards_dir)
    if not result["success"]:
        raise BertPipelineError(f"{shards_dir}: shard validation failed: "
                                + "; ".join(f["message"] for f in result["failed"]))
    return {"shards_dir": shards_dir, "validation": result["written_to"],
            "instances": int(result["statistics"].get("instances", 0))}


@on_ray_cluster_when_asked
def pretrain(shards_dir: str, output: str, settings: dict[str, Any] | None = None, vocab: str | None = None,
             data_eval: str | None = None) -> dict[str, Any]:
    """Pretrain (on Ray Train, local Ray unless RAY_ADDRESS, when settings num_workers > 1). `settings`:
    PretrainConfig fields (model or pretrained, num_steps, batch_size, optimizer, dtype, ...); the library's
    defaults for the rest, as the CLI (lr None: bert_core.pretrain.recipe's rule). `data_eval`: held-out
    shards, on which the final metrics (and the promotion gate) are computed. A retried task resumes from the
    run's last checkpoint (resume="auto")."""
    from bert_core.launch.run import run_step
    from bert_core.pretrain.config import PretrainConfig
    from bert_core.pretrain.step import PRETRAIN

    settings = known_settings(PretrainConfig, settings, "pretrain settings",
                      exclude=("data", "output", "vocab", "data_eval", "resume", "progress"))
    config = PretrainConfig(data=shards_dir, output=output, vocab=vocab, data_eval=data_eval, resume="auto",
                            progress=False, **settings)
    ensure_experiment("bert-pretrain")
    result = run_step(PRETRAIN, config)
    return {"output": output, "metrics": result["metrics"], "mlflow_run_id": result.get("mlflow_run_id"),
            "steps": result.get("training", {}).get("steps"), "metrics_on": "held-out" if data_eval else "training data",
            "learning_check": result.get("learning_check", {}).get("status")}


@on_ray_cluster_when_asked
def finetune(task: str, data_dir: str, model: str, output: str, settings: dict[str, Any] | None = None,
             search: dict[str, list[Any]] | None = None, max_concurrent_trials: int = 0) -> dict[str, Any]:
    """Fine-tune `model` on `task` (on Ray Train with settings num_workers > 1); the MLflow run (experiment
    bert-finetune/<task>) holds the logged model. `settings`: FinetuneConfig fields (epochs, lr, doc_stride,
    ...); the library's defaults for the rest, so no default is written here.

    `search` (a grid such as {"lr": [5e-5, 3e-5], "seed": [1, 2]}): one Ray Tune trial per grid point instead,
    each an MLflow child run of a parent `search` run; the best trial by the task's main metric is returned
    (its output and run, so it is the one evaluated and registered), with every trial and their spread."""
    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.errors import BertPipelineError
    from bert_core.finetune.step import FINETUNE, FinetuneConfig
    from bert_core.io import manifest, storage
    from bert_core.io.tracking import build_tracker
    from bert_core.launch.run import run_step
    from bert_core.tasks import catalog as tasks

    name = tasks.get(task).name
    settings = known_settings(FinetuneConfig, settings, "finetune settings", exclude=("task", "data_dir", "model", "output"))
    config = FinetuneConfig(task=name, data_dir=data_dir, model=model, output=output, **settings)
    ensure_experiment(f"bert-finetune/{name}")
    if search:
        return _search(config, search, max_concurrent_trials)
    tracker = build_tracker(True, experiment=f"bert-finetune/{name}", pyfunc=pyfunc_spec)
    try:
        before = manifest.read(output)
    except (FileNotFoundError, BertPipelineError):  # none yet, or not valid: the step itself reports the latter
        before = None
    try:
        result = run_step(FINETUNE, config, tracker)
        if before is not None and (result["started_at"], result["finished_at"]) == (before["started_at"],
                                                                                   before["finished_at"]):
            # The output was already up to date (same config and inputs): this run logged nothing, so it
            # records the existing model, making it registrable like a fresh one.
            tracker.log_metrics({f"best/{k}": v for k, v in result["metrics"].items()}, step=0)
            tracker.set_tags({"reused_output": output})
            tracker.log_model_dir(storage.local_dir(storage.join(output, "model")))
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end()
    return {"task": name, "data_dir": data_dir, "output": output, "metrics": result["metrics"],
            "mlflow_run_id": tracker.run_id, "version_2": bool(config.version_2)}


def _search(config, grid: dict[str, list[Any]], max_concurrent: int) -> dict[str, Any]:
    """A Ray Tune search under one parent MLflow run; the best trial is what the next steps use."""

    from bert_core.io import storage
    from bert_core.io.tracking import build_tracker
    from bert_core.launch import ray_tune
    from bert_core.tasks import catalog as tasks

    config.validate()
    metric = tasks.get(config.task).main_metric
    parent = build_tracker(True, experiment=f"bert-finetune/{config.task}", run_name=f"search {config.task}")
    parent.log_params({"search": json.dumps(grid), "metric": metric, "trials": len(ray_tune.grid_points(grid))})
    try:
        found = ray_tune.sweep(config, grid, config.output, metric, parent_run_id=parent.run_id,
                               max_concurrent=max_concurrent)
        best, trials = found["best"], found["trials"]
        spread = ray_tune.spread(trials, metric)
        parent.log_metrics({**{f"best/{k}": v for k, v in best.metrics.items()},
                            **{f"spread/{metric}_{k}": v for k, v in spread.items()}}, step=0)
        parent.set_tags({"search.best_trial": best.name, "search.best_run_id": best.mlflow_run_id or "none"})
        report = {"metric": metric, "best": best.name, "spread": spread, "parent_run_id": parent.run_id,
                  "trials": [dataclasses.asdict(t) for t in trials]}
        storage.write_text(storage.join(config.output, "search.json"), json.dumps(report, indent=2) + "\n")
    except BaseException:
        parent.end("FAILED")
        raise
    parent.end()
    log.info("search on %s: best %s (%s=%.4f); %s over %d trials: %s", config.task, best.name, metric,
             best.metrics[metric], metric, len(trials), spread)
    return {"task": config.task, "data_dir": config.data_dir, "output": best.output, "metrics": best.metrics,
            "mlflow_run_id": best.mlflow_run_id, "version_2": bool(config.version_2), "search": report}


def evaluate(finetuned: dict[str, Any], output: str) -> dict[str, Any]:
    """Re-score the fine-tuned model's dev predictions (every file fine-tuning scored, listed in its
    scored.json) with the official-equivalent scorers; writes `metrics.json` and `manifest.json` in `output` (a
    directory or s3:// prefix, written atomically); returns `finetuned` with these metrics."""
    import tempfile

    from bert_core.finetune.step import SCORED, chance_of_output, score_output
    from bert_core.io import manifest, storage
    from bert_core.tasks import catalog as tasks

    started = manifest.now()
    task = tasks.get(finetuned["task"])
    gold_dir = storage.local_dir(finetuned["data_dir"])
    source = finetuned["output"]
    with tempfile.TemporaryDirectory(prefix="bert-evaluate-") as scratch:
        pred_dir = storage.local_path(source) if not storage.is_s3(source) else Path(scratch)
        scored = json.loads(storage.read_text(storage.join(source, SCORED)))
        files = [SCORED] + [e[k] for e in scored for k in ("prediction_file", "na_prob_file") if e[k]]
        if storage.is_s3(source):
            for name in files:
                storage.download_file(storage.join(source, name), pred_dir / name)
        metrics = score_output(pred_dir, gold_dir, task.name)
        chance, dev_sha256 = chance_of_output(scored, gold_dir, task.name)
        inputs = {storage.join(source, name): manifest.sha256_file(pred_dir / name) for name in files}
        inputs.update({str(gold_dir / e["gold_file"]): manifest.sha256_file(gold_dir / e["gold_file"]) for e in scored})
    with storage.atomic_output_dir(output, overwrite=True) as out:
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        manifest.write(manifest.build("evaluate", {"task": task.name}, inputs, out, ["metrics.json"], started,
                                      metrics=metrics), out)
    return {**finetuned, "metrics": metrics, "chance": chance, "dev_sha256": dev_sha256, "evaluation": output}


def _dev_file_bar(finetuned: dict[str, Any]) -> dict[str, Any]:
    """`chance` and `dev_sha256` of a fine-tuning output, as evaluate() adds them: without them a first version
    at chance would be promoted."""
    from bert_core.finetune.step import SCORED, chance_of_output
    from bert_core.io import storage
    from bert_core.tasks import catalog as tasks

    scored = json.loads(storage.read_text(storage.join(finetuned["output"], SCORED)))
    chance, dev_sha256 = chance_of_output(scored, storage.local_dir(finetuned["data_dir"]),
                                          tasks.get(finetuned["task"]).name)
    return {"chance": chance, "dev_sha256": dev_sha256}


def register_and_promote(trained: dict[str, Any], report_dir: str, promote: bool = True,
                         floors: dict[str, float] | None = None) -> dict[str, Any]:
    """Register the run's logged model as a new version of bert-<task> (`trained["task"]`; bert-squad2 for a
    SQuAD 2.0 model, `trained["version_2"]`; bert-pretrained when it has none) and, when asked, promote it behind the metric gates. Returns the promotion report
    (or the registration)."""
    from operators import registry

    name = registry.model_name(trained.get("task"), bool(trained.get("version_2")))
    if name != registry.PRETRAINED and "chance" not in trained:  # a finetune() result not passed through evaluate()
        trained = {**trained, **_dev_file_bar(trained)}
    tags = {"output": trained["output"]}
    for key in ("metrics_on", "learning_check", registry.DEV_DATA_TAG):
        if trained.get(key):
            tags[key] = str(trained[key])
    registered = registry.register(trained["mlflow_run_id"], name, trained["metrics"], tags=tags,
                                   chance=trained.get("chance"))
    if not promote:
        return {"name": name, "candidate": registered["version"], "promoted": None,
                "candidate_metrics": registered["metrics"]}
    from bert_core.io import storage
    report = registry.promote(name, registered["version"], floors=floors,
                              report_path=storage.join(report_dir, f"{name}-v{registered['version']}.json"))
    if not report["promoted"]:
        log.warning("%s version %s was registered but not promoted: %s (to decide by hand: bert-pipeline promote %s %s "
                    "--override 'WHY' or --reject 'WHY')", name, registered["version"], "; ".join(report["reasons"]),
                    name, registered["version"])
    if trained.get("search"):  # the run's summary shows how much the trials varied, not only the winner
        search = trained["search"]
        report["search"] = {"metric": search["metric"], "best": search["best"], "spread": search["spread"],
                            "trials": {t["name"]: t["metrics"].get(search["metric"]) for t in search["trials"]}}
    return report


def summarize(results: list[dict[str, Any]], output: str, order: list[str] | None = None) -> dict[str, Any]:
    """Collect the registry decisions into `output` (JSON) and return them, in the order of the model names in
    `order` (the plan's tasks): a mapped task's results may come in the order they finished."""
    from bert_core.io import storage
    from bert_core.io.tracking import default_tracking_uri

    rank = {name: i for i, name in enumerate(order or [])}
    models = sorted(results, key=lambda r: rank.get(r.get("name"), len(rank)))
    summary = {"tracking_uri": default_tracking_uri(), "summary_file": output, "models": models}
    storage.write_text(output, json.dumps(summary, indent=2) + "\n")
    return summary


def segmented_files(segmented: str) -> list[str]:
    """The per-input files a segment output directory holds (the fan-out of make-shards), less those with no
    document: segment writes an empty output for an empty input, and its own make-shards task then failed the
    whole run (make-shards of a directory only warns about such a file)."""
    from bert_core.io import manifest, storage
    made = manifest.read(segmented)
    empty = {entry.get("output") for entry in made.get("files", []) if entry.get("documents") == 0}
    return [storage.join(segmented, entry["path"]) for entry in made["outputs"] if entry["path"] not in empty]


def pretrain_phases(plan: PretrainingPlan, segmented: list[str]) -> dict[str, Any]:
    """Pretrain the plan's phases in order, each on its own shards and held-out shards, each after the first
    starting from the previous phase's weights (its plan says so). A retried task skips the phases already done
    (their outputs are up to date) and resumes the interrupted one from its last checkpoint. Returns the last
    phase's result, with every phase's metrics."""
    results = []
    for phase in plan.phases:
        trained, all_held_out = _training_shard_dirs(phase, segmented)
        result = pretrain(",".join(trained), phase.output, phase.pretrain, vocab=plan.vocab,
                          data_eval=phase.heldout_dir)
        results.append({"phase": phase.name or "single",
                        **{k: result[k] for k in ("output", "metrics", "mlflow_run_id")},
                        **({"files_all_held_out": all_held_out} if all_held_out else {})})
    return {**result, "phases": results}


def _training_shard_dirs(phase: Any, segmented: list[str]) -> tuple[list[str], list[str]]:
    """The phase's per-file training shard directories that hold shards, and the files whose every document was
    held out (their directories' manifests record no shard, by design: make_shards). An error naming the Param
    holdout_fraction and the files when no file has a training shard."""
    from bert_core.errors import BertPipelineError
    from bert_core.io import manifest

    trained, all_held_out = [], []
    for file in segmented:
        directory = phase.shard_dir(file)
        try:
            made = manifest.read(directory)
        except FileNotFoundError:
            made = {}  # not made here: pretrain says so
        if made.get("empty_side") and not made.get("shards"):
            all_held_out.append(file)
        else:
            trained.append(directory)
    if all_held_out:
        log.warning("%s: every document held out (holdout_fraction %s): no training shards from %s",
                    _names(all_held_out), phase.shards.get("holdout_fraction"),
                    "it" if len(all_held_out) == 1 else "them")
    if not trained:
        raise BertPipelineError(
            f"holdout_fraction {phase.shards.get('holdout_fraction')} held out every document of the input "
            f"file(s) {_names(all_held_out)}: none is left to train on; lower the Param holdout_fraction or give "
            "more documents")
    return trained, all_held_out
