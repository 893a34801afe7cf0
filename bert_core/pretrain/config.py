"""`PretrainConfig`: every `bert-pipeline pretrain` setting, importable without torch (the CLI's --help)."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

from bert_core.errors import BertPipelineError

# Settings that change how a run is executed or observed, not what it computes: kept out of the
# manifest's `config`, so re-running with e.g. --resume or another tracking URI is still a no-op.
LAUNCH_FIELDS = ("resume", "tracking", "tracking_uri", "storage", "max_failures", "run_name", "overwrite",
                 "log_interval", "keep_checkpoints", "ckpt_dir", "ckpt_interval", "progress",
                 "watch_fraction")


@dataclass
class PretrainConfig:
    """All `bert-pipeline pretrain` flags (see commands/pretrain.py for their help)."""

    data: str
    output: str
    model: str | None = None
    pretrained: str | None = None
    data_eval: str | None = None
    vocab: str | None = None
    batch_size: int = 32
    accumulate: int = 1
    # None: chosen by the default rule for the model size and global batch (bert_core.pretrain.recipe).
    lr: float | None = None
    warmup_ratio: float | None = None
    num_steps: int | None = None
    epochs: int | None = None
    optimizer: str | None = None
    weight_decay: float = 0.01
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0
    dtype: str = "float32"
    ckpt_interval: int = 1000
    ckpt_dir: str | None = None
    keep_checkpoints: int = 3
    resume: str | None = None  # "latest", "auto" (latest if any, else start) or a checkpoint dir/URI
    log_interval: int = 10
    eval_interval: int = 0
    eval_max_batches: int = 0
    # Fraction of the steps after which the run is checked for not learning (bert_core.pretrain.learning_watch).
    watch_fraction: float = 0.25
    num_buckets: int = 1
    use_avg_len: bool = False
    seed: int = 0
    num_workers: int = 1
    use_gpu: bool = False
    storage: str | None = None
    max_failures: int = 0
    run_name: str | None = None
    tracking: bool = True
    tracking_uri: str | None = None
    overwrite: bool = False
    progress: bool = True

    def validate(self) -> None:
        if (self.model is None) == (self.pretrained is None):
            raise BertPipelineError("give exactly one of --model NAME|CONFIG_JSON (train from scratch) and "
                                    "--pretrained DIR (start from those weights)")
        if (self.num_steps is None) == (self.epochs is None):
            raise BertPipelineError("give exactly one of --num-steps and --epochs")
        for name in ("batch_size", "accumulate", "log_interval", "num_buckets"):
            if getattr(self, name) < 1:
                raise BertPipelineError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("num_steps", "epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BertPipelineError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not 0.0 < self.watch_fraction < 1.0:
            raise BertPipelineError(f"--watch-fraction must be in (0, 1), got {self.watch_fraction}")
        for name in ("ckpt_interval", "eval_interval", "eval_max_batches", "num_workers", "max_failures"):
            if getattr(self, name) < 0 and not (name == "max_failures" and getattr(self, name) == -1):
                raise BertPipelineError(f"--{name.replace('_', '-')} must not be negative")
        from bert_core.train.optim import OPTIMIZERS
        from bert_core.train.precision import DTYPES

        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise BertPipelineError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.dtype not in DTYPES:
            raise BertPipelineError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.lr is not None and not (self.lr > 0 and math.isfinite(self.lr)):
            raise BertPipelineError(f"--lr must be positive, got {self.lr}")
        if self.warmup_ratio is not None and not 0.0 <= self.warmup_ratio <= 1.0:
            raise BertPipelineError(f"--warmup-ratio must be in [0, 1], got {self.warmup_ratio}")

    def runs_on_ray(self) -> bool:
        """Ray for more than one worker, or for one worker when RAY_ADDRESS names a cluster to run on
        (as under `ray job submit`); in-process otherwise."""
        return self.num_workers > 1 or (self.num_workers == 1 and bool(os.environ.get("RAY_ADDRESS")))

    def checkpoint_root(self) -> str:
        return self.ckpt_dir or self.output.rstrip("/") + "-checkpoints"

    def result_config(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in LAUNCH_FIELDS}

    def launch_config(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k in LAUNCH_FIELDS}
