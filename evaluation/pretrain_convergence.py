"""Time to held-out masked-LM accuracy: our pretraining with its defaults against transformers' BertForPreTraining.

MLPerf's BERT metric is the time to a held-out masked-LM accuracy; this is the same measure at CPU
scale. One run, one machine, both systems on one device (--device: cpu, or cuda, where each system first trains a
few unrecorded steps to load its kernels), the same torch thread count (--threads) and precision (--dtype, default
auto: bfloat16 autocast where the device computes it natively, for both):

1. Real text -> `segment` -> `make-shards` with a held-out split by document (the held-out documents
   never appear in training, and their random next sentences come from held-out documents only).
2. Ours: `bert_core.pretrain.step.pretrain` from scratch with only --model, --num-steps, --batch-size and
   --seed given (precision, optimizer, lr and warmup by its defaults), evaluated on the held-out shards
   every --eval-every steps; once per --seeds. --our-dtypes adds the same runs in other precisions
   (float32: does the default precision learn as well?).
3. The peer: transformers' BertForPreTraining trained the way a transformers user does: its Trainer's
   defaults (torch's fused AdamW, no decay on bias/LayerNorm, weight decay 0.01, linear warmup (10%) and
   decay, gradient clipping 1.0; `bf16=True` is autocast), `-100` labels on every position but the masked
   ones; same shards, same batches in the same order, same steps, same held-out batches; at each learning rate
   of --peer-lrs (first seed), then at the best one for the other seeds.
4. Optionally ours at other learning rates (--our-lr-factors) or longer budgets (--ours-step-factors, run only
   for a seed whose equal-steps run does not reach the peer's final accuracy).

Both clocks count training only (evaluation excluded): wall seconds and process CPU seconds (what other jobs on
a shared machine cannot inflate), recorded at every evaluation point with the load average. Reported per model
size: held-out accuracy at equal steps (mean and spread over the seeds), and the time ours needs to reach the
peer's final held-out masked-LM accuracy (the mean over its seeds), as a ratio of the peer's time, on both
clocks. Timings are never asserted anywhere; the figures go to --out-json and a plot. The nightly regression
calls `measure_size` with evaluation.settings.NIGHTLY.convergence.

    python -m evaluation.pretrain_convergence --configs bert_2_128_2:800 --seeds 0 1 2 --out-json bench-results/c.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import platform
import shutil
import statistics
import time
from pathlib import Path

import torch

from evaluation.cli_help import DefaultsHelpFormatter
from evaluation.default_inputs import SHARED_DATA, existing
from evaluation.machine import cpu_name
from evaluation.settings import ConvergenceRun

DEFAULT_CORPUS = SHARED_DATA / "corpus" / "wiki_docs.txt"
DEFAULT_VOCAB = SHARED_DATA / "bert" / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt"
CLOCKS = ("seconds", "cpu_seconds")  # wall, process CPU
CUDA_WARMUP_STEPS = 20


# --------------------------------------------------------------------------- data


def prepare_data(corpus: str, vocab: str, work: Path, run: ConvergenceRun) -> tuple[str, str]:
    """segment -> make-shards with a held-out split; returns (training shards dir, held-out shards dir). Shards
    already made with the same settings in `work` are reused."""
    from bert_core.data.instances import ShardConfig
    from bert_core.data.make_shards import local_backend, make_split_shards
    from bert_core.data.segment import segment

    train = work / f"shards-{run.max_seq_length}-{run.max_predictions}-{run.dupe_factor}-{run.holdout_fraction:g}"
    heldout = train.with_name(train.name + "-heldout")
    if (train / "manifest.json").is_file() and (heldout / "manifest.json").is_file():
        return str(train), str(heldout)
    segmented = work / "segmented"
    segment([corpus], str(segmented))
    texts = sorted(str(p) for p in segmented.iterdir() if p.name != "manifest.json")
    config = ShardConfig(max_seq_length=run.max_seq_length, max_predictions_per_seq=run.max_predictions,
                         dupe_factor=run.dupe_factor, holdout_fraction=run.holdout_fraction)
    # On this machine, even where RAY_ADDRESS names a cluster (a nightly task on a Celery worker): the benchmark
    # times training, and its data is small.
    made = make_split_shards(texts, str(train), vocab, config, str(heldout), workers=2, backend=local_backend(2),
                             progress=False)
    print(f"shards: {made['totals']['instances']} training instances from {made['totals']['documents']} documents; "
          f"held out {made['heldout']['instances']} instances from {made['heldout']['documents']} documents")
    return str(train), str(heldout)


class _Clock:
    """Training time on both clocks: evaluation intervals are paused out. On a GPU the wall clock stops once the
    queued kernels have run (ours waits for them too: it reads its step statistics back every interval)."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.wall = self.cpu = 0.0
        self._since: tuple[float, float] | None = None
        self._cuda = device is not None and device.type == "cuda"

    def start(self) -> None:
        self._since = (time.perf_counter(), time.process_time())

    def stop(self) -> None:
        if self._cuda:
            torch.cuda.synchronize()
        if self._since is not None:
            self.wall += time.perf_counter() - self._since[0]
            self.cpu += time.process_time() - self._since[1]
            self._since = None

    def point(self, step: int, metrics: dict) -> dict:
        return {"step": step, "seconds": round(self.wall, 3), "cpu_seconds": round(self.cpu, 3),
                "load": round(os.getloadavg()[0], 2), **metrics}


