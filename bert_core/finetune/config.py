"""Fine-tuning's settings (`bert-pipeline finetune` flags, the bert_finetune DAG's per-task settings).

`FinetuneConfig` is composed of the pieces pretraining shares (bert_core.train.config) and `SquadOptions`,
which export and predict use too; the flags, their defaults and help are generated from these fields.
Importable without torch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.options import Form, option, option_like
from bert_core.tasks import catalog
from bert_core.train.config import (
    OPTIMIZATION,
    RAY,
    TRACKING,
    OptimizerConfig,
    RayTrainConfig,
    TrackingConfig,
)

log = logging.getLogger(__name__)

TASK = "task and data"
SQUAD = "SQuAD"

# max_seq_length's defaults (Google's run_classifier.py and run_squad.py): one example of a classification,
# regression or NER task; one window of a SQuAD context.
MAX_SEQ_LENGTH = 128
SQUAD_MAX_SEQ_LENGTH = 384
# max_seq_length's name for classification/regression/NER before one name meant every task kind (2026-11): a
# conf, a task card or a manifest that names it still works (renamed_settings), and so does --max-len.
DEPRECATED_MAX_LEN = "max_len"

# Fields that change how the step runs, not what it computes: left out of the idempotence check.
_RUN_FIELDS = ("output", "overwrite", "tracking", "tracking_uri", "device", "storage")


@dataclass(kw_only=True)
class SquadOptions:
    """How SQuAD input is windowed and answers are picked: the same flags in `finetune` and `predict`, the same
    defaults in `export`'s evaluation (BERT's run_squad.py defaults)."""

    doc_stride: int = option(128, "tokens between the starts of a long context's windows", group=SQUAD,
                             section=Form.SQUAD)
    max_query_length: int = option(64, "question tokens kept", group=SQUAD, section=Form.SQUAD)
    n_best_size: int = option(20, "candidate answers kept per question (nbest_predictions.json)", group=SQUAD,
                              section=Form.SQUAD)
    max_answer_length: int = option(30, "longest answer in tokens", group=SQUAD, section=Form.SQUAD)
    version_2: bool = option(False, "SQuAD 2.0: questions may have no answer", group=SQUAD, section=Form.SQUAD)
    null_score_diff_threshold: float = option(
        0.0, "SQuAD 2.0: answer '' when null score - best span score exceeds this", group=SQUAD, section=Form.SQUAD)

    def squad_options(self) -> SquadOptions:
        """Just these options (from a config composed of them)."""
        return SquadOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SquadOptions)})


@dataclass(kw_only=True)
class FinetuneConfig(TrackingConfig, RayTrainConfig, SquadOptions, OptimizerConfig):
    GROUPS = (TASK, OPTIMIZATION, SQUAD, TRACKING, RAY)  # the --help sections, in this order

    task: str = option(help="the task (GLUE names are case-insensitive)", group=TASK, section=Form.DATA,
                       positional=True,
                       metavar="TASK")
    data_dir: str = option(help="directory with the task's files as distributed (GLUE: train.tsv, dev.tsv [, "
                           "test.tsv]; MNLI: dev_matched.tsv, dev_mismatched.tsv; XNLI: train.tsv, dev.tsv, or the "
                           "original xnli.dev.tsv/xnli.test.tsv with XNLI-MT's multinli/ directory; SQuAD: "
                           "train-v1.1.json, dev-v1.1.json or the v2.0 files; NER: train.txt, dev.txt)",
                           group=TASK, section=Form.DATA)
    model: str = option(help="pretrained model directory, s3:// URI or zoo name (needs vocab.txt)",
                        group=TASK, section=Form.MODEL,
                        metavar="NAME_OR_DIR")
    output: str = option(help="output directory (written atomically)", group=TASK, section=Form.STORAGE,
                         metavar="DIR_OR_URI")
    overwrite: bool = option(False, "replace an existing output directory", group=TASK, section=Form.STORAGE)
    language: str | None = option(None, "XNLI: rows of this language in the original multi-language files "
                                  "xnli.dev.tsv/xnli.test.tsv, and the XNLI-MT train file "
                                  "multinli/multinli.train.<language>.tsv looked for in --data-dir",
                                  group=TASK, section=Form.DATA,
                                  default_help="zh")
    train_file: str | None = option(None, "train on this file instead of the one in --data-dir, e.g. XNLI-MT-1.0's "
                                    "multinli/multinli.train.en.tsv for XNLI's zero-shot setting (dev/test rows "
                                    "still picked by --language)", group=TASK, section=Form.DATA, metavar="FILE")
    max_train_examples: int | None = option(None, "train on the first N rows/windows only (quick runs)",
                                            group=TASK, section=Form.DATA)

    batch_size: int = option(32, "examples per micro-batch, all workers together (split across --num-workers); "
                             "an update is --accumulate micro-batches",
                             group=OPTIMIZATION, section=Form.OPTIMIZATION)
    epochs: int = option(3, "passes over the training data", group=OPTIMIZATION, section=Form.OPTIMIZATION)
    optimizer: str | None = option_like(OptimizerConfig, "optimizer", "adamw")
    lr: float | None = option_like(OptimizerConfig, "lr", 2e-5)
    warmup_ratio: float | None = option_like(OptimizerConfig, "warmup_ratio", 0.1)
    # One length for every task kind, as Google's run_classifier.py / run_squad.py call it; its default depends on
    # the kind (default_max_seq_length), resolved in __post_init__. `max_len` was the classification/NER one.
    max_seq_length: int | None = option(
        None, "tokens per input sequence: classification/regression/NER examples are cut to it (longest text "
        "first), SQuAD contexts read in windows of it", group=OPTIMIZATION, section=Form.DATA,
        deprecated=("--max-len",),
        default_help=f"{MAX_SEQ_LENGTH} for classification, regression and NER, {SQUAD_MAX_SEQ_LENGTH} for SQuAD")
    seed: int = option(2, "random seed", group=OPTIMIZATION, section=Form.OPTIMIZATION)
    eval_batch_size: int = option(64, "examples per batch when predicting", group=OPTIMIZATION, section=Form.SCALE)

    device: str | None = option(None, "torch device of an in-process run", group=RAY, section=Form.SCALE,
                                default_help="cuda when available, else cpu")

    def __post_init__(self) -> None:
        if self.max_seq_length is None:
            self.max_seq_length = default_max_seq_length(catalog.get(self.task).kind)

    def validate(self) -> None:
        for name in ("batch_size", "epochs", "max_seq_length", "eval_batch_size", "doc_stride",
                     "max_query_length", "n_best_size", "max_answer_length"):
            if getattr(self, name) < 1:
                raise BertPipelineError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.lr is None or self.warmup_ratio is None or self.optimizer is None:
            raise BertPipelineError("fine-tuning needs an optimizer, --lr and --warmup-ratio (defaults: adamw, 2e-5, 0.1)")
        self.check_workers()
        self.check_optimization()

    def result_config(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _RUN_FIELDS}


def default_max_seq_length(kind: str) -> int:
    """max_seq_length when none is given, for a task of `kind` (bert_core.tasks.catalog)."""
    return SQUAD_MAX_SEQ_LENGTH if kind == "squad" else MAX_SEQ_LENGTH


def renamed_settings(settings: Mapping[str, Any], kind: str, where: str) -> dict[str, Any]:
    """Fine-tuning `settings` for a task of `kind` with the deprecated `max_len` read as `max_seq_length`, as it
    was meant: `max_len` was the length of a classification, regression or NER example, where the SQuAD window
    length `max_seq_length` did not apply (so `max_len` wins there), and a SQuAD run ignored it (dropped). For
    settings written before the rename: a DAG conf, a task card, a finetune manifest; `where` names it in the
    warning."""
    settings = dict(settings)
    if DEPRECATED_MAX_LEN not in settings:
        return settings
    value = settings.pop(DEPRECATED_MAX_LEN)
    if kind == "squad":
        log.warning("%s: %r is deprecated and never applied to SQuAD (its length is max_seq_length): ignored",
                    where, DEPRECATED_MAX_LEN)
    else:
        log.warning("%s: %r is deprecated (read as max_seq_length %s); write 'max_seq_length'", where,
                    DEPRECATED_MAX_LEN, value)
        settings["max_seq_length"] = value
    return settings
