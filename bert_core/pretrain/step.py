"""The `pretrain` step: BERT's masked-LM + next-sentence pretraining from shards to a model directory.

`pretrain(config)` runs on every worker: in-process (one worker), on each Ray Train worker
(bert_core.launch.run.run_step(PRETRAIN, config)), or under torchrun; torch.distributed tells it its rank. Design points:

- The loss of a step is the mean over the *global* batch (all workers, all accumulation
  micro-batches): masked-LM cross-entropy weighted by masked_lm_weights and divided by the global
  number of real predictions, plus NSP cross-entropy divided by the global number of sequences.
  The denominators come from the data before the forward passes (one tiny all-reduce), so 2 workers
  x batch B, 1 worker x accumulate 2 x batch B and 1 worker x batch 2B compute the same gradient.
- Checkpoints (--ckpt-interval) hold the model, optimizer, scheduler, loss scaler, step, data
  position and every worker's RNG states; resuming replays nothing and gives the same losses step by
  step as a run that was never interrupted.
- Nothing is written to --output until training and evaluation succeeded; the model directory then
  appears at once (atomic rename or upload) with manifest.json as its last file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from bert_core.errors import BertPipelineError, CheckpointMismatchError
from bert_core.io import manifest, storage
from bert_core.io.tracking import PRETRAIN_EXPERIMENT, NullTracker, Tracker, standard_tags
from bert_core.model.config import BertConfig
from bert_core.model.modeling import BertForPreTraining
from bert_core.model.weights import load_pretrained, load_state_into, read_state_dict, save_state_dict
from bert_core.pretrain import recipe as recipes
from bert_core.pretrain.config import PretrainConfig
from bert_core.pretrain.learning_watch import Baseline, LearningWatch
from bert_core.pretrain.run_plan import RunPlan, plan_run
from bert_core.pretrain.stream import (
    PretrainStream,
    ShardSet,
    StreamConfig,
    data_dir_files,
    eval_batches,
    majority_baseline,
    recorded_vocab,
)
from bert_core.train import dist
from bert_core.train.checkpointing import (
    CheckpointStore,
    LocalCheckpointStore,
    capture_rng,
    local_checkpoint,
    read_training_state,
    restore_rng,
    write_training_state,
)
from bert_core.train.loop import PROGRESS_LINE_S, optimizer_step
from bert_core.train.optim import build_optimizer, build_scheduler
from bert_core.train.precision import Precision
from bert_core.train.step_spec import Plan, Preemption, StepHook, StepSpec, Worker

log = logging.getLogger(__name__)

STEP = "pretrain"
# Evaluated when no --data-eval is given: the first batches of the training data, not all of it.
TRAIN_DATA_EVAL_BATCHES = 100
_ARCH_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size")


# --------------------------------------------------------------------------- model


def build_model(run: RunPlan) -> BertForPreTraining:
    if run.pretrained_dir is not None:
        model = load_pretrained(BertForPreTraining, run.config.pretrained, directory=run.pretrained_dir)
        if model.config.do_lower_case is None:  # weights that do not say: the shards' casing (plan_run)
            model.config.do_lower_case = run.model_config.do_lower_case
    else:
        model = BertForPreTraining(run.model_config)
    return model.train()


# --------------------------------------------------------------------------- losses and metrics

# Layout of the per-step statistics vector (sums; divided only after the all-reduce).
MLM_LOSS, MLM_WEIGHT, MLM_CORRECT, NSP_LOSS, NSP_COUNT, NSP_CORRECT, TOKENS = range(7)
NUM_STATS = 7

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "masked_lm_positions")


# Rows x vocabulary elements per chunk of the masked-LM loss (8 MB in float32).
LOSS_CHUNK_ELEMENTS = 1 << 21


def masked_lm_losses(logits: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy of every row of [N, V] `logits` (any precision) against `ids`, in float32; each row's
    predicted id: the first maximum, as argmax).

    A few rows at a time: each chunk's float32 copy and log-softmax stay a few MB, and the prediction is read from
    the copy while it is in cache. One [N, V] float32 tensor (39 MB for 320 predictions over BERT's 30,522 words)
    is above glibc's largest mmap threshold (32 MB), so it would be a fresh mapping, page-faulted in, on every
    step: on a 2-core VM that cost more than the decoder's matmul (docs/benchmarks-pretrain.md)."""
    rows = max(1, LOSS_CHUNK_ELEMENTS // logits.shape[-1])
    losses, predicted = [], []
    for chunk, chunk_ids in zip(logits.split(rows), ids.split(rows)):
        chunk = chunk.float()
        losses.append(F.cross_entropy(chunk, chunk_ids, reduction="none"))
        with torch.no_grad():  # max's indices are argmax's, at a third of argmax's time on CPU
            predicted.append(chunk.max(-1).indices)
    if len(losses) == 1:
        return losses[0], predicted[0]
    return torch.cat(losses), torch.cat(predicted)


def forward_sums(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                 precision: Precision) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(MLM loss sum weighted by masked_lm_weights, NSP loss sum, detached statistics vector)."""
    if not len(batch["next_sentence_labels"]):
        return _empty_share(model, batch, precision)
    with precision.autocast():
        out = model(**{k: batch[k] for k in MODEL_INPUTS})
    # [B * P, V] in the compute precision: the decoder ran only at the masked positions.
    logits = out.prediction_logits.reshape(-1, out.prediction_logits.shape[-1])
    ids, weights = batch["masked_lm_ids"].reshape(-1), batch["masked_lm_weights"].reshape(-1)
    per_token, predicted = masked_lm_losses(logits, ids)
    mlm = (per_token * weights).sum()
    nsp_logits = out.seq_relationship_logits.float()
    labels = batch["next_sentence_labels"]
    nsp = F.cross_entropy(nsp_logits, labels, reduction="sum")
    with torch.no_grad():
        stats = torch.stack([
            mlm.detach(), weights.sum(), ((predicted == ids).float() * weights).sum(),
            nsp.detach(), torch.full((), float(len(labels)), device=nsp.device),
            (nsp_logits.argmax(-1) == labels).float().sum(),
            batch["attention_mask"].sum().float(),
        ])
    return mlm, nsp, stats


def _empty_share(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                 precision: Precision) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Zero sums for a worker whose share of a global batch is empty (more workers than rows).

    The worker must still run a forward and backward through every parameter: DDP all-reduces the
    gradients during backward, and the other workers wait for this one's. A one-token placeholder
    times zero gives exact zero gradients and adds nothing to the global sums.
    """
    device = batch["input_ids"].device
    one = torch.ones((1, 1), dtype=torch.long, device=device)
    with precision.autocast():
        out = model(input_ids=one, token_type_ids=torch.zeros_like(one), attention_mask=one,
                    masked_lm_positions=torch.zeros_like(one))
    zero = (out.prediction_logits.float().sum() + out.seq_relationship_logits.float().sum()) * 0.0
    return zero, zero, torch.zeros(NUM_STATS, device=device)


def metrics_from(stats: Iterable[float]) -> dict[str, float]:
    s = list(stats)
    mlm_loss = s[MLM_LOSS] / max(s[MLM_WEIGHT], 1e-5)
    nsp_loss = s[NSP_LOSS] / max(s[NSP_COUNT], 1.0)
    return {"loss": mlm_loss + nsp_loss, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss,
            "mlm_accuracy": s[MLM_CORRECT] / max(s[MLM_WEIGHT], 1e-5),
            "nsp_accuracy": s[NSP_CORRECT] / max(s[NSP_COUNT], 1.0)}


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def train_step(model: torch.nn.Module, micro_batches: list[dict[str, torch.Tensor]],
               precision: Precision, world: int = 1) -> torch.Tensor:
    """Forward + backward of one optimizer step's micro-batches; returns the global statistics.

    The loss is normalised by the global counts so that the gradient is that of the global-batch
    mean; DDP averages gradients over workers, hence the factor `world`.
    """
    # torch.full, not torch.tensor: a tensor made from Python data is a host-to-GPU copy, which waits for the GPU.
    counts = torch.stack([torch.stack([b["masked_lm_weights"].sum(), torch.full(
        (), float(len(b["next_sentence_labels"])), device=b["masked_lm_weights"].device)]) for b in micro_batches]).sum(0)
    dist.all_reduce_sum(counts)
    mlm_total, nsp_total = counts[0].clamp_min(1e-5), counts[1].clamp_min(1.0)
    stats = torch.zeros(NUM_STATS, device=counts.device)
    for i, batch in enumerate(micro_batches):
        # Gradients are all-reduced once per step, on the last micro-batch.
        sync = i == len(micro_batches) - 1 or not hasattr(model, "no_sync")
        with contextlib.nullcontext() if sync else model.no_sync():
            mlm, nsp, batch_stats = forward_sums(model, batch, precision)
            loss = (mlm / mlm_total + nsp / nsp_total) * world
            precision.scale(loss).backward()
        stats += batch_stats
    return dist.all_reduce_sum(stats)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]], precision: Precision,
             device: torch.device) -> dict[str, float]:
    """Masked-LM accuracy (weighted by masked_lm_weights), NSP accuracy and loss over all workers' batches."""
    was_training = model.training
    model.eval()
    stats = torch.zeros(NUM_STATS, device=device)
    for batch in batches:
        stats += forward_sums(model, to_device(batch, device), precision)[2]
    model.train(was_training)
    return metrics_from(dist.all_reduce_sum(stats).tolist())


