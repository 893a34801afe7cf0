"""Fine-tuning a pretrained BERT on one task, with dev scoring every epoch and the best epoch kept.

The optimizer, schedule, mixed precision and update step are pretraining's (bert_core.train), so
both share one implementation. Dev metrics come from the official scorers, which live in the
evaluation layer: the caller passes them in as `scorer(task, gold_file, prediction_file,
na_prob_file)`, and they read exactly the files this step writes, so the metrics in the manifest
are what `bert-pipeline evaluate` prints for those files.

Output directory: `model/` (the best epoch's weights, config with labels, vocab), the best
epoch's dev predictions, test predictions when the data has a test file, `metrics.json` (every
epoch) and `manifest.json` whose `metrics` are the best epoch's dev metrics.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from bert_core import manifest, storage
from bert_core.checkpoint import resolve_model_dir, save_state_dict
from bert_core.errors import BertPipelineError
from bert_core.tasks import registry
from bert_core.tasks.adapters import ADAPTERS, Adapter, EvalSet
from bert_core.tokenization import BertTokenizer
from bert_core.tracking import Tracker, build_tracker, standard_tags
from bert_core.train.loop import optimizer_step
from bert_core.train.optim import build_optimizer, build_scheduler
from bert_core.train.precision import Precision

log = logging.getLogger(__name__)

Scorer = Callable[..., dict[str, float]]
OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "bertadam": "bertadam", "lamb": "lamb"}
# Fields that change how the step runs, not what it computes: left out of the idempotence check.
_RUN_FIELDS = ("output", "overwrite", "tracking", "tracking_uri", "device")


@dataclass
class FinetuneConfig:
    task: str
    data_dir: str
    model: str
    output: str
    batch_size: int = 32
    epochs: int = 3
    lr: float = 2e-5
    max_len: int = 128
    epsilon: float = 1e-6
    optimizer: str = "adam"
    weight_decay: float = 0.01
    accumulate: int = 1
    dtype: str = "float32"
    seed: int = 2
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    eval_batch_size: int = 64
    language: str | None = None  # XNLI rows of the original multi-language file
    # SQuAD
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2: bool = False
    null_score_diff_threshold: float = 0.0
    max_train_examples: int | None = None  # a quick run on the first N (benchmarks, demos)
    overwrite: bool = False
    tracking: bool = True
    tracking_uri: str | None = None
    device: str | None = None

    def validate(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise BertPipelineError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, not {self.optimizer!r}")
        for name in ("batch_size", "epochs", "accumulate", "max_len", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise BertPipelineError(f"--{name.replace('_', '-')} must be at least 1")


def _seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
        for name in names:
            value = getattr(out, name).float().cpu().numpy()
            if name != "logits" or value.ndim == 3:  # token-level: pad back to `full` positions
                pad = [(0, 0), (0, full - value.shape[1])] + [(0, 0)] * (value.ndim - 2)
                value = np.pad(value, pad, constant_values=-1e4)
            outputs[name].append(value)
    return {name: np.concatenate(parts) for name, parts in outputs.items()}


def _prefixed(name: str, first: bool, metrics: dict[str, float]) -> dict[str, float]:
    """The first dev file's metrics keep their official names; others (MNLI mismatched) get a prefix."""
    return dict(metrics) if first else {f"{name}/{k}": v for k, v in metrics.items()}


def _inputs(cfg: FinetuneConfig, data_dir: Path, model_dir: Path) -> dict[str, str]:
    files = [p for p in sorted(data_dir.iterdir()) if p.is_file()]
    weights = [p for p in sorted(model_dir.iterdir()) if p.is_file() and p.suffix in (".safetensors", ".bin")]
    return {str(p): manifest.sha256_file(p) for p in files + weights}


