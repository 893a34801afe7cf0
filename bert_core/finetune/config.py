"""Fine-tuning's settings (`bert-pipeline finetune` flags, the bert_finetune DAG's per-task settings).

`FinetuneConfig` is composed of the pieces pretraining shares (bert_core.train.config) and `SquadOptions`,
which export and predict use too; the flags, their defaults and help are generated from these fields.
Importable without torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.options import option, option_like
from bert_core.train.config import (
    OPTIMIZATION,
    RAY,
    TRACKING,
    OptimizerConfig,
    RayTrainConfig,
    TrackingConfig,
)

TASK = "task and data"
SQUAD = "SQuAD"

# Fields that change how the step runs, not what it computes: left out of the idempotence check.
_RUN_FIELDS = ("output", "overwrite", "tracking", "tracking_uri", "device", "storage")


@dataclass(kw_only=True)
class SquadOptions:
    """How SQuAD input is windowed and answers are picked: the same flags in `finetune` and `predict`, the same
    defaults in `export`'s evaluation (BERT's run_squad.py defaults)."""

    doc_stride: int = option(128, "tokens between the starts of a long context's windows", group=SQUAD)
    max_query_length: int = option(64, "question tokens kept", group=SQUAD)
    n_best_size: int = option(20, "candidate answers kept per question (nbest_predictions.json)", group=SQUAD)
    max_answer_length: int = option(30, "longest answer in tokens", group=SQUAD)
    version_2: bool = option(False, "SQuAD 2.0: questions may have no answer", group=SQUAD)
    null_score_diff_threshold: float = option(
        0.0, "SQuAD 2.0: answer '' when null score - best span score exceeds this", group=SQUAD)

    def squad_options(self) -> SquadOptions:
        """Just these options (from a config composed of them)."""
        return SquadOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SquadOptions)})


@dataclass(kw_only=True)
class FinetuneConfig(TrackingConfig, RayTrainConfig, SquadOptions, OptimizerConfig):
    GROUPS = (TASK, OPTIMIZATION, SQUAD, TRACKING, RAY)  # the --help sections, in this order

    task: str = option(help="the task (GLUE names are case-insensitive)", group=TASK, positional=True,
                       metavar="TASK")
    data_dir: str = option(help="directory with the task's files as distributed (GLUE: train.tsv, dev.tsv [, "
                           "test.tsv]; MNLI: dev_matched.tsv, dev_mismatched.tsv; XNLI: train.tsv, dev.tsv, or the "
                           "original xnli.dev.tsv/xnli.test.tsv with XNLI-MT's multinli/ directory; SQuAD: "
                           "train-v1.1.json, dev-v1.1.json or the v2.0 files; NER: train.txt, dev.txt)", group=TASK)
    model: str = option(help="pretrained model directory, s3:// URI or zoo name (needs vocab.txt)", group=TASK,
                        metavar="NAME_OR_DIR")
    output: str = option(help="output directory (written atomically)", group=TASK, metavar="DIR_OR_URI")
    overwrite: bool = option(False, "replace an existing output directory", group=TASK)
    language: str | None = option(None, "XNLI: rows of this language in the original multi-language files "
                                  "xnli.dev.tsv/xnli.test.tsv, and the XNLI-MT train file "
                                  "multinli/multinli.train.<language>.tsv looked for in --data-dir", group=TASK,
                                  default_help="zh")
    train_file: str | None = option(None, "train on this file instead of the one in --data-dir, e.g. XNLI-MT-1.0's "
                                    "multinli/multinli.train.en.tsv for XNLI's zero-shot setting (dev/test rows "
                                    "still picked by --language)", group=TASK, metavar="FILE")
    max_train_examples: int | None = option(None, "train on the first N rows/windows only (quick runs)", group=TASK)

    batch_size: int = option(32, "examples per update, all workers together (split across --num-workers)",
                             group=OPTIMIZATION)
    epochs: int = option(3, "passes over the training data", group=OPTIMIZATION)
    optimizer: str | None = option_like(OptimizerConfig, "optimizer", "adamw")
    lr: float | None = option_like(OptimizerConfig, "lr", 2e-5)
    warmup_ratio: float | None = option_like(OptimizerConfig, "warmup_ratio", 0.1)
    max_len: int = option(128, "max tokens per example, classification/NER", group=OPTIMIZATION)
    seed: int = option(2, "random seed", group=OPTIMIZATION)
    eval_batch_size: int = option(64, "examples per batch when predicting", group=OPTIMIZATION)

    max_seq_length: int = option(384, "window length in tokens", group=SQUAD)

    device: str | None = option(None, "torch device of an in-process run", group=RAY,
                                default_help="cuda when available, else cpu")

    def validate(self) -> None:
        for name in ("batch_size", "epochs", "max_len", "eval_batch_size", "max_seq_length", "doc_stride",
                     "max_query_length", "n_best_size", "max_answer_length"):
            if getattr(self, name) < 1:
                raise BertPipelineError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.lr is None or self.warmup_ratio is None or self.optimizer is None:
            raise BertPipelineError("fine-tuning needs an optimizer, --lr and --warmup-ratio (defaults: adamw, 2e-5, 0.1)")
        self.check_workers()
        self.check_optimization()

    def result_config(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _RUN_FIELDS}
