"""Fine-tuning's settings (`bert-pipeline finetune` flags, the bert_finetune DAG's per-task settings)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bert_core.errors import BertPipelineError

OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "bertadam": "bertadam", "lamb": "lamb"}
# Fields that change how the step runs, not what it computes: left out of the idempotence check.
_RUN_FIELDS = ("output", "overwrite", "tracking", "tracking_uri", "device", "storage")


@dataclass
class FinetuneConfig:
    task: str
    data_dir: str
    model: str
    output: str
    batch_size: int = 32  # the global batch: split across workers
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
    language: str | None = None  # XNLI rows of the original multi-language file; XNLI-MT train file
    train_file: str | None = None  # instead of the data dir's train file (XNLI-MT, other layouts)
    # SQuAD
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2: bool = False
    null_score_diff_threshold: float = 0.0
    max_train_examples: int | None = None  # a quick run on the first N (benchmarks, demos)
    # Ray Train
    num_workers: int = 1
    use_gpu: bool = False
    storage: str | None = None
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
        if self.num_workers < 0:
            raise BertPipelineError("--num-workers must not be negative")

    def runs_on_ray(self) -> bool:
        """As pretraining: Ray for more than one worker, or for one when RAY_ADDRESS names a cluster."""
        return self.num_workers > 1 or (self.num_workers == 1 and bool(os.environ.get("RAY_ADDRESS")))

    def result_config(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _RUN_FIELDS}