# --------------------------------------------------------------------------- ours


class CurveTracker:
    """A bert_core Tracker that records held-out evaluations against the training clocks.

    The training loop logs the interval metrics, then (at an evaluation step) evaluates and logs `eval_*`:
    the time between those two calls is evaluation, taken off both clocks, so that they count training only."""

    def __init__(self) -> None:
        from bert_core.io.tracking import NullTracker

        self._base = NullTracker()
        self.run_id = None
        self.params: dict = {}
        self.points: list[dict] = []
        self._start = self._last = (time.perf_counter(), time.process_time())
        self._evaluating = [0.0, 0.0]  # evaluation time so far, on each clock

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = (time.perf_counter(), time.process_time())
        if "eval_mlm_accuracy" in metrics:
            trained = [last - start - ev for last, start, ev in zip(self._last, self._start, self._evaluating)]
            self.points = [p for p in self.points if p["step"] != step]  # the final evaluation replaces one
            self.points.append({"step": step, "seconds": round(trained[0], 3), "cpu_seconds": round(trained[1], 3),
                                "load": round(os.getloadavg()[0], 2), "mlm_accuracy": metrics["eval_mlm_accuracy"],
                                "nsp_accuracy": metrics["eval_nsp_accuracy"]})
            self._evaluating = [ev + n - last for ev, n, last in zip(self._evaluating, now, self._last)]
        self._last = now

    def log_params(self, params: dict) -> None:
        # Called once the model, data and optimizer are built, right before the first step: the clocks start
        # here, as the peer's start at its first step.
        self.params = dict(params)
        self._start = self._last = (time.perf_counter(), time.process_time())

    def __getattr__(self, name: str):
        return getattr(self._base, name)