# --------------------------------------------------------------------------- the run


@dataclass
class _Interval:
    """Sums over one --log-interval, for the logged averages."""

    stats: np.ndarray = field(default_factory=lambda: np.zeros(NUM_STATS))
    seconds: float = 0.0
    grad_norm: float = 0.0
    steps: int = 0
    skipped: int = 0


def _total_steps(config: PretrainConfig, stream: PretrainStream) -> int:
    if config.num_steps is not None:
        return config.num_steps
    batches = sum(stream.batches_in_epoch(e) for e in range(config.epochs))
    total = batches // config.accumulate
    if total < 1:
        raise BertPipelineError(f"{config.data}: {batches} batch(es) in {config.epochs} epoch(s) are fewer than "
                                f"--accumulate {config.accumulate}; lower --batch-size or add data")
    return total


def _output_taken(run: RunPlan) -> bool:
    if run.output_local is None:
        return storage.exists(run.output)
    path = run.output_local
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


def preflight(run: RunPlan) -> tuple[dict[str, str], dict[str, Any] | None]:
    """(input URI -> sha256, the existing manifest when --output already holds this exact result).

    An --output holding anything else is an error unless --overwrite: checked before training, so a
    mistake costs nothing, and nothing is replaced until the new model is complete.
    """
    config = run.config
    run.check_vocab_file()
    inputs: dict[str, str] = {}
    for shards in run.shard_sets():
        inputs |= shards.sha256()
    if run.pretrained_weights is not None:
        # The starting weights are an input like the data: other weights under the same path, another result.
        inputs[storage.join(config.pretrained, run.pretrained_weights.name)] = manifest.sha256_file(
            run.pretrained_weights)
    target = run.output_local if run.output_local is not None else run.output
    if manifest.is_up_to_date(target, STEP, config.result_config(), inputs):
        return inputs, manifest.read(target)
    if _output_taken(run) and not config.overwrite:
        raise BertPipelineError(f"{run.output} already exists and is not this run's result; pass "
                                "--overwrite to replace it")
    return inputs, None


