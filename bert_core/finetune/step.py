"""Fine-tuning a pretrained BERT on one task, with dev scoring every epoch and the best epoch kept.

The optimizer, schedule, mixed precision and update step are pretraining's (bert_core.train), so
both share one implementation. Dev metrics come from the official-equivalent scorers
(bert_core.metrics.scoring), which read exactly the files this step writes, so the metrics in the
manifest are what `bert-pipeline evaluate` prints for those files.

`finetune(cfg)` runs in this process; `bert_core.launch.run.run_step(FINETUNE, cfg)` runs it there or,
with --num-workers N > 1 (or RAY_ADDRESS), on Ray Train like pretraining: every worker runs `train`,
DDP over gloo (CPU) or NCCL (GPU). Each update's batch of --batch-size rows is split across the workers,
and every micro-batch's mean loss is weighted by its share of the whole batch (rows, or labelled tokens
for NER), so N workers compute the gradient one worker computes on the same batch. Evaluation files are
split across the workers too; rank 0 gathers the outputs, writes and scores the predictions, keeps
the best epoch, logs to MLflow and writes the output.

Output directory: `model/` (the best epoch's weights, config with labels, vocab), the best
epoch's dev predictions, test predictions when the data has a test file, `metrics.json` (every
epoch) and `manifest.json` whose `metrics` are the best epoch's dev metrics. The MLflow run
(experiment `bert-finetune/<TASK>`) gets the config as params, every epoch's metrics, the best
epoch's as `best/<metric>`, the manifest, metrics.json, the prediction files (artifact path
`predictions/`) and the model.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from bert_core.errors import BertPipelineError
from bert_core.finetune import task_card
from bert_core.finetune.config import FinetuneConfig
from bert_core.finetune.tasks.adapters import ADAPTERS, Adapter, EvalSet
from bert_core.io import manifest, storage
from bert_core.io.tracking import NullTracker, Tracker, standard_tags
from bert_core.metrics.scoring import chance_metrics, score_predictions
from bert_core.model.tokenization import BertTokenizer
from bert_core.model.weights import resolve_model_dir, save_state_dict
from bert_core.tasks import catalog
from bert_core.train import dist
from bert_core.train.loop import PROGRESS_LINE_S, optimizer_step
from bert_core.train.optim import build_optimizer, build_scheduler
from bert_core.train.precision import Precision, PrecisionChoice, agreed, resolve_precision
from bert_core.train.step_spec import Plan, StepSpec, Worker

log = logging.getLogger(__name__)

PREDICTIONS_ARTIFACT = "predictions"  # MLflow artifact path of the prediction files

SCORED = "scored.json"  # in an output (and each epoch's predictions): the files the dev metrics come from
def experiment_name(task: str) -> str:
    return f"bert-finetune/{catalog.get(task).name}"


@dataclass
class Prepared:
    """What every worker needs before training: the task, its files, the inputs' hashes and the precision."""

    task: catalog.TaskInfo
    model_dir: Path
    adapter: Adapter
    inputs: dict[str, str]  # path (an s3:// file's URI) -> sha256 of the files this run reads
    train_input: str  # the train file's key in `inputs`
    # The compute precision, resolved for the device the steps run on (agreed by all workers); None in the
    # driver's check (prepare without a device), which trains nothing.
    precision: PrecisionChoice | None = None


def prepare(cfg: FinetuneConfig, inputs: dict[str, str] | None = None,
            device: torch.device | None = None) -> Prepared:
    """Check the config, the task's files and the model; hash the inputs unless given (Ray workers get
    the driver's hashes); with the `device` the steps run on, resolve the precision (--dtype auto). All workers
    call it with a device together."""
    cfg.validate()
    task = catalog.get(cfg.task)
    data_dir = storage.local_dir(cfg.data_dir)
    if not data_dir.is_dir():
        raise BertPipelineError(f"--data-dir {cfg.data_dir}: no such directory")
    model_dir = resolve_model_dir(cfg.model)
    adapter: Adapter = ADAPTERS[task.kind](task, data_dir, BertTokenizer.from_model_dir(model_dir), cfg)
    if inputs is None:
        # Only the files this run reads: a data dir may hold much more (all 15 XNLI-MT train files).
        files = [adapter.train_file()] + [path for _, path in adapter.eval_files()]
        files += [p for p in sorted(model_dir.iterdir()) if p.is_file() and p.suffix in (".safetensors", ".bin")]
        # Named by their s3:// URIs when they are cached copies: the cache's path differs from one machine (or HOME)
        # to the next, and a retry elsewhere must find the same inputs.
        inputs = {storage.source_uri(p): manifest.sha256_file(p) for p in files}
    precision = None if device is None else agreed(dist.all_gather_objects(resolve_precision(cfg.dtype, device)))
    return Prepared(task, model_dir, adapter, inputs, storage.source_uri(adapter.train_file()), precision)