def run_ours(model: str, train: str, heldout: str, work: Path, run: ConvergenceRun, steps: int, seed: int,
             lr: float | None = None, dtype: str | None = None) -> dict:
    from bert_core.pretrain.config import PretrainConfig
    from bert_core.pretrain.step import pretrain

    dtype = dtype or run.dtype
    out = work / f"ours-{model}-{lr or 'default'}-{steps}x{run.batch_size}-{dtype}-seed{seed}"
    config = PretrainConfig(data=train, data_eval=heldout, output=str(out), model=model, num_steps=steps,
                            batch_size=run.batch_size, lr=lr, eval_interval=run.eval_every,
                            eval_max_batches=run.eval_batches, ckpt_interval=0, log_interval=run.eval_every,
                            seed=seed, dtype=dtype, tracking=False, progress=False, overwrite=True,
                            use_gpu=run.device == "cuda")
    # The benchmark times training: pretrain would return an earlier identical run's result in `out` as is.
    shutil.rmtree(out, ignore_errors=True)
    tracker = CurveTracker()
    t0 = time.perf_counter()
    result = pretrain(config, tracker)
    wall = time.perf_counter() - t0
    points = tracker.points
    return {"system": "ours", "lr": tracker.params.get("lr"), "optimizer": tracker.params.get("optimizer"),
            "warmup_ratio": tracker.params.get("warmup_ratio"), "lr_given": lr, "dtype": dtype,
            "precision": result["precision"]["dtype"], "seed": seed, "curve": points,
            "train_seconds": points[-1]["seconds"], "train_cpu_seconds": points[-1]["cpu_seconds"],
            "wall_seconds": wall, "learning_check": result.get("learning_check", {}).get("status"),
            "final": points[-1]}


# --------------------------------------------------------------------------- the transformers peer