def finetune(cfg: FinetuneConfig, scorer: Scorer, tracker: Tracker | None = None) -> dict:
    """Train on the task's train file, score dev each epoch, write the best epoch's model and predictions."""
    cfg.validate()
    task = registry.get(cfg.task)
    data_dir = storage.local_dir(cfg.data_dir)
    if not data_dir.is_dir():
        raise BertPipelineError(f"--data-dir {cfg.data_dir}: no such directory")
    model_dir = resolve_model_dir(cfg.model)
    config_for_manifest = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _RUN_FIELDS}
    inputs = _inputs(cfg, data_dir, model_dir)
    if not storage.is_s3(cfg.output) and manifest.is_up_to_date(cfg.output, "finetune", config_for_manifest, inputs):
        log.info("%s already holds this fine-tuning result (same config and inputs): nothing to do", cfg.output)
        return manifest.read(cfg.output)
    started = manifest.now()
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    _seed_everything(cfg.seed)
    tokenizer = BertTokenizer.from_model_dir(model_dir)
    adapter: Adapter = ADAPTERS[task.kind](task, data_dir, tokenizer, cfg)
    train = adapter.train_arrays()
    if cfg.max_train_examples:
        train = {k: v[:cfg.max_train_examples] for k, v in train.items()}
    eval_sets = adapter.eval_sets()
    model = adapter.model_class.from_pretrained(str(model_dir), **adapter.config_overrides()).to(device)
    n_train = len(train["input_ids"])
    steps_per_epoch = math.ceil(n_train / (cfg.batch_size * cfg.accumulate))
    total_steps = steps_per_epoch * cfg.epochs
    optimizer = build_optimizer(model, OPTIMIZERS[cfg.optimizer], cfg.lr, cfg.weight_decay, cfg.epsilon)
    scheduler = build_scheduler(optimizer, total_steps, cfg.warmup_ratio)
    precision = Precision(cfg.dtype, device)
    own_tracker = tracker is None
    tracker = tracker or build_tracker(cfg.tracking, cfg.tracking_uri, experiment=f"bert-finetune/{task.name}")
    tracker.set_tags(standard_tags(manifest.sha256_file(adapter.train_file())))
    tracker.log_params({k: v for k, v in config_for_manifest.items() if v is not None})
    log.info("fine-tuning %s on %d training rows (%d updates over %d epochs) from %s",
             task.name, n_train, total_steps, cfg.epochs, model_dir)
    history: list[dict[str, float]] = []
    best: tuple[float, int, dict, Path] | None = None
    scratch = Path(tempfile.mkdtemp(prefix="bert-finetune-"))
    step = 0
    try:
        for epoch in range(cfg.epochs):
            model.train()
            order = np.random.default_rng(cfg.seed + epoch).permutation(n_train)
            micro = [order[i:i + cfg.batch_size] for i in range(0, n_train, cfg.batch_size)]
            bar = tqdm(range(0, len(micro), cfg.accumulate), desc=f"epoch {epoch + 1}/{cfg.epochs}", unit="update")
            seen, t0, loss_sum = 0, time.perf_counter(), 0.0
            for first in bar:
                group = micro[first:first + cfg.accumulate]
                rows = sum(len(g) for g in group)
                step_loss = 0.0
                for index in group:
                    batch = _batch(train, index, device)
                    with precision.autocast():
                        loss = model(**batch).loss
                    # Weight each micro-batch by its rows, so accumulation equals one big batch.
                    precision.scale(loss * (len(index) / rows)).backward()
                    step_loss += float(loss.detach()) * len(index) / rows
                result = optimizer_step(model, optimizer, scheduler, precision, cfg.max_grad_norm, step, step_loss)
                step += 1
                seen += rows
                loss_sum += step_loss
                bar.set_postfix(loss=f"{step_loss:.4f}", lr=f"{result.lr:.2e}",
                                ex_s=f"{seen / (time.perf_counter() - t0):.1f}")
            epoch_metrics = {"train_loss": loss_sum / max(1, len(bar))}
            epoch_dir = scratch / f"epoch-{epoch + 1}"
            epoch_dir.mkdir()
            dev_metrics = _evaluate(adapter, model, eval_sets, cfg, scorer, precision, device, epoch_dir, task)
            epoch_metrics.update(dev_metrics)
            history.append({"epoch": epoch + 1, **epoch_metrics})
            tracker.log_metrics(epoch_metrics, step=epoch + 1)
            log.info("epoch %d: %s", epoch + 1, json.dumps({k: round(v, 4) for k, v in epoch_metrics.items()}))
            score = dev_metrics.get(task.main_metric, float("nan"))
            if best is None or score > best[0]:
                state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
                best = (score, epoch + 1, state, epoch_dir)
        assert best is not None
        result = _write_output(cfg, model, model_dir, best, history, config_for_manifest, inputs, started, task)
        tracker.log_metrics({f"best/{k}": v for k, v in result["metrics"].items()}, step=best[1])
        if not storage.is_s3(cfg.output):
            tracker.log_artifact(Path(cfg.output) / manifest.MANIFEST)
            tracker.log_artifact(Path(cfg.output) / "metrics.json")
            tracker.log_model_dir(Path(cfg.output) / "model")
        if own_tracker:
            tracker.end()
        return result
    except BaseException:
        if own_tracker:
            tracker.end("FAILED")
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _evaluate(adapter: Adapter, model, eval_sets: list[EvalSet], cfg: FinetuneConfig, scorer: Scorer,
              precision: Precision, device, out_dir: Path, task) -> dict[str, float]:
    metrics: dict[str, float] = {}
    first = True
    for eval_set in eval_sets:
        outputs = predict(model, eval_set.arrays, adapter.output_names, cfg.eval_batch_size, precision, device)
        written = adapter.write(eval_set, outputs, out_dir)
        if not eval_set.has_gold:
            continue
        na_prob = out_dir / written.na_prob_file if written.na_prob_file else None
        scores = scorer(task.name, written.gold_file, out_dir / written.prediction_file, na_prob)
        metrics.update(_prefixed(eval_set.name, first, scores))
        first = False
    return metrics


def _write_output(cfg, model, model_dir: Path, best, history, config_for_manifest, inputs, started, task) -> dict:
    score, epoch, state, epoch_dir = best
    with storage.atomic_output_dir(cfg.output, overwrite=cfg.overwrite) as tmp:
        (tmp / "model").mkdir()
        vocab = model_dir / "vocab.txt"
        save_state_dict(state, model.config, tmp / "model", vocab if vocab.is_file() else None)
        files = [f"model/{p.name}" for p in sorted((tmp / "model").iterdir())]
        for path in sorted(epoch_dir.iterdir()):
            shutil.copyfile(path, tmp / path.name)
            files.append(path.name)
        best_metrics = {k: v for k, v in history[epoch - 1].items() if k not in ("epoch", "train_loss")}
        (tmp / "metrics.json").write_text(json.dumps({"best_epoch": epoch, "main_metric": task.main_metric,
                                                      "dev": best_metrics, "epochs": history}, indent=2) + "\n")
        files.append("metrics.json")
        result = manifest.build("finetune", config_for_manifest, inputs, tmp, files, started, metrics=best_metrics,
                                extra={"task": task.name, "best_epoch": epoch})
        manifest.write(result, tmp)
    log.info("best epoch %d (%s=%.4f); wrote %s", epoch, task.main_metric, score, cfg.output)
    return result