def check_inputs(config: PretrainConfig) -> tuple[dict[str, str], dict[str, Any] | None]:
    """Everything that can be checked before starting workers: flags, shards, vocab, output."""
    run = plan_run(config)
    inputs, done = preflight(run)
    if done is None:
        run.check_data_fits_model()
    return inputs, done


def _resume_dir(run: RunPlan) -> Path | None:
    resume = run.config.resume
    if not resume:
        return None
    if resume in ("latest", "auto"):
        latest = LocalCheckpointStore(run.checkpoint_root).latest()
        if latest is None and resume == "auto":
            return None
        if latest is None:
            raise BertPipelineError(f"--resume: no checkpoint in {run.checkpoint_root} (set --ckpt-dir "
                                    "to where the interrupted run saved them)")
        return local_checkpoint(latest)
    return local_checkpoint(resume)


def check_architecture(directory: Path, model_config: BertConfig) -> None:
    """A checkpoint resumes only into the architecture it was written from."""
    saved = BertConfig.from_json_file(directory / "config.json")
    diffs = [f"{f}={getattr(saved, f)} (model: {getattr(model_config, f)})" for f in _ARCH_FIELDS
             if getattr(saved, f) != getattr(model_config, f)]
    if diffs:
        raise CheckpointMismatchError(f"{directory}: checkpoint is from a different architecture: {', '.join(diffs)}; "
                                      "resume with the --model/--pretrained the run started with")