def _existing_result(cfg: FinetuneConfig, prepared: Prepared) -> dict | None:
    """The manifest when --output already holds this exact result; an error when it holds anything else
    (unless --overwrite), raised before training rather than after it."""
    if manifest.is_up_to_date(cfg.output, "finetune", cfg.result_config(), prepared.inputs):
        return manifest.read(cfg.output)
    if storage.is_s3(cfg.output):
        taken = storage.exists(cfg.output)
    else:
        out = storage.local_path(cfg.output)
        taken = out.exists() and (not out.is_dir() or any(out.iterdir()))
    if taken and not cfg.overwrite:
        raise BertPipelineError(f"{cfg.output} already exists and is not this run's result; pass --overwrite "
                                "to replace it")
    return None


def finetune(cfg: FinetuneConfig, tracker: Tracker | None = None) -> dict:
    """Fine-tune in this process; returns the output manifest. The run's params, metrics and model go to
    `tracker`, which is left open for the caller.

    The MLflow run is opened by whoever runs the step: bert_core.launch.run.run_step(FINETUNE, cfg) (the CLI,
    the Airflow tasks) opens one in `bert-finetune/<TASK>` whose model is logged as the task pyfunc of
    bert_core.deploy, which fine-tuning does not import (deploy sits above it). So with cfg.tracking on, a
    tracker must be given (or run_step used); with it off, nothing is tracked.
    """
    if cfg.num_workers > 1:
        raise BertPipelineError(f"num_workers={cfg.num_workers} runs on Ray Train: call "
                                "bert_core.launch.run.run_step(FINETUNE, cfg)")
    if tracker is None and cfg.tracking:
        raise BertPipelineError("finetune(cfg) with tracking on needs the MLflow run to log into: run it with "
                                "bert_core.launch.run.run_step(FINETUNE, cfg), which opens one, pass a tracker, or "
                                "set tracking=False")
    plan = _plan(cfg)
    if plan.done is not None:
        return plan.done
    return _work(cfg, plan, tracker if tracker is not None else NullTracker(), Worker())


def _seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _device(cfg: FinetuneConfig) -> torch.device:
    if cfg.device:
        return torch.device(cfg.device)
    if cfg.use_gpu and not torch.cuda.is_available():
        raise BertPipelineError("--use-gpu: no CUDA device is visible")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _batch(arrays: dict[str, np.ndarray], index: np.ndarray, device: torch.device) -> dict[str, torch.Tensor]:
    """Rows `index`, cut to the longest real sequence among them (less padding, same result)."""
    length = int(arrays["attention_mask"][index].sum(1).max())
    out = {}
    for key, value in arrays.items():
        rows = value[index]
        if rows.ndim == 2 and key in ("input_ids", "token_type_ids", "attention_mask", "labels") \
                and rows.shape[1] == arrays["attention_mask"].shape[1]:
            rows = rows[:, :length]
        out[key] = torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    return out


