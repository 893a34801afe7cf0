"""Time to held-out masked-LM accuracy: our pretraining with its defaults against transformers' BertForPreTraining.

MLPerf's BERT metric is the time to a held-out masked-LM accuracy; this is the same measure at CPU
scale. One run, one machine, both systems:

1. Real text -> `segment` -> `make-shards` with a held-out split by document (the held-out documents
   never appear in training, and their random next sentences come from held-out documents only).
2. Ours: `bert_core.pretrain.step.pretrain` from scratch with only --model, --num-steps and
   --batch-size given (optimizer, lr and warmup by the default rule), evaluated on the held-out shards
   every --eval-every steps.
3. The peer: transformers' BertForPreTraining trained the way a transformers user does: torch AdamW
   (no decay on bias/LayerNorm, weight decay 0.01), linear warmup (10%) and decay, gradient clipping 1.0,
   `-100` labels on every position but the masked ones; same shards, same batches in the same order,
   same steps, same held-out batches; at each learning rate of --peer-lrs, the best kept.
4. Optionally ours at explicit learning rates too (--our-lrs), to see where the default rule lands.

Reported per model size: held-out accuracy at equal steps, and the training wall-clock (evaluation
time excluded for both) ours needs to reach the peer's final held-out masked-LM accuracy, as a ratio
of the peer's time. Timings are never asserted anywhere; the figures go to --out-json and a plot.

    python -m evaluation.pretrain_convergence --configs bert_2_128_2 --steps 600 --out-json bench-results/conv.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import time
from pathlib import Path

import torch

from evaluation.default_inputs import SHARED_DATA, existing

DEFAULT_CORPUS = SHARED_DATA / "corpus" / "wiki_docs.txt"
DEFAULT_VOCAB = SHARED_DATA / "bert" / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt"


# --------------------------------------------------------------------------- data


def prepare_data(corpus: str, vocab: str, work: Path, max_seq_length: int, max_predictions: int,
                 dupe_factor: int, holdout_fraction: float) -> tuple[str, str]:
    """segment -> make-shards with a held-out split; returns (training shards dir, held-out shards dir)."""
    from bert_core.data.instances import ShardConfig
    from bert_core.data.make_shards import make_split_shards
    from bert_core.data.segment import segment

    segmented = work / "segmented"
    segment([corpus], str(segmented))
    texts = sorted(str(p) for p in segmented.iterdir() if p.name != "manifest.json")
    train, heldout = work / f"shards-{max_seq_length}", work / f"shards-{max_seq_length}-heldout"
    config = ShardConfig(max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions,
                         dupe_factor=dupe_factor, holdout_fraction=holdout_fraction)
    made = make_split_shards(texts, str(train), vocab, config, str(heldout), workers=2, progress=False)
    print(f"shards: {made['totals']['instances']} training instances from {made['totals']['documents']} documents; "
          f"held out {made['heldout']['instances']} instances from {made['heldout']['documents']} documents")
    return str(train), str(heldout)


# --------------------------------------------------------------------------- ours


class CurveTracker:
    """A bert_core Tracker that records held-out evaluations against training wall-clock.

    The training loop logs the interval metrics, then (at an evaluation step) evaluates and logs `eval_*`:
    the time between those two calls is evaluation, subtracted so that the clock counts training only.
    """

    def __init__(self) -> None:
        from bert_core.io.tracking import NullTracker

        self._base = NullTracker()
        self.run_id = None
        self.start = time.perf_counter()
        self.eval_seconds = 0.0
        self._last_train_log = self.start
        self.points: list[dict] = []
        self.params: dict = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = time.perf_counter()
        if "eval_mlm_accuracy" in metrics:
            if not self.points or self.points[-1]["step"] != step or "eval_mlm_accuracy_chance" in metrics:
                self.points = [p for p in self.points if p["step"] != step]
                self.points.append({"step": step,
                                    "seconds": self._last_train_log - self.start - self.eval_seconds,
                                    "mlm_accuracy": metrics["eval_mlm_accuracy"],
                                    "nsp_accuracy": metrics["eval_nsp_accuracy"]})
            self.eval_seconds += now - self._last_train_log
        self._last_train_log = now

    def log_params(self, params: dict) -> None:
        # Called once the model, data and optimizer are built, right before the first step: the clock
        # starts here, as the peer's starts at its first step.
        self.params = dict(params)
        self.start = self._last_train_log = time.perf_counter()

    def __getattr__(self, name: str):
        return getattr(self._base, name)


def run_ours(model: str, train: str, heldout: str, work: Path, steps: int, batch: int, eval_every: int,
             eval_batches: int, lr: float | None, seed: int) -> dict:
    from bert_core.pretrain.config import PretrainConfig
    from bert_core.pretrain.step import pretrain

    out = work / f"ours-{model}-{lr or 'default'}-{steps}x{batch}"
    config = PretrainConfig(data=train, data_eval=heldout, output=str(out), model=model, num_steps=steps,
                            batch_size=batch, lr=lr, eval_interval=eval_every, eval_max_batches=eval_batches,
                            ckpt_interval=0, log_interval=eval_every, seed=seed, tracking=False, progress=False,
                            overwrite=True)
    tracker = CurveTracker()
    t0 = time.perf_counter()
    result = pretrain(config, tracker)
    wall = time.perf_counter() - t0
    points = tracker.points
    return {"system": "ours", "lr": tracker.params.get("lr"), "optimizer": tracker.params.get("optimizer"),
            "warmup_ratio": tracker.params.get("warmup_ratio"), "lr_given": lr, "curve": points,
            "train_seconds": points[-1]["seconds"], "wall_seconds": wall,
            "learning_check": result.get("learning_check", {}).get("status"),
            "final": points[-1]}


# --------------------------------------------------------------------------- the transformers peer


def run_peer(model: str, train: str, heldout: str, steps: int, batch: int, eval_every: int, eval_batches: int,
             lr: float, seed: int) -> dict:
    import transformers

    from bert_core.model import zoo
    from bert_core.pretrain.stream import PretrainStream, ShardSet, StreamConfig
    from bert_core.pretrain.stream import eval_batches as heldout_batches

    ours = zoo.architecture_config(model)
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
    optimizer = torch.optim.AdamW(groups, lr=lr)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    shards, eval_shards = ShardSet(train), ShardSet(heldout)
    stream = PretrainStream(shards, StreamConfig(batch, seed, 1, False), 0, 1, config.vocab_size)

    def evaluate() -> dict:
        net.eval()
        correct = total = nsp_correct = nsp_total = 0.0
        with torch.no_grad():
            for b in heldout_batches(eval_shards, batch, max_batches=eval_batches):
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

    points, seconds = [], 0.0
    for step in range(1, steps + 1):
        b = next(stream)
        labels = torch.full_like(b["input_ids"], -100)
        masked = torch.where(b["masked_lm_weights"] > 0, b["masked_lm_ids"], -100)
        rows = torch.arange(len(labels))[:, None].expand_as(masked)
        real = b["masked_lm_weights"] > 0
        labels[rows[real], b["masked_lm_positions"][real]] = masked[real]
        t0 = time.perf_counter()
        out = net(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                  labels=labels, next_sentence_label=b["next_sentence_labels"])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        seconds += time.perf_counter() - t0
        if step % eval_every == 0 or step == steps:
            points.append({"step": step, "seconds": seconds, **evaluate()})
    return {"system": "transformers", "lr": lr, "optimizer": "torch AdamW", "warmup_ratio": 0.1, "curve": points,
            "train_seconds": seconds, "final": points[-1]}


# --------------------------------------------------------------------------- comparison


def time_to_reach(curve: list[dict], target: float) -> float | None:
    """Training seconds at which a curve first reaches `target` held-out masked-LM accuracy (linear
    interpolation between evaluation points); None when it never does."""
    prev_t, prev_a = 0.0, 0.0
    for p in curve:
        if p["mlm_accuracy"] >= target:
            if p["mlm_accuracy"] == prev_a:
                return p["seconds"]
            return prev_t + (target - prev_a) / (p["mlm_accuracy"] - prev_a) * (p["seconds"] - prev_t)
        prev_t, prev_a = p["seconds"], p["mlm_accuracy"]
    return None


def compare(ours: dict, peers: list[dict], longer: list[dict] | None = None) -> dict:
    """Ours (equal steps) and the best peer; the time to the peer's final accuracy is the least over ours'
    default-rule runs, the equal-steps one and any longer budget (each with its own schedule, as a user
    who has time to spare would pick)."""
    best = max(peers, key=lambda r: r["final"]["mlm_accuracy"])
    target = best["final"]["mlm_accuracy"]
    reaches = [(t, run["curve"][-1]["step"]) for run in [ours, *(longer or [])]
               if (t := time_to_reach(run["curve"], target)) is not None]
    reach, reach_steps = min(reaches) if reaches else (None, None)
    return {
        "peer_best_lr": best["lr"], "peer_final_mlm_accuracy": target,
        "peer_final_nsp_accuracy": best["final"]["nsp_accuracy"], "peer_train_seconds": best["train_seconds"],
        "ours_final_mlm_accuracy": ours["final"]["mlm_accuracy"],
        "ours_final_nsp_accuracy": ours["final"]["nsp_accuracy"], "ours_train_seconds": ours["train_seconds"],
        "ours_seconds_to_peer_final": reach, "ours_run_reaching_it_steps": reach_steps,
        "time_to_accuracy_ratio": best["train_seconds"] / reach if reach else None,
        "step_time_ratio": (best["train_seconds"] / best["curve"][-1]["step"])
        / (ours["train_seconds"] / ours["curve"][-1]["step"]),
    }


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results["models"])
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.2), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        entry = results["models"][size]
        runs = [entry["ours"], *entry.get("ours_longer", []), *entry.get("ours_lr_sweep", []),
                *entry.get("peer", [])]
        for run in runs:
            xs = [0.0] + [p["seconds"] / 60 for p in run["curve"]]
            ys = [0.0] + [p["mlm_accuracy"] for p in run["curve"]]
            default = run is entry["ours"]
            longer = run in entry.get("ours_longer", [])
            label = (f"ours, defaults (lr {run['lr']:.2g})" if default else
                     f"ours, defaults, {run['curve'][-1]['step']} steps" if longer else
                     f"{'ours' if run['system'] == 'ours' else 'transformers'}, lr {run['lr']:.2g}")
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=2.2 if default else 1.2,
                    linestyle="-" if run["system"] == "ours" else "--", label=label)
        if entry.get("comparison"):
            ax.axhline(entry["comparison"]["peer_final_mlm_accuracy"], color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(f"{size}: held-out masked-LM accuracy")
        ax.set_xlabel("training time (minutes, evaluation excluded)")
        ax.set_ylabel("masked-LM accuracy (held-out documents)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m evaluation.pretrain_convergence", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="raw text, documents separated by blank lines")
    parser.add_argument("--vocab", default=str(DEFAULT_VOCAB), help="WordPiece vocab.txt for the shards and models")
    parser.add_argument("--work-dir", default="bench-results/convergence", help="segmented text, shards, models")
    parser.add_argument("--configs", nargs="+", default=["bert_2_128_2"],
                        help="architectures (bert_LAYERS_HIDDEN_HEADS), each trained by ours; NAME:STEPS gives that "
                             "size its own number of steps")
    parser.add_argument("--peer-configs", nargs="*", default=None,
                        help="architectures that also get the transformers peer (default: all of --configs)")
    parser.add_argument("--steps", type=int, default=600, help="optimizer steps per run")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per step")
    parser.add_argument("--max-seq-length", type=int, default=128, help="shard sequence length")
    parser.add_argument("--max-predictions", type=int, default=20, help="masked positions per sequence")
    parser.add_argument("--dupe-factor", type=int, default=5, help="masking passes over the training documents")
    parser.add_argument("--holdout-fraction", type=float, default=0.1, help="documents held out for evaluation")
    parser.add_argument("--eval-every", type=int, default=50, help="held-out evaluation every N steps")
    parser.add_argument("--eval-batches", type=int, default=20, help="held-out batches per evaluation (0: all)")
    parser.add_argument("--peer-lrs", type=float, nargs="+", default=[5e-4, 1e-3, 2e-3],
                        help="learning-rate grid of the transformers peer (its best is compared)")
    parser.add_argument("--our-lr-factors", type=float, nargs="*", default=[],
                        help="also train ours at these multiples of its default learning rate (where does the "
                             "default land?)")
    parser.add_argument("--sweep-configs", nargs="*", default=None,
                        help="architectures that get the --our-lr-factors sweep (default: all of --configs)")
    parser.add_argument("--ours-step-factors", type=float, nargs="*", default=[],
                        help="also train ours on its defaults for this many times --steps (its schedule over the "
                             "longer run): the time to the peer's final accuracy may come from such a run")
    parser.add_argument("--reuse", metavar="JSON",
                        help="take the runs an earlier result file already holds (same model, system, lr, steps) "
                             "from it instead of training them again")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-json", default="bench-results/pretrain_convergence.json")
    parser.add_argument("--plot", default=None, help="PNG of accuracy against time (default: next to --out-json)")
    args = parser.parse_args(argv)
    existing(parser, "--corpus", args.corpus)
    existing(parser, "--vocab", args.vocab)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(max(1, torch.get_num_threads()))

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    train_dir, heldout = prepare_data(args.corpus, args.vocab, work, args.max_seq_length, args.max_predictions,
                                  args.dupe_factor, args.holdout_fraction)
    steps_of = {c.split(":")[0]: int(c.split(":")[1]) if ":" in c else args.steps for c in args.configs}
    peer_configs = list(steps_of) if args.peer_configs is None else args.peer_configs
    sweep_configs = list(steps_of) if args.sweep_configs is None else args.sweep_configs
    results: dict = {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                                 "torch_threads": torch.get_num_threads(), "torch": torch.__version__},
                     "settings": {k: v for k, v in vars(args).items() if k not in ("out_json", "plot")},
                     "models": {}}
    out_json = Path(args.out_json)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    earlier = json.loads(Path(args.reuse).read_text())["models"] if args.reuse else {}

    def reused(model: str, system: str, lr: float | None, steps: int) -> dict | None:
        old = earlier.get(model, {})
        for run in [old.get("ours"), *old.get("ours_longer", []), *old.get("ours_lr_sweep", []),
                    *old.get("peer", [])]:
            if run and run["system"] == system and run["curve"][-1]["step"] == steps and (
                    (lr is None and run.get("lr_given") is None and system == "ours")
                    or (lr is not None and math.isclose(run["lr"], lr, rel_tol=1e-6))):
                return run
        return None

    def train(model: str, system: str, lr: float | None, steps: int, common: dict) -> dict:
        run = reused(model, system, lr, steps)
        if run is None:
            args_ = {**common, "steps": steps, "lr": lr}
            run = run_ours(work=work, **args_) if system == "ours" else run_peer(**args_)
        _report(model, run)
        return run

    for model, steps in steps_of.items():
        entry: dict = {"steps": steps}
        common = dict(model=model, train=train_dir, heldout=heldout, batch=args.batch_size,
                      eval_every=args.eval_every, eval_batches=args.eval_batches, seed=args.seed)
        entry["ours"] = train(model, "ours", None, steps, common)
        entry["ours_longer"] = [train(model, "ours", None, round(steps * f), common) for f in args.ours_step_factors]
        entry["ours_lr_sweep"] = []
        for factor in args.our_lr_factors if model in sweep_configs else []:
            entry["ours_lr_sweep"].append(train(model, "ours", entry["ours"]["lr"] * factor, steps, common))
            out_json.write_text(json.dumps({**results, "models": {**results["models"], model: entry}}, indent=2))
        if model in peer_configs:
            entry["peer"] = []
            for lr in args.peer_lrs:
                entry["peer"].append(train(model, "transformers", lr, steps, common))
                out_json.write_text(json.dumps({**results, "models": {**results["models"], model: entry}}, indent=2))
            entry["comparison"] = compare(entry["ours"], entry["peer"], entry["ours_longer"])
            print(f"{model}: {json.dumps(entry['comparison'])}")
        results["models"][model] = entry
        out_json.write_text(json.dumps(results, indent=2) + "\n")  # after every model: a long run keeps its figures
    plot_path = Path(args.plot) if args.plot else out_json.with_suffix(".png")
    plot(results, plot_path)
    print(f"results: {out_json}; plot: {plot_path}")
    return results


def _report(model: str, run: dict) -> None:
    final = run["final"]
    print(f"{model} {run['system']:>12} lr {run['lr']:.2g}: held-out MLM {final['mlm_accuracy']:.4f}, "
          f"NSP {final['nsp_accuracy']:.4f} after {final['step']} steps, {run['train_seconds']:.0f} s training",
          flush=True)


if __name__ == "__main__":
    main()
