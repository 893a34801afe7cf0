"""`bert-pipeline finetune TASK --data-dir DIR --model NAME_OR_DIR --output DIR`."""

from __future__ import annotations

import argparse
import json

from bert_core.finetune.tasks.registry import TASKS
from bert_pipeline.commands.ray_flags import add_ray_train_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", metavar="TASK", help=f"one of: {', '.join(TASKS)} (GLUE names are case-insensitive)")
    p.add_argument("--data-dir", required=True, help="directory with the task's files as distributed "
                   "(GLUE: train.tsv, dev.tsv [, test.tsv]; MNLI: dev_matched.tsv, dev_mismatched.tsv; XNLI: "
                   "train.tsv, dev.tsv, or the original xnli.dev.tsv/xnli.test.tsv with XNLI-MT's multinli/ directory; SQuAD: train-v1.1.json, dev-v1.1.json or the v2.0 files; NER: train.txt, dev.txt)")
    p.add_argument("--model", required=True, metavar="NAME_OR_DIR",
                   help="pretrained model directory, s3:// URI or zoo name (needs vocab.txt)")
    p.add_argument("--output", required=True, metavar="DIR_OR_URI", help="output directory (written atomically)")
    p.add_argument("--batch-size", type=int, default=32, help="examples per micro-batch, all workers together (default 32)")
    p.add_argument("--epochs", type=int, default=3, help="passes over the training data (default 3)")
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (default 2e-5)")
    p.add_argument("--max-len", type=int, default=128, help="max tokens per example, classification/NER (default 128)")
    p.add_argument("--epsilon", type=float, default=1e-6, help="Adam epsilon (default 1e-6)")
    p.add_argument("--optimizer", choices=["adam", "bertadam", "lamb"], default="adam",
                   help="adam (decoupled weight decay, AdamW), bertadam (BERT's Adam, no bias correction) or lamb")
    p.add_argument("--weight-decay", type=float, default=0.01, help="decoupled weight decay (default 0.01)")
    p.add_argument("--accumulate", type=int, default=1, help="micro-batches per update (default 1)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                   help="autocast dtype; float16 uses dynamic loss scaling (default float32)")
    p.add_argument("--seed", type=int, default=2, help="random seed (default 2)")
    p.add_argument("--warmup-ratio", type=float, default=0.1, help="fraction of updates with linear warmup (0.1)")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="global gradient-norm clip (default 1.0)")
    p.add_argument("--eval-batch-size", type=int, default=64, help="examples per batch when predicting (64)")
    p.add_argument("--language", help="XNLI: rows of this language in the original multi-language files "
                   "xnli.dev.tsv/xnli.test.tsv (default zh), and the XNLI-MT train file "
                   "multinli/multinli.train.<language>.tsv looked for in --data-dir")
    p.add_argument("--train-file", metavar="FILE",
                   help="train on this file instead of the one in --data-dir, e.g. XNLI-MT-1.0's "
                        "multinli/multinli.train.en.tsv for XNLI's zero-shot setting (dev/test rows still "
                        "picked by --language)")
    p.add_argument("--max-seq-length", type=int, default=384, help="SQuAD window length in tokens (default 384)")
    p.add_argument("--doc-stride", type=int, default=128, help="SQuAD: tokens between window starts (default 128)")
    p.add_argument("--max-query-length", type=int, default=64, help="SQuAD: question tokens kept (default 64)")
    p.add_argument("--n-best-size", type=int, default=20, help="SQuAD: candidate answers kept (default 20)")
    p.add_argument("--max-answer-length", type=int, default=30, help="SQuAD: longest answer in tokens (default 30)")
    p.add_argument("--version-2", action="store_true", help="SQuAD 2.0 (unanswerable questions)")
    p.add_argument("--null-score-diff-threshold", type=float, default=0.0,
                   help="SQuAD 2.0: answer '' when null score - best span score exceeds this (default 0.0)")
    p.add_argument("--max-train-examples", type=int, help="train on the first N rows/windows only (quick runs)")
    p.add_argument("--device", help="torch device of an in-process run (default: cuda when available, else cpu)")
    add_ray_train_arguments(p, 1, batch_note=", each on its share of every batch: the global batch stays "
                            "--batch-size")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or the embedded sqlite)")


def run(args: argparse.Namespace) -> int:
    from bert_core.finetune.step import FINETUNE, FinetuneConfig
    from bert_core.launch.run import run_step

    fields = {f for f in FinetuneConfig.__dataclass_fields__}
    values = {k: v for k, v in vars(args).items() if k in fields}
    cfg = FinetuneConfig(**values, tracking=not args.no_tracking)
    result = run_step(FINETUNE, cfg)
    print(json.dumps({"output": args.output, "best_epoch": result.get("best_epoch"), "metrics": result["metrics"]},
                     indent=2))
    return 0