@torch.no_grad()
def predict(model: torch.nn.Module, arrays: dict[str, np.ndarray], names: tuple[str, ...], batch_size: int,
            precision: Precision, device: torch.device) -> dict[str, np.ndarray]:
    """Model outputs for every row, padded back to the arrays' full length for token-level outputs."""
    model.eval()
    n, full = arrays["input_ids"].shape
    outputs: dict[str, list[np.ndarray]] = {name: [] for name in names}
    inputs = {k: arrays[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    for start in range(0, n, batch_size):
        batch = _batch(inputs, np.arange(start, min(n, start + batch_size)), device)
        with precision.autocast():
            out = model(**batch)
        padding = batch["attention_mask"].cpu().numpy() == 0
        for name in names:
            value = getattr(out, name).float().cpu().numpy()
            if name != "logits" or value.ndim == 3:  # token-level: pad back to `full` positions
                # Padded positions never answer (as in serving, which cuts them off): in the packed path their
                # outputs are the head's bias alone, which could fill SQuAD's n-best and leave "empty".
                value[padding[:, :value.shape[1]]] = -1e4
                pad = [(0, 0), (0, full - value.shape[1])] + [(0, 0)] * (value.ndim - 2)
                value = np.pad(value, pad, constant_values=-1e4)
            outputs[name].append(value)
    return {name: np.concatenate(parts) for name, parts in outputs.items()}


def _predict_on_workers(model: torch.nn.Module, arrays: dict[str, np.ndarray], names: tuple[str, ...],
                        batch_size: int, precision: Precision, device: torch.device) -> dict[str, np.ndarray] | None:
    """Every row's outputs at rank 0 (None on the other ranks): each worker predicts a contiguous share."""
    rank, world = dist.rank(), dist.world_size()
    share = np.array_split(np.arange(len(arrays["input_ids"])), world)[rank]
    part = None
    if len(share):
        part = predict(model, {k: v[share] for k, v in arrays.items()}, names, batch_size, precision, device)
    parts = [p for p in dist.all_gather_objects(part) if p is not None]  # in rank order = row order
    if rank != 0:
        return None
    return {name: np.concatenate([p[name] for p in parts]) for name in names}


def score_output(pred_dir: Path, gold_dir: Path, task: str) -> dict[str, float]:
    """Score the prediction files listed in `pred_dir`/scored.json against the gold files in `gold_dir`: the
    metrics fine-tuning reports, recomputed from files (the first dev file's under their official names)."""
    try:
        scored = json.loads((pred_dir / SCORED).read_text())
    except FileNotFoundError:
        raise BertPipelineError(f"{pred_dir}: no {SCORED} (not a fine-tuning output of this version)") from None
    metrics: dict[str, float] = {}
    for i, entry in enumerate(scored):
        na_prob = pred_dir / entry["na_prob_file"] if entry["na_prob_file"] else None
        scores = score_predictions(task, gold_dir / entry["gold_file"], pred_dir / entry["prediction_file"], na_prob,
                        language=entry["language"])
        metrics.update(_prefixed(entry["split"], i == 0, scores))
    return metrics


def chance_of_output(scored: list[dict[str, Any]], gold_dir: Path, task: str) -> tuple[dict[str, float], str]:
    """(chance metrics, sha256) of the dev file an output's metrics keep the official names of (the first entry
    of its scored.json): what a model that ignores its input scores there, promotion's bar for a first version,
    and which file that is, since promotion compares only metrics of one dev file."""
    gold = gold_dir / scored[0]["gold_file"]
    return chance_metrics(task, gold, language=scored[0]["language"]), manifest.sha256_file(gold)


def _prefixed(name: str, first: bool, metrics: dict[str, float]) -> dict[str, float]:
    """The first dev file's metrics keep their official names; others (MNLI mismatched) get a prefix."""
    return dict(metrics) if first else {f"{name}/{k}": v for k, v in metrics.items()}


def _train_step(model: torch.nn.Module, adapter: Adapter, arrays: dict[str, np.ndarray], group: list[np.ndarray],
                precision: Precision, device: torch.device) -> float:
    """Forward and backward of one update's micro-batches, each worker on its share of every micro-batch;
    returns the loss of the whole (global, accumulated) batch.

    Every share's mean loss is weighted by its share of the batch's loss terms (adapter.loss_weight,
    summed over workers before the forward passes), so accumulation and workers add up to the mean over
    the whole batch; DDP averages the workers' gradients, hence the factor `world`."""
    rank, world = dist.rank(), dist.world_size()
    shares = [np.array_split(index, world)[rank] for index in group]
    weights = torch.tensor([float(adapter.loss_weight(arrays, s)) if len(s) else 0.0 for s in shares], device=device)
    total = float(dist.all_reduce_sum(weights.sum().reshape(1))[0])
    step_loss = torch.zeros(1, device=device)
    for i, (share, weight) in enumerate(zip(shares, weights.tolist())):
        # A worker with no rows of this micro-batch (fewer rows than workers) still runs a forward and
        # backward, on a row it does not own and with weight 0, because DDP's gradient all-reduce needs
        # every worker.
        rows = share if weight > 0 else group[i][:1]
        sync = i == len(shares) - 1 or not hasattr(model, "no_sync")
        with contextlib.nullcontext() if sync else model.no_sync():
            with precision.autocast():
                loss = model(**_batch(arrays, rows, device)).loss
            fraction = weight / max(total, 1.0)
            precision.scale(loss * (fraction * world)).backward()
        step_loss += loss.detach().float() * fraction
    return float(dist.all_reduce_sum(step_loss)[0])


def train(cfg: FinetuneConfig, tracker: Tracker, prepared: Prepared,
          device: torch.device | None = None) -> dict:
    """Train on the task's train file, score dev each epoch, write the best epoch's model and predictions.

    Runs on every worker (one in-process worker, or each Ray Train worker); returns the manifest on all.
    """
    rank, world = dist.rank(), dist.world_size()
    tracker = tracker if rank == 0 else NullTracker()
    task, adapter = prepared.task, prepared.adapter
    started = manifest.now()
    device = device or _device(cfg)
    if prepared.precision is None:
        raise BertPipelineError("train() needs the precision resolved for its device: prepare(cfg, inputs, device)")
    _seed_everything(cfg.seed)
    train_arrays = adapter.train_arrays()
    if cfg.max_train_examples:
        train_arrays = {k: v[:cfg.max_train_examples] for k, v in train_arrays.items()}
    eval_sets = adapter.eval_sets()
    model = adapter.model_class.from_pretrained(str(prepared.model_dir), **adapter.config_overrides()).to(device)
    if world > 1:
        # The new head's initial weights came from cfg.seed on every worker (and DDP broadcasts rank 0's);
        # dropout now draws from a stream of each worker's own. One worker keeps cfg.seed's stream.
        torch.manual_seed(int(np.random.SeedSequence([cfg.seed, rank]).generate_state(1)[0]))
    ddp_model = dist.wrap_ddp(model, device)
    n_train = len(train_arrays["input_ids"])
    steps_per_epoch = math.ceil(n_train / (cfg.batch_size * cfg.accumulate))
    total_steps = steps_per_epoch * cfg.epochs
    optimizer = build_optimizer(model, cfg.optimizer_name(), cfg.lr, cfg.weight_decay, cfg.adam_eps)
    scheduler = build_scheduler(optimizer, total_steps, cfg.warmup_ratio)
    precision = Precision(prepared.precision.dtype, device)
    # Dev predictions (the scored metrics, the check examples promotion compares the served model with) run in
    # float32: the model is saved and served in float32.
    scoring = Precision("float32", device)
    tracker.set_tags(standard_tags(prepared.inputs.get(prepared.train_input)))
    tracker.log_params({**{k: v for k, v in cfg.result_config().items() if v is not None}, "world_size": world,
                        "precision": prepared.precision.dtype, "precision_reason": prepared.precision.reason})
    if rank == 0:
        log.info("%s", prepared.precision.describe())
        log.info("fine-tuning %s on %d training rows (%d updates over %d epochs, %d worker(s)) from %s",
                 task.name, n_train, total_steps, cfg.epochs, world, storage.source_uri(prepared.model_dir))
    history: list[dict[str, float]] = []
    best: tuple[float, int, dict, Path] | None = None
    scratch = Path(tempfile.mkdtemp(prefix="bert-finetune-"))
    step = 0
    try:
        for epoch in range(cfg.epochs):
            ddp_model.train()
            order = np.random.default_rng(cfg.seed + epoch).permutation(n_train)  # the same on every worker
            micro = [order[i:i + cfg.batch_size] for i in range(0, n_train, cfg.batch_size)]
            # disable=None: drawn on a terminal only (in a task log every redraw was a line at error level).
            bar = tqdm(range(0, len(micro), cfg.accumulate), desc=f"epoch {epoch + 1}/{cfg.epochs}", unit="update",
                       disable=True if rank != 0 else None)
            seen, t0, loss_sum = 0, time.perf_counter(), 0.0
            last_line = time.monotonic()
            for first in bar:
                group = micro[first:first + cfg.accumulate]
                step_loss = _train_step(ddp_model, adapter, train_arrays, group, precision, device)
                result = optimizer_step(ddp_model, optimizer, scheduler, precision, cfg.max_grad_norm, step, step_loss)
                step += 1
                seen += sum(len(g) for g in group)
                loss_sum += step_loss
                bar.set_postfix(loss=f"{step_loss:.4f}", lr=f"{result.lr:.2e}",
                                ex_s=f"{seen / (time.perf_counter() - t0):.1f}")
                # Without the bar (stderr not a terminal: `ray job submit`, nohup, an Airflow task log), a line
                # every PROGRESS_LINE_S: an epoch of a few thousand rows on CPU is many silent minutes otherwise.
                if bar.disable and rank == 0 and time.monotonic() - last_line >= PROGRESS_LINE_S:
                    last_line = time.monotonic()
                    log.info("epoch %d/%d: update %d of %d, loss %.4f, lr %.2e, %.1f examples/s", epoch + 1,
                             cfg.epochs, first // cfg.accumulate + 1, len(bar), step_loss, result.lr,
                             seen / (time.perf_counter() - t0))
            epoch_metrics = {"train_loss": loss_sum / max(1, len(bar))}
            epoch_dir = scratch / f"epoch-{epoch + 1}"
            epoch_dir.mkdir()
            dev_metrics = evaluate_sets(adapter, model, eval_sets, cfg, scoring, device, epoch_dir, task)
            epoch_metrics.update(dev_metrics)
            history.append({"epoch": epoch + 1, **epoch_metrics})
            tracker.log_metrics(epoch_metrics, step=epoch + 1)
            if rank == 0:
                log.info("epoch %d: %s", epoch + 1, json.dumps({k: round(v, 4) for k, v in epoch_metrics.items()}))
            score = dev_metrics.get(task.main_metric, math.nan)
            if math.isnan(score):  # undefined (e.g. Pearson of constant predictions): never the best
                score = -math.inf
            if rank == 0 and (best is None or score > best[0]):
                state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
                best = (score, epoch + 1, state, epoch_dir)
        result_manifest = None
        if rank == 0:
            assert best is not None
            result_manifest = _write_output(cfg, model, prepared, best, history, started, tracker, world)
        return dist.broadcast_object(result_manifest)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def evaluate_sets(adapter: Adapter, model, eval_sets: list[EvalSet], cfg: FinetuneConfig,
                  precision: Precision, device, out_dir: Path, task) -> dict[str, float]:
    """Predict every evaluation file (split across workers); rank 0 writes and scores the predictions and
    tells every worker the metrics, or the error that stops them all. Each epoch's dev scoring, and
    bert_core.finetune.evaluate's scoring of a model on disk."""
    rank, world = dist.rank(), dist.world_size()
    outputs = [_predict_on_workers(model, s.arrays, adapter.output_names, cfg.eval_batch_size, precision, device)
               for s in eval_sets]
    decision: dict[str, Any] = {}
    if rank == 0:
        try:
            decision["metrics"] = _write_and_score(adapter, eval_sets, outputs, cfg, out_dir, task)
        except BertPipelineError as exc:
            if world == 1:
                raise
            decision["error"] = str(exc)
    decision = dist.broadcast_object(decision)
    if "error" in decision:
        raise BertPipelineError(decision["error"])
    return decision["metrics"]


def _write_and_score(adapter: Adapter, eval_sets: list[EvalSet], outputs: list[dict[str, np.ndarray]],
                     cfg: FinetuneConfig, out_dir: Path, task) -> dict[str, float]:
    scored = []
    for eval_set, eval_outputs in zip(eval_sets, outputs):
        written = adapter.write(eval_set, eval_outputs, out_dir)
        if eval_set.has_gold and not scored:
            # The first scored split's first examples and these very predictions: promotion checks the
            # registered artifact against them (they travel in model/, see task_card).
            task_card.write_checks(out_dir, adapter.check_examples(eval_set, eval_outputs))
        if eval_set.has_gold:
            scored.append({"split": eval_set.name, "gold_file": written.gold_file.name,
                           "prediction_file": written.prediction_file, "na_prob_file": written.na_prob_file,
                           "language": cfg.language})
    # What was scored, so that the evaluate step re-scores exactly these files (score_output).
    (out_dir / SCORED).write_text(json.dumps(scored, indent=2) + "\n")
    metrics = score_output(out_dir, Path(adapter.data_dir), task.name)
    return metrics


def _write_output(cfg: FinetuneConfig, model, prepared: Prepared, best, history, started: str, tracker: Tracker,
                  world: int) -> dict:
    """The output directory, committed at once; its files are logged to the MLflow run before the commit."""
    score, epoch, state, epoch_dir = best
    task = prepared.task
    with storage.atomic_output_dir(cfg.output, overwrite=cfg.overwrite) as tmp:
        (tmp / "model").mkdir()
        vocab = prepared.model_dir / "vocab.txt"
        save_state_dict(state, model.config, tmp / "model", vocab if vocab.is_file() else None)
        task_card.write_card(tmp / "model", task_card.card_from_config(task.name, task.kind, cfg))
        predictions = []
        for path in sorted(epoch_dir.iterdir()):
            if path.name == task_card.CHECKS:
                shutil.copyfile(path, tmp / "model" / path.name)
                continue
            shutil.copyfile(path, tmp / path.name)
            predictions.append(path.name)
        files = [f"model/{p.name}" for p in sorted((tmp / "model").iterdir())]
        best_metrics = {k: v for k, v in history[epoch - 1].items() if k not in ("epoch", "train_loss")}
        (tmp / "metrics.json").write_text(json.dumps({"best_epoch": epoch, "main_metric": task.main_metric,
                                                      "dev": best_metrics, "epochs": history}, indent=2) + "\n")
        files += predictions + ["metrics.json"]
        result = manifest.build("finetune", cfg.result_config(), prepared.inputs, tmp, files, started,
                                metrics=best_metrics, extra={"task": task.name, "best_epoch": epoch,
                                                             "world_size": world, "mlflow_run_id": tracker.run_id,
                                                             "precision": prepared.precision.as_dict()})
        manifest.write(result, tmp)
        tracker.log_metrics({f"best/{k}": v for k, v in best_metrics.items()}, step=epoch)
        for name in predictions:
            tracker.log_artifact(tmp / name, PREDICTIONS_ARTIFACT)
        tracker.log_artifact(tmp / manifest.MANIFEST)
        tracker.log_artifact(tmp / "metrics.json")
        tracker.log_model_dir(tmp / "model")
    log.info("best epoch %d (%s=%.4f); wrote %s", epoch, task.main_metric, score, cfg.output)
    return result


# --------------------------------------------------------------------------- as a launchable step


def _plan(cfg: FinetuneConfig) -> Plan:
    """Checks and hashes on the driver; an output that already holds this result means nothing to do."""
    prepared = prepare(cfg)
    done = _existing_result(cfg, prepared)
    if done is None:
        prepared.adapter.check_files()
    else:
        log.info("%s already holds this fine-tuning result (same config and inputs): nothing to do", cfg.output)
    return Plan(prepared.inputs, done)


def _work(cfg: FinetuneConfig, plan: Plan, tracker: Tracker, worker: Worker) -> dict[str, Any]:
    device = worker.device or _device(cfg)
    return train(cfg, tracker, prepare(cfg, inputs=plan.inputs, device=device), device=device)


def _experiment(cfg: FinetuneConfig) -> str:
    return experiment_name(cfg.task)


# How bert_core.launch runs fine-tuning, in this process or on Ray Train. Fine-tuning keeps no
# checkpoints (a run is minutes to hours and restarts from scratch): each Ray run gets a fresh name.
FINETUNE = StepSpec(
    name="finetune", config_type=FinetuneConfig, experiment=_experiment, plan=_plan, work=_work,
    path_fields=("data_dir", "output", "train_file", "storage"), name_fields=("model",),
)