def run_peer(model: str, train: str, heldout: str, run: ConvergenceRun, steps: int, seed: int, lr: float) -> dict:
    import transformers

    from bert_core.model import zoo
    from bert_core.pretrain.run_plan import sized_to_vocab
    from bert_core.pretrain.step import to_device
    from bert_core.pretrain.stream import PretrainStream, ShardSet, StreamConfig
    from bert_core.pretrain.stream import eval_batches as heldout_batches
    from bert_core.train.precision import Precision, resolve_precision

    shards, eval_shards = ShardSet(train), ShardSet(heldout)
    # The architecture ours trains on these shards (sized to their vocab), so both softmaxes are as wide.
    ours = sized_to_vocab(zoo.architecture_config(model), [shards, eval_shards])
    config = transformers.BertConfig(vocab_size=ours.vocab_size, hidden_size=ours.hidden_size,
                                     num_hidden_layers=ours.num_hidden_layers,
                                     num_attention_heads=ours.num_attention_heads,
                                     intermediate_size=ours.intermediate_size,
                                     max_position_embeddings=ours.max_position_embeddings)
    torch.manual_seed(seed)
    net = transformers.BertForPreTraining(config).train()
    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in net.named_parameters() if not any(k in n for k in no_decay)],
               "weight_decay": 0.01},
              {"params": [p for n, p in net.named_parameters() if any(k in n for k in no_decay)],
               "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, fused=True)  # the Trainer's default on torch >= 2.8
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    device = torch.device(run.device)
    net.to(device)
    precision = Precision(resolve_precision(run.dtype, device).dtype, device)
    stream = PretrainStream(shards, StreamConfig(run.batch_size, seed, 1, False), 0, 1, config.vocab_size)

    def evaluate() -> dict:  # in float32, as ours scores its held-out data
        net.eval()
        correct = total = nsp_correct = nsp_total = 0.0
        with torch.no_grad():
            for b in heldout_batches(eval_shards, run.batch_size, max_batches=run.eval_batches):
                b = to_device(b, device)
                out = net(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                          attention_mask=b["attention_mask"])
                logits = out.prediction_logits.gather(
                    1, b["masked_lm_positions"][..., None].expand(-1, -1, config.vocab_size))
                w = b["masked_lm_weights"]
                correct += float(((logits.argmax(-1) == b["masked_lm_ids"]).float() * w).sum())
                total += float(w.sum())
                nsp_correct += float((out.seq_relationship_logits.argmax(-1) == b["next_sentence_labels"]).sum())
                nsp_total += len(b["next_sentence_labels"])
        net.train()
        return {"mlm_accuracy": correct / total, "nsp_accuracy": nsp_correct / nsp_total}

    points, clock = [], _Clock(device)
    for step in range(1, steps + 1):
        b = to_device(next(stream), device)
        labels = torch.full_like(b["input_ids"], -100)
        masked = torch.where(b["masked_lm_weights"] > 0, b["masked_lm_ids"], -100)
        rows = torch.arange(len(labels), device=device)[:, None].expand_as(masked)
        real = b["masked_lm_weights"] > 0
        labels[rows[real], b["masked_lm_positions"][real]] = masked[real]
        clock.start()
        with precision.autocast():
            out = net(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                      attention_mask=b["attention_mask"], labels=labels, next_sentence_label=b["next_sentence_labels"])
        precision.scale(out.loss).backward()  # float16: the Trainer's GradScaler, as Precision's
        precision.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        precision.step(optimizer, step)
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        clock.stop()
        if step % run.eval_every == 0 or step == steps:
            points.append(clock.point(step, evaluate()))
    return {"system": "transformers", "lr": lr, "optimizer": "torch AdamW (fused)", "warmup_ratio": 0.1,
            "dtype": run.dtype, "precision": precision.dtype, "seed": seed, "curve": points,
            "train_seconds": points[-1]["seconds"], "train_cpu_seconds": points[-1]["cpu_seconds"],
            "final": points[-1]}


# --------------------------------------------------------------------------- comparison


def time_to_reach(curve: list[dict], target: float, clock: str = "seconds") -> float | None:
    """Training seconds (on `clock`) at which a curve first reaches `target` held-out masked-LM accuracy
    (linear interpolation between evaluation points, from 0 at the start); None when it never does."""
    prev_t, prev_a = 0.0, 0.0
    for p in curve:
        if p["mlm_accuracy"] >= target:
            if p["mlm_accuracy"] == prev_a:
                return p[clock]
            return prev_t + (target - prev_a) / (p["mlm_accuracy"] - prev_a) * (p[clock] - prev_t)
        prev_t, prev_a = p[clock], p["mlm_accuracy"]
    return None


def spread(values: list[float]) -> dict:
    """Mean, sample standard deviation (0 for one value), min and max."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def at_equal_steps(runs: list[dict]) -> dict[int, dict]:
    """Held-out masked-LM accuracy by evaluation step over `runs` (the seeds of one setting)."""
    steps = sorted({p["step"] for run in runs for p in run["curve"]})
    return {step: spread([p["mlm_accuracy"] for run in runs for p in run["curve"] if p["step"] == step])
            for step in steps if all(any(p["step"] == step for p in run["curve"]) for run in runs)}


def compare(ours: list[dict], peers: list[dict], peer_seeds: list[dict], longer: list[dict] | None = None) -> dict:
    """Ours (its seeds, equal steps) against the peer at its best lr (by the first seed's final accuracy; its
    seeds at that lr). The target is the peer's mean final accuracy; ours' time to it is, per seed, the least
    over that seed's equal-steps run and any longer budget (each with its own schedule, as a user who has time
    to spare would pick); the ratio is the peer's mean training time over ours' mean time to the target, on each
    clock (None when a seed of ours never reaches it)."""
    best = max(peers, key=lambda r: r["final"]["mlm_accuracy"])
    peer_runs = [best, *(r for r in peer_seeds if r["lr"] == best["lr"] and r["seed"] != best["seed"])]
    target = statistics.fmean(r["final"]["mlm_accuracy"] for r in peer_runs)
    result = {"peer_best_lr": best["lr"], "peer_seeds": [r["seed"] for r in peer_runs],
              "peer_final_mlm_accuracy": target,
              "peer_final": spread([r["final"]["mlm_accuracy"] for r in peer_runs]),
              "ours_final": spread([r["final"]["mlm_accuracy"] for r in ours]),
              "peer_final_nsp_accuracy": statistics.fmean(r["final"]["nsp_accuracy"] for r in peer_runs),
              "ours_final_nsp_accuracy": statistics.fmean(r["final"]["nsp_accuracy"] for r in ours),
              "ours_final_mlm_accuracy": statistics.fmean(r["final"]["mlm_accuracy"] for r in ours)}
    for clock, suffix in zip(CLOCKS, ("", "_cpu")):
        peer_time = statistics.fmean(r["curve"][-1][clock] for r in peer_runs)
        ours_time = statistics.fmean(r["curve"][-1][clock] for r in ours)
        reaches, steps = [], []
        for run in ours:
            candidates = [(t, r["curve"][-1]["step"]) for r in [run, *(longer or [])] if r["seed"] == run["seed"]
                          and (t := time_to_reach(r["curve"], target, clock)) is not None]
            if candidates:
                reaches.append(min(candidates)[0])
                steps.append(min(candidates)[1])
        reach = statistics.fmean(reaches) if len(reaches) == len(ours) else None
        result.update({
            f"peer_train_{clock}": peer_time, f"ours_train_{clock}": ours_time,
            f"ours_{clock}_to_peer_final": reach,
            f"time_to_accuracy_ratio{suffix}": peer_time / reach if reach else None,
            f"step_time_ratio{suffix}": (peer_time / peer_runs[0]["curve"][-1]["step"])
            / (ours_time / ours[0]["curve"][-1]["step"]),
        })
        if clock == "seconds":
            result["ours_runs_reaching_it_steps"] = steps
    return result


def measure_size(run: ConvergenceRun, corpus: str, vocab: str, work: Path, *, our_dtypes: tuple[str, ...] = (),
                 our_lr_factors: tuple[float, ...] = (), ours_step_factors: tuple[float, ...] = (),
                 ours: bool = True, peer: bool = True, reused=None, save=None, log=print) -> dict:
    """Every run of one model size: ours (per seed; also in each of `our_dtypes`, at each lr factor, and at longer
    budgets where needed), the peer (its lr grid, then its best lr per seed), and, with both, the comparison.
    `reused(system, lr, steps, seed, dtype)` may return a finished run instead of training it; `save(entry)` is
    called after every run, so a long benchmark keeps what it measured (and parts of one can run as separate
    processes, `ours` or `peer` off, their results merged by --reuse)."""
    work.mkdir(parents=True, exist_ok=True)
    train, heldout = prepare_data(corpus, vocab, work, run)
    threads_before = torch.get_num_threads()
    if run.threads:
        torch.set_num_threads(run.threads)
    model, steps = run.config, run.steps
    entry: dict = {"settings": dataclasses.asdict(run)}

    def train_one(system: str, seed: int, lr: float | None = None, steps_: int = steps, dtype: str | None = None):
        dtype = dtype or run.dtype
        done = reused(system, lr, steps_, seed, dtype) if reused else None
        if done is None:
            done = (run_ours(model, train, heldout, work, run, steps_, seed, lr, dtype) if system == "ours" else
                    run_peer(model, train, heldout, run, steps_, seed, lr))
        final = done["final"]
        log(f"{model} {system:>12} {done['precision']:>8} lr {done['lr']:.2g} seed {seed}: held-out MLM "
            f"{final['mlm_accuracy']:.4f}, NSP {final['nsp_accuracy']:.4f} after {final['step']} steps, "
            f"{done['train_seconds']:.0f} s ({done['train_cpu_seconds']:.0f} CPU s) training")
        return done

    def add(key: str, value: dict) -> dict:
        entry.setdefault(key, []).append(value)
        if save:
            save(entry)
        return value

    try:
        if run.device == "cuda":
            # The first run on a GPU would pay for loading kernels and creating library handles: each system trains
            # a few steps once first, unrecorded.
            if ours:
                run_ours(model, train, heldout, work, run, CUDA_WARMUP_STEPS, run.seeds[0])
            if peer:
                run_peer(model, train, heldout, run, CUDA_WARMUP_STEPS, run.seeds[0], run.peer_lrs[0])
        for seed in run.seeds if ours else ():
            add("ours", train_one("ours", seed))
        for dtype in our_dtypes if ours else ():
            for seed in run.seeds:
                add(f"ours_{dtype}", train_one("ours", seed, dtype=dtype))
        for factor in our_lr_factors if ours else ():
            add("ours_lr_sweep", train_one("ours", run.seeds[0], lr=entry["ours"][0]["lr"] * factor))
        if peer:
            peer_seeds = run.peer_seeds or run.seeds
            for lr in run.peer_lrs:
                add("peer", train_one("transformers", peer_seeds[0], lr=lr))
            grid = entry["peer"]
            best = max(grid, key=lambda r: r["final"]["mlm_accuracy"])
            entry["peer_seeds"] = []
            for seed in peer_seeds[1:]:
                add("peer_seeds", train_one("transformers", seed, lr=best["lr"]))
        if ours and peer:
            target = statistics.fmean(r["final"]["mlm_accuracy"] for r in [best, *entry["peer_seeds"]])
            entry["ours_longer"] = []
            for factor in ours_step_factors:  # only for the seeds that need it
                for seed_run in entry["ours"]:
                    if time_to_reach(seed_run["curve"], target) is None and not any(
                            r["seed"] == seed_run["seed"] and time_to_reach(r["curve"], target)
                            for r in entry["ours_longer"]):
                        add("ours_longer", train_one("ours", seed_run["seed"], steps_=round(steps * factor)))
            entry["comparison"] = compare(entry["ours"], grid, entry["peer_seeds"], entry["ours_longer"])
        equal = {name: at_equal_steps(entry[name]) for name in ("ours", *(f"ours_{d}" for d in our_dtypes))
                 if entry.get(name)}
        if peer:
            equal["peer_best"] = at_equal_steps([r for r in [*grid, *entry["peer_seeds"]] if r["lr"] == best["lr"]])
        entry["equal_steps"] = equal
        if save:
            save(entry)
    finally:
        torch.set_num_threads(threads_before)
    return entry


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results["models"])
    fig, axes = plt.subplots(2, len(sizes), figsize=(6 * len(sizes), 8), squeeze=False)
    colors = {"ours": "tab:blue", "ours_float32": "tab:green", "ours_bfloat16": "tab:olive",
              "ours_float16": "tab:purple", "ours_longer": "tab:cyan", "peer": "tab:red", "ours_lr_sweep": "tab:grey"}
    for column, size in enumerate(sizes):
        entry = results["models"][size]
        best_lr = entry.get("comparison", {}).get("peer_best_lr")
        groups = [(name, entry.get(name, [])) for name in ("ours", "ours_float32", "ours_bfloat16", "ours_float16",
                                                            "ours_longer", "ours_lr_sweep")]
        groups.append(("peer", [r for r in [*entry.get("peer", []), *entry.get("peer_seeds", [])]]))
        for row, (clock, label) in enumerate(zip(CLOCKS, ("wall", "process CPU"))):
            ax = axes[row][column]
            labelled = set()
            for name, runs in groups:
                for run in runs:
                    xs = [0.0] + [p[clock] / 60 for p in run["curve"]]
                    ys = [0.0] + [p["mlm_accuracy"] for p in run["curve"]]
                    faint = name == "peer" and run["lr"] != best_lr
                    text = {"ours": f"ours, defaults ({run['precision']}, lr {run['lr']:.2g})",
                            "ours_float32": f"ours, float32 (lr {run['lr']:.2g})",
                            "ours_bfloat16": f"ours, bfloat16 (lr {run['lr']:.2g})",
                            "ours_float16": f"ours, float16 + loss scaling (lr {run['lr']:.2g})",
                            "ours_longer": f"ours, defaults, {run['curve'][-1]['step']} steps",
                            "ours_lr_sweep": f"ours, lr {run['lr']:.2g}",
                            "peer": f"transformers ({run['precision']}), lr {run['lr']:.2g}"}[name]
                    ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=0.8 if faint else 1.6,
                            alpha=0.35 if faint else 0.9, color=colors[name], linestyle="--" if name == "peer" else "-",
                            label=None if text in labelled else text)
                    labelled.add(text)
            if entry.get("comparison"):
                ax.axhline(entry["comparison"]["peer_final_mlm_accuracy"], color="grey", linewidth=0.8, linestyle=":")
            ax.set_title(f"{size}: held-out masked-LM accuracy ({label} time)")
            ax.set_xlabel(f"training time, {label} (minutes, evaluation excluded)")
            ax.set_ylabel("masked-LM accuracy (held-out documents)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict:
    defaults = ConvergenceRun()
    parser = argparse.ArgumentParser(prog="python -m evaluation.pretrain_convergence",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="raw text, documents separated by blank lines")
    parser.add_argument("--vocab", default=str(DEFAULT_VOCAB), help="WordPiece vocab.txt for the shards and models")
    parser.add_argument("--work-dir", default="bench-results/convergence", help="segmented text, shards, models")
    parser.add_argument("--configs", nargs="+", default=[defaults.config],
                        help="architectures (bert_LAYERS_HIDDEN_HEADS), each trained by ours; NAME:STEPS gives that "
                             "size its own number of steps")
    parser.add_argument("--peer-configs", nargs="*", default=None,
                        help="architectures that also get the transformers peer (default: all of --configs)")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="optimizer steps per run")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per step")
    parser.add_argument("--max-seq-length", type=int, default=defaults.max_seq_length, help="shard sequence length")
    parser.add_argument("--max-predictions", type=int, default=defaults.max_predictions,
                        help="masked positions per sequence")
    parser.add_argument("--dupe-factor", type=int, default=defaults.dupe_factor,
                        help="masking passes over the training documents")
    parser.add_argument("--holdout-fraction", type=float, default=defaults.holdout_fraction,
                        help="documents held out for evaluation")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every, help="held-out evaluation every N steps")
    parser.add_argument("--eval-batches", type=int, default=defaults.eval_batches,
                        help="held-out batches per evaluation (0: all)")
    parser.add_argument("--peer-lrs", type=float, nargs="+", default=list(defaults.peer_lrs),
                        help="learning-rate grid of the transformers peer (its best is compared)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(defaults.seeds),
                        help="seeds of ours' runs and of the peer's runs at its best lr (the grid runs at the first)")
    parser.add_argument("--peer-seeds", type=int, nargs="*", default=list(defaults.peer_seeds),
                        help="seeds of the peer (its lr grid at the first, its best lr at each; default: --seeds)")
    parser.add_argument("--dtype", default=defaults.dtype, choices=["auto", "float32", "bfloat16", "float16"],
                        help="both systems' precision (auto: bfloat16 autocast where the device computes it natively)")
    parser.add_argument("--our-dtypes", nargs="*", default=[], choices=["float32", "bfloat16", "float16"],
                        help="also train ours, every seed, in these precisions (does --dtype learn as well?)")
    parser.add_argument("--threads", type=int, default=defaults.threads,
                        help="torch threads of both systems (0: torch's default)")
    parser.add_argument("--device", default=defaults.device, choices=["cpu", "cuda"],
                        help="where both systems train (cuda: the current GPU)")
    parser.add_argument("--our-lr-factors", type=float, nargs="*", default=[],
                        help="also train ours at these multiples of its default learning rate (where does the "
                             "default land?)")
    parser.add_argument("--sweep-configs", nargs="*", default=None,
                        help="architectures that get the --our-lr-factors sweep (default: all of --configs)")
    parser.add_argument("--ours-step-factors", type=float, nargs="*", default=[],
                        help="for a seed whose equal-steps run does not reach the peer's final accuracy, also train "
                             "ours on its defaults for this many times --steps (its schedule over the longer run)")
    parser.add_argument("--reuse", metavar="JSON", nargs="+", default=[],
                        help="take the runs earlier result files already hold (same model, system, lr, steps, seed "
                             "and precision setting) from them instead of training them again: a benchmark split "
                             "into parts run side by side (--no-ours, --peer-configs, --seeds) is merged this way")
    parser.add_argument("--no-ours", dest="ours", action="store_false",
                        help="train only the peer (a part of a benchmark run side by side; see --reuse)")
    parser.add_argument("--data-only", action="store_true",
                        help="only segment the corpus and make the training and held-out shards under --work-dir "
                             "(what a later run there reuses, e.g. on a GPU machine without NLTK's Punkt), then stop")
    parser.add_argument("--out-json", default="bench-results/pretrain_convergence.json",
                        help="every evaluation of every run, and the figures, as JSON")
    parser.add_argument("--plot", default=None, help="PNG of accuracy against time (default: next to --out-json)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible to torch here; use --device cpu")
    existing(parser, "--corpus", args.corpus)
    existing(parser, "--vocab", args.vocab)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    work = Path(args.work_dir)
    steps_of = {c.split(":")[0]: int(c.split(":")[1]) if ":" in c else args.steps for c in args.configs}
    peer_configs = list(steps_of) if args.peer_configs is None else args.peer_configs
    sweep_configs = list(steps_of) if args.sweep_configs is None else args.sweep_configs
    results: dict = {"machine": {"platform": platform.platform(), "processor": cpu_name(),
                                 "cpus": os.cpu_count(), "torch": torch.__version__,
                                 "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
                                 "date": time.strftime("%Y-%m-%d %H:%M")},
                     "settings": {k: v for k, v in vars(args).items() if k not in ("out_json", "plot")},
                     "models": {}}
    out_json = Path(args.out_json)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    earlier: dict[str, list[dict]] = {}  # model -> the runs of the --reuse files
    for path in args.reuse:
        for model, old in json.loads(Path(path).read_text())["models"].items():
            earlier.setdefault(model, []).extend(r for value in old.values() if isinstance(value, list)
                                                 for r in value if isinstance(r, dict) and "curve" in r)

    def write(model: str, entry: dict) -> None:
        tmp = out_json.with_name(f".{out_json.name}.tmp")
        tmp.write_text(json.dumps({**results, "models": {**results["models"], model: entry}}, indent=2) + "\n")
        tmp.replace(out_json)

    def settings(model: str, steps: int) -> ConvergenceRun:
        return ConvergenceRun(config=model, steps=steps, batch_size=args.batch_size,
                              max_seq_length=args.max_seq_length, max_predictions=args.max_predictions,
                              dupe_factor=args.dupe_factor, holdout_fraction=args.holdout_fraction,
                              eval_every=args.eval_every, eval_batches=args.eval_batches,
                              peer_lrs=tuple(args.peer_lrs), seeds=tuple(args.seeds),
                              peer_seeds=tuple(args.peer_seeds), dtype=args.dtype, threads=args.threads,
                              device=args.device)

    if args.data_only:  # the shards depend on the data settings only, not on the model
        train, heldout = prepare_data(args.corpus, args.vocab, work, settings(*next(iter(steps_of.items()))))
        print(f"training shards: {train}; held-out shards: {heldout}")
        return {"data": {"train": train, "heldout": heldout}}
    for model, steps in steps_of.items():
        run = settings(model, steps)
        runs = earlier.get(model, [])

        def reused(system: str, lr: float | None, steps_: int, seed: int, dtype: str, runs=runs) -> dict | None:
            for r in runs:
                if (r.get("system") == system and r["curve"][-1]["step"] == steps_ and r.get("seed") == seed
                        and r.get("dtype") == dtype and ((lr is None and r.get("lr_given") is None and system == "ours")
                                                         or (lr is not None and math.isclose(r["lr"], lr, rel_tol=1e-6)))):
                    return r
            return None

        entry = measure_size(run, args.corpus, args.vocab, work, our_dtypes=tuple(args.our_dtypes),
                             our_lr_factors=tuple(args.our_lr_factors) if model in sweep_configs else (),
                             ours_step_factors=tuple(args.ours_step_factors), ours=args.ours,
                             peer=model in peer_configs,
                             reused=reused, save=lambda e, m=model: write(m, e))
        if "comparison" in entry:
            print(f"{model}: {json.dumps(entry['comparison'])}", flush=True)
        results["models"][model] = entry
        write(model, entry)
    plot_path = Path(args.plot) if args.plot else out_json.with_suffix(".png")
    plot(results, plot_path)
    print(f"results: {out_json}; plot: {plot_path}")
    return results


if __name__ == "__main__":
    main()