def pretrain(config: PretrainConfig, tracker: Tracker | None = None, *, device: torch.device | None = None,
             store: CheckpointStore | None = None, resume_dir: Path | None = None,
             resume_source: str | None = None, resume_done: Callable[[], None] | None = None,
             hooks: Sequence[StepHook] = (),
             inputs: dict[str, str] | None = None, preemption: Preemption | None = None) -> dict[str, Any]:
    """Run (or continue) pretraining; returns the output manifest (on every worker).

    `inputs`: the input hashes when a launcher already checked the inputs and the output (its Plan);
    otherwise rank 0 does it here. `resume_source`: where `resume_dir` (a local copy) came from, recorded as
    the run's `resumed_from`; `resume_done` is called once it has been read (the launcher deletes its copy).
    `hooks` are called after every optimizer step (StepHook). `preemption`: asked after every
    --preemption-check-interval steps whether a node got a drain notice; then a checkpoint is saved at once,
    training goes on while the notice's deadline leaves room for more steps and one more checkpoint
    (Preemption.steps_left), and after that checkpoint the workers hold until the launcher restarts the group
    without the node. An elastic group below its maximum also checkpoints once a larger group could start
    (Preemption.grow_possible), so that the launcher's resize continues from there."""
    config.validate()
    started = manifest.now()
    rank, world = dist.rank(), dist.world_size()
    tracker = tracker if tracker is not None and rank == 0 else NullTracker()
    if device is None:
        if config.use_gpu and not torch.cuda.is_available():
            raise BertPipelineError("--use-gpu: no CUDA device is visible")
        device = torch.device("cuda", torch.cuda.current_device()) if config.use_gpu else torch.device("cpu")

    # Inputs, output, checkpoints, the model and the precision, resolved once; the helpers below take this plan.
    run = plan_run(config, device)
    shards, eval_shards = run.shards, run.eval_shards

    # Rank 0 hashes the inputs (possibly a full read of the shards) and decides for everyone.
    decision: dict[str, Any] = {"inputs": inputs, "done": None}
    if rank == 0 and inputs is None:
        try:
            decision["inputs"], decision["done"] = preflight(run)
        except BertPipelineError as exc:
            decision["error"] = str(exc)
    decision = dist.broadcast_object(decision)
    if decision.get("error"):
        raise BertPipelineError(decision["error"])
    if decision["done"] is not None:
        log.info("%s is up to date (same config and inputs): nothing to do", run.output)
        return decision["done"]
    inputs: dict[str, str] = decision["inputs"]
    data_sha = hashlib.sha256(json.dumps(sorted(inputs.items())).encode()).hexdigest()

    # Model: the same initial weights on every worker (seeded), then per-worker RNG for dropout.
    torch.manual_seed(config.seed)
    model = build_model(run)
    model_config = model.config
    run.check_data_fits_model()
    vocab_file = ((config.vocab and storage.local_file(config.vocab)) or getattr(model, "vocab_file", None)
                  or data_dir_files(shards, "vocab.txt") or recorded_vocab(shards))
    model.to(device)

    stream_cfg = StreamConfig(config.batch_size, config.seed, config.num_buckets, config.use_avg_len)
    stream = PretrainStream(shards, stream_cfg, rank, world, model_config.vocab_size)
    total_steps = _total_steps(config, stream)
    recipe = run_recipe(config, model_config, stream_cfg, world, shards, total_steps)
    if rank == 0:
        log.info("pretraining recipe: %s; global batch %d sequences, %d steps", recipe.describe(),
                 _global_sequences(config, stream_cfg, world, shards), total_steps)
        for caution in recipes.cautions(recipe, total_steps):
            log.warning("%s", caution)
    optimizer = build_optimizer(model, recipe.optimizer, recipe.lr, config.weight_decay, config.adam_eps)
    scheduler = build_scheduler(optimizer, total_steps, recipe.warmup_ratio)
    precision = Precision(run.precision.dtype, device)
    # Scored evaluations (held-out metrics, the manifest's, the promotion gate's) run in float32: the model's
    # weights are float32, and that is how it is saved, fine-tuned and served.
    scoring = Precision("float32", device)
    if rank == 0:
        log.info("%s", run.precision.describe())
    seed_seq = np.random.SeedSequence([config.seed, rank])
    torch.manual_seed(int(seed_seq.generate_state(1)[0]))
    np.random.seed(seed_seq.generate_state(1)[0])

    step = 0
    resumed_from: str | None = None
    source = resume_dir if resume_dir is not None else _resume_dir(run)
    if source is not None:
        step = _load_checkpoint(source, model, optimizer, scheduler, precision, stream, rank, world,
                                total_steps, stream_cfg)
        resumed_from = resume_source if resume_dir is not None and resume_source else str(source)
        if resume_dir is not None and resume_done is not None:
            resume_done()
        log.info("resumed from %s at step %d (data position %s)", source, step, stream.position())
    ddp_model = dist.wrap_ddp(model, device)

    params = {**config.result_config(), "model_config": model_config.to_hf_dict(), "total_steps": total_steps,
              "global_batch_size": config.batch_size * config.accumulate,
              "optimizer": recipe.optimizer, "lr": recipe.lr, "warmup_ratio": recipe.warmup_ratio,
              "recipe_chosen_by_rule": ",".join(recipe.chosen) or "none",
              "precision": run.precision.dtype, "precision_reason": run.precision.reason}
    if resumed_from is None:
        # The starting world size; a restarted group may have another (MLflow params cannot change: the
        # launcher records each resize as the metric world_size and a tag).
        params["world_size"] = world
    tracker.log_params(params)
    tracker.set_tags({**standard_tags(data_sha), **({"resumed_from": resumed_from} if resumed_from else {})})
    for path in list(shards.manifests) + (list(eval_shards.manifests) if eval_shards else []):
        tracker.log_artifact(path, "data" if path in shards.manifests else "data_eval")

    ckpt_store = store if store is not None else LocalCheckpointStore(run.checkpoint_root,
                                                                      config.keep_checkpoints, rank)
    interval = _Interval()
    tokens_seen = 0
    watch = LearningWatch(total_steps, Baseline(*majority_baseline(eval_shards or shards)), config.watch_fraction)
    watch.skip_until(step)
    # In a log file (Ray workers, Airflow) a bar redrawn every second would flood it.
    # Without the bar (--no-progress, as the DAG tasks run), a log line every PROGRESS_LINE_S instead, and one at
    # the last step: a run shorter than PROGRESS_LINE_S logged no loss at all.
    bar = tqdm(total=total_steps, initial=step, disable=rank != 0 or not config.progress, unit="step",
               dynamic_ncols=True, mininterval=1.0 if sys.stderr.isatty() else 30.0)
    drain_at: int | None = None  # under a drain notice: the step whose checkpoint is the last one here
    step_seconds: deque[float] = deque(maxlen=10)  # wall time of the latest steps, checkpoints included
    checkpoint_seconds = 0.0  # how long the latest checkpoint took
    step_end = time.perf_counter()
    last_line = time.monotonic()
    try:
        while step < total_steps:
            t0 = time.perf_counter()
            micro = [to_device(next(stream), device) for _ in range(config.accumulate)]
            stats = train_step(ddp_model, micro, precision, world)
            values = stats.tolist()
            loss_value = metrics_from(values)["loss"]
            result = optimizer_step(ddp_model, optimizer, scheduler, precision, config.max_grad_norm, step + 1,
                                    loss_value)
            step += 1
            elapsed = time.perf_counter() - t0
            tokens_seen += int(values[TOKENS])
            interval.stats += values
            interval.seconds += elapsed
            interval.grad_norm += result.grad_norm
            interval.steps += 1
            interval.skipped += int(not result.applied)
            bar.update(1)
            if step % config.log_interval == 0 or step == total_steps or watch.due(step):
                logged = _log_interval(tracker, bar, interval, result, step)
                watch.observe_train(step, logged)
                interval = _Interval()
                log.debug("step %d: %s", step, logged)
                if bar.disable and rank == 0 and (time.monotonic() - last_line >= PROGRESS_LINE_S
                                                  or step == total_steps):
                    last_line = time.monotonic()
                    log.info("step %d of %d: loss %.4f, masked-LM accuracy %.3f (training), %.0f tokens/s", step,
                             total_steps, logged["loss"], logged["mlm_accuracy"], logged["tokens_per_s"])
            heldout = None
            if eval_shards and step < total_steps and (
                    watch.due(step) or (config.eval_interval and step % config.eval_interval == 0)):
                heldout = _evaluate(config, model, eval_shards, scoring, device, rank, world)
                tracker.log_metrics({f"eval_{k}": v for k, v in heldout.items()}, step)
            if watch.due(step) and step < total_steps:
                _watch_check(watch, step, tracker, heldout)
            for hook in hooks:
                hook(step, resumed_from is not None)
            checkpoint = (ckpt_store, step, model, optimizer, scheduler, precision, stream, config, total_steps,
                          stream_cfg, world, metrics_from(values))
            saved = bool(config.ckpt_interval and step % config.ckpt_interval == 0 and step < total_steps)
            if saved:
                checkpoint_seconds = _save_checkpoint(*checkpoint)
            if preemption is not None and preemption.may_grow and drain_at is None and step < total_steps:
                # Rank 0's answer, summed over the workers: the same decision on all of them.
                grow = dist.all_reduce_sum(torch.tensor([float(preemption.grow_possible())], device=device))
                if grow.item() > 0 and not saved:  # the resize restarts from here, not from an older checkpoint
                    checkpoint_seconds, saved = _save_checkpoint(*checkpoint), True
            if preemption is not None and step < total_steps:
                if drain_at is None and step % config.preemption_check_interval == 0 and preemption.noticed(step):
                    if not saved:  # just in time: nothing before the notice can be lost any more
                        checkpoint_seconds, saved = _save_checkpoint(*checkpoint), True
                    typical = statistics.median(step_seconds) if step_seconds else time.perf_counter() - t0
                    # The same number on every worker: the least of their answers.
                    drain_at = step + min(dist.all_gather_objects(
                        preemption.steps_left(typical, checkpoint_seconds)))
                if drain_at is not None and step >= drain_at:
                    if not saved:  # the last checkpoint before the node goes: the restarted group continues here
                        _save_checkpoint(*checkpoint)
                    preemption.hold(step)
            step_seconds.append(time.perf_counter() - step_end)
            step_end = time.perf_counter()
    finally:
        bar.close()

    final = _evaluate(config, model, eval_shards or shards, scoring, device, rank, world,
                      train_fallback=eval_shards is None)
    final.update({"mlm_accuracy_chance": watch.baseline.mlm, "nsp_accuracy_chance": watch.baseline.nsp,
                  "mlm_accuracy_over_chance": final["mlm_accuracy"] - watch.baseline.mlm})
    tracker.log_metrics({f"eval_{k}": v for k, v in final.items()}, step)
    verdict = watch.finish(step, final, heldout=eval_shards is not None)
    _report_verdict(verdict, tracker)
    result_manifest = None
    if rank == 0:
        result_manifest = _write_output(run, model, vocab_file, inputs, started, final, tracker, {
            "training": {"steps": step, "total_steps": total_steps, "tokens_this_run": tokens_seen,
                         "world_size": world, "resumed_from": resumed_from,
                         "metrics_on": "data_eval" if eval_shards else "training data"},
            "launch": config.launch_config(),
            "recipe": recipe.as_dict(),
            "precision": run.precision.as_dict(),
            "learning_check": verdict.as_dict(),
            "mlflow_run_id": tracker.run_id,
        })
    return dist.broadcast_object(result_manifest)


def _global_sequences(config: PretrainConfig, stream_cfg: StreamConfig, world: int, shards: ShardSet) -> int:
    """Sequences per optimizer step over all workers (--use-avg-len counts tokens: divided by the shard length)."""
    per_batch = config.batch_size
    if stream_cfg.use_avg_len:
        per_batch = max(1, config.batch_size // shards.header(0)[1])
    return per_batch * config.accumulate


def run_recipe(config: PretrainConfig, model_config: BertConfig, stream_cfg: StreamConfig, world: int,
               shards: ShardSet, total_steps: int) -> recipes.Recipe:
    """The optimizer, lr and warmup of this run: the flags given, the default rule for the rest."""
    return recipes.resolve(config.optimizer_name(), config.lr, config.warmup_ratio, model_config.hidden_size,
                           _global_sequences(config, stream_cfg, world, shards), total_steps)


def _watch_check(watch: LearningWatch, step: int, tracker: Tracker, heldout: dict[str, float] | None) -> None:
    """A check point of the learning watch, on this step's held-out evaluation when the run has held-out data."""
    if heldout is not None:
        watch.observe_eval(step, heldout)
    for problem in watch.check(step):
        if dist.rank() == 0:  # every worker checks (the same all-reduced figures); one says so
            log.warning("step %d of %d: this run may not be learning: %s", step, watch.total_steps, problem)
    tracker.set_tags({"learning_check": watch.verdict.status})


def _report_verdict(verdict, tracker: Tracker) -> None:
    tracker.set_tags({"learning_check": verdict.status,
                      "learning_check.problems": " | ".join(verdict.problems)[:5000] or "none"})
    if dist.rank() != 0:
        return
    # One sentence: the final figures against chance, then what the check points saw earlier.
    log.log(logging.WARNING if verdict.status in ("not_learning", "warned") else logging.INFO, "%s", verdict.summary)


def _log_interval(tracker: Tracker, bar: tqdm, interval: _Interval, result, step: int) -> dict[str, float]:
    metrics = metrics_from(interval.stats)
    metrics.update({
        "learning_rate": result.lr, "loss_scale": result.loss_scale,
        "grad_norm": interval.grad_norm / max(1, interval.steps),
        "tokens_per_s": interval.stats[TOKENS] / max(interval.seconds, 1e-9),
        "skipped_steps": float(interval.skipped),
    })
    tracker.log_metrics(metrics, step)
    bar.set_postfix(loss=f"{metrics['loss']:.4f}", tok_s=f"{metrics['tokens_per_s']:.0f}", refresh=False)
    return metrics


def _evaluate(config: PretrainConfig, model: torch.nn.Module, shards: ShardSet, precision: Precision,
              device: torch.device, rank: int, world: int, train_fallback: bool = False) -> dict[str, float]:
    _, seq_len, _ = shards.header(0)
    # Evaluation sums are all-reduced, so the per-worker batch only sets memory: about a worker's share.
    per_worker = -(-config.batch_size // world)
    batch = max(1, per_worker // seq_len) if config.use_avg_len else per_worker
    limit = config.eval_max_batches or (TRAIN_DATA_EVAL_BATCHES if train_fallback else 0)
    batches = eval_batches(shards, batch, rank, world, max_batches=limit, vocab_size=model.config.vocab_size)
    return evaluate(model, batches, precision, device)


def _save_checkpoint(store: CheckpointStore, step: int, model: BertForPreTraining, optimizer, scheduler,
                     precision: Precision, stream: PretrainStream, config: PretrainConfig, total_steps: int,
                     stream_cfg: StreamConfig, world: int, metrics: dict[str, float]) -> float:
    """Save (rank 0 writes, every worker takes part); returns the seconds it took."""
    begun = time.perf_counter()
    rng = dist.all_gather_objects(capture_rng())  # every worker's dropout RNG, written by rank 0

    def write(directory: Path) -> None:
        save_state_dict(model.state_dict(), model.config, directory)
        write_training_state(directory, {
            "format": 1, "step": step, "total_steps": total_steps,
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "scaler": precision.state_dict(), "rng": rng, "data_position": stream.position(),
            "data": {"global_batch_size": stream_cfg.batch_size, "num_buckets": stream_cfg.num_buckets,
                     "use_avg_len": stream_cfg.use_avg_len, "seed": stream_cfg.seed},
            "config": json.loads(json.dumps(dataclasses.asdict(config), default=str)),
        })

    store.save(step, write if dist.rank() == 0 else None, {"step": step, **metrics})
    return time.perf_counter() - begun


def _load_checkpoint(directory: Path, model: BertForPreTraining, optimizer, scheduler, precision: Precision,
                     stream: PretrainStream, rank: int, world: int, total_steps: int,
                     stream_cfg: StreamConfig) -> int:
    check_architecture(directory, model.config)
    state = read_training_state(directory)
    load_state_into(model, read_state_dict(directory / "model.safetensors"), str(directory))
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (ValueError, KeyError) as exc:
        raise CheckpointMismatchError(f"{directory}: the optimizer state does not fit --optimizer "
                                      f"({exc}); resume with the optimizer the run started with") from None
    scheduler.load_state_dict(state["scheduler"])
    precision.load_state_dict(state["scaler"])
    if state["total_steps"] != total_steps:
        log.warning("%s: the run was planned for %d steps, now %d: the LR schedule changes from here",
                    directory, state["total_steps"], total_steps)
    data = state["data"]
    now = {"global_batch_size": stream_cfg.batch_size, "num_buckets": stream_cfg.num_buckets,
           "use_avg_len": stream_cfg.use_avg_len, "seed": stream_cfg.seed}
    if data != now:
        log.warning("%s: data settings changed (%s -> %s): the data order will not continue exactly",
                    directory, data, now)
    position = state["data_position"]
    stream.set_position(position["epoch"], position["batches"])
    rng = state["rng"]
    if rank < len(rng):
        restore_rng(rng[rank])
    else:
        log.warning("%s: no RNG state for worker %d (the run had %d workers): dropout continues from a new seed",
                    directory, rank, len(rng))
    return int(state["step"])


def _write_output(run: RunPlan, model: BertForPreTraining, vocab_file: str | None,
                  inputs: dict[str, str], started: str, metrics: dict[str, float], tracker: Tracker,
                  extra: dict[str, Any]) -> dict[str, Any]:
    if vocab_file is None:
        log.warning("no vocab.txt (give --vocab): %s will hold no vocabulary", run.output)
    with storage.atomic_output_dir(run.output, overwrite=True) as tmp:
        save_state_dict(model.state_dict(), model.config, tmp, vocab_file)
        outputs = sorted(p.name for p in tmp.iterdir())
        result = manifest.build(STEP, run.config.result_config(), inputs, tmp, outputs, started,
                                metrics={k: metrics[k] for k in ("loss", "mlm_accuracy", "nsp_accuracy",
                                                                 "mlm_loss", "nsp_loss", "mlm_accuracy_chance",
                                                                 "nsp_accuracy_chance", "mlm_accuracy_over_chance")},
                                extra=extra)
        manifest.write(result, tmp)
        tracker.log_artifact(tmp / manifest.MANIFEST)
        tracker.log_model_dir(tmp)
    log.info("model written to %s (loss %.4f, masked-LM accuracy %.4f, NSP accuracy %.4f)", run.output,
             metrics["loss"], metrics["mlm_accuracy"], metrics["nsp_accuracy"])
    return result


# --------------------------------------------------------------------------- as a launchable step


def _plan(config: PretrainConfig) -> Plan:
    inputs, done = check_inputs(config)
    return Plan(inputs, done)


def _experiment(config: PretrainConfig) -> str:
    return PRETRAIN_EXPERIMENT


def _work(config: PretrainConfig, plan: Plan, tracker: Tracker, worker: Worker) -> dict[str, Any]:
    return pretrain(config, tracker, device=worker.device, store=worker.store, resume_dir=worker.resume_dir,
                    resume_source=worker.resume_source, resume_done=worker.resume_done, hooks=worker.hooks,
                    inputs=plan.inputs, preemption=worker.preemption)


# How bert_core.launch runs pretraining, in this process or on Ray Train.
PRETRAIN = StepSpec(
    name="pretrain", config_type=PretrainConfig, experiment=_experiment, plan=_plan, work=_work,
    path_fields=("data", "data_eval", "output", "vocab", "ckpt_dir", "storage", "resume"),
    name_fields=("model", "pretrained"), resumable=True,
)
