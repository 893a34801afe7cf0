"""The settings pieces pretraining and fine-tuning share: how to optimize, where the workers run, what is
tracked. PretrainConfig and FinetuneConfig are composed of them, so a setting has one name, one default and
one help text in both steps (and their flags are generated from these fields). Importable without torch."""

from __future__ import annotations

import os
from dataclasses import dataclass

from bert_core.errors import BertPipelineError
from bert_core.options import Form, option

OPTIMIZERS = ("adamw", "bertadam", "lamb")
OPTIMIZER_ALIASES = {"adam": "adamw"}  # fine-tuning's flag said `adam` for AdamW; still accepted
# `auto` is resolved once per run, for its device (bert_core.train.precision.resolve_precision).
COMPUTE_DTYPES = ("float32", "float16", "bfloat16")
DTYPES = ("auto", *COMPUTE_DTYPES)

OPTIMIZATION = "optimization"
RAY = "distributed (Ray Train)"
TRACKING = "tracking"


@dataclass(kw_only=True)
class OptimizerConfig:
    optimizer: str | None = option(
        None, "adamw (torch's AdamW; `adam` is the same), bertadam (Google BERT's Adam: no bias correction; "
        "needs a long warmup) or lamb (layer-wise trust ratio, for large batches)", group=OPTIMIZATION,
        section=Form.OPTIMIZATION,
        choices=OPTIMIZERS + tuple(OPTIMIZER_ALIASES), default_help="adamw")
    lr: float | None = option(None, "peak learning rate", group=OPTIMIZATION, section=Form.OPTIMIZATION)
    warmup_ratio: float | None = option(None, "fraction of the steps with linear warmup; then linear decay to 0",
                                        group=OPTIMIZATION, section=Form.OPTIMIZATION)
    weight_decay: float = option(0.01, "decoupled weight decay; never on biases and LayerNorm",
                                 group=OPTIMIZATION, section=Form.OPTIMIZATION)
    adam_eps: float = option(1e-6, "optimizer epsilon", group=OPTIMIZATION, section=Form.OPTIMIZATION,
                             aliases=("--epsilon",))
    max_grad_norm: float = option(1.0, "clip gradients to this global norm; 0 disables", group=OPTIMIZATION,
                                  section=Form.OPTIMIZATION)
    accumulate: int = option(1, "micro-batches per optimizer step (gradient accumulation)",
                             group=OPTIMIZATION, section=Form.OPTIMIZATION)
    dtype: str = option(
        "auto", "compute precision (autocast). auto: bfloat16 where the device computes it natively (a CUDA GPU of "
        "compute capability 8.0 or more; a CPU with AVX512-BF16 or AMX-BF16), float16 with dynamic loss scaling on "
        "older CUDA GPUs (7.x), float32 otherwise; the run's log, manifest and MLflow params say which was chosen "
        "and why. Weights, optimizer state, losses, softmax and LayerNorm statistics stay float32, and scored "
        "evaluations run in float32, the precision the model is saved and served in",
        group=OPTIMIZATION, section=Form.SCALE, choices=DTYPES)

    def optimizer_name(self) -> str | None:
        """The optimizer's canonical name (`adam` -> `adamw`); None: the step's default."""
        return OPTIMIZER_ALIASES.get(self.optimizer, self.optimizer) if self.optimizer else None

    def check_optimization(self) -> None:
        if self.optimizer is not None and self.optimizer_name() not in OPTIMIZERS:
            raise BertPipelineError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.dtype not in DTYPES:
            raise BertPipelineError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.lr is not None and not (self.lr > 0 and self.lr < float("inf")):
            raise BertPipelineError(f"--lr must be positive, got {self.lr}")
        if self.warmup_ratio is not None and not 0.0 <= self.warmup_ratio <= 1.0:
            raise BertPipelineError(f"--warmup-ratio must be in [0, 1], got {self.warmup_ratio}")
        if self.accumulate < 1:
            raise BertPipelineError(f"--accumulate must be at least 1, got {self.accumulate}")
        if self.adam_eps <= 0:
            raise BertPipelineError(f"--adam-eps must be positive, got {self.adam_eps}")
        if self.weight_decay < 0 or self.max_grad_norm < 0:
            raise BertPipelineError("--weight-decay and --max-grad-norm must not be negative")


def worker_range(value: int | str) -> tuple[int, int]:
    """--num-workers as (MIN, MAX): N is (N, N); "MIN:MAX" an elastic group (bad input: an error naming the flag)."""
    text = str(value).strip()
    lo, sep, hi = text.partition(":")
    try:
        if isinstance(value, bool):
            raise ValueError
        low, high = (int(lo), int(hi)) if sep else (int(text), int(text))
    except ValueError:
        raise BertPipelineError(f"--num-workers: expected a number N or a range MIN:MAX (e.g. 1:4), got {value!r}") \
            from None
    if low < 0:
        raise BertPipelineError(f"--num-workers must not be negative, got {value!r}")
    if sep and not 1 <= low <= high:
        raise BertPipelineError(f"--num-workers MIN:MAX needs 1 <= MIN <= MAX, got {value!r}")
    return low, high


@dataclass(kw_only=True)
class RayTrainConfig:
    num_workers: int = option(
        1, "training workers (one per GPU with --use-gpu); each update's --batch-size is split across them. 0 or 1: "
        "in this process (1 runs on Ray when RAY_ADDRESS is set); more: Ray Train on the local Ray or the cluster "
        "at RAY_ADDRESS, given in its GCS form host:6379", group=RAY, section=Form.SCALE)
    use_gpu: bool = option(False, "train on GPUs (NCCL between workers)", group=RAY, section=Form.SCALE)
    storage: str | None = option(None, "Ray Train storage for the run's state (pretraining: its checkpoints), "
                                 "shared by all nodes: local/NFS path or s3://", group=RAY,
                                 section=Form.STORAGE, metavar="URI",
                                 default_help="ray_results beside an s3:// --output, else "
                                              "$BERT_PIPELINE_HOME/ray_results")

    placement_timeout: float = option(
        300.0, "seconds Ray Train may wait for its workers (with --num-workers MIN:MAX: for MIN of them) to be "
        "placed, at the start or after losing nodes; then the run fails naming what is missing", group=RAY,
        section=Form.SCALE)

    def workers(self) -> tuple[int, int]:
        """(MIN, MAX) workers: equal for a fixed number; pretraining also takes an elastic MIN:MAX."""
        return worker_range(self.num_workers)

    def runs_on_ray(self) -> bool:
        """Ray for more than one worker (or an elastic range), or for one worker when RAY_ADDRESS names a cluster
        to run on (as under `ray job submit`); in-process otherwise."""
        low, high = self.workers()
        return high > 1 or low != high or (high == 1 and bool(os.environ.get("RAY_ADDRESS")))

    def check_workers(self) -> None:
        self.workers()
        if not self.placement_timeout > 0:
            raise BertPipelineError(f"--placement-timeout must be positive, got {self.placement_timeout}")


@dataclass(kw_only=True)
class TrackingConfig:
    tracking: bool = option(True, "do not log to MLflow", group=TRACKING, section=Form.STORAGE,
                            negate="--no-tracking",
                            switch_help="log the run to MLflow")
    tracking_uri: str | None = option(None, "MLflow tracking URI", group=TRACKING, section=Form.STORAGE,
                                      metavar="URI",
                                      default_help="$MLFLOW_TRACKING_URI, else (from the bert-pipeline CLI) the MLflow server of "
                                                   "a stack up on $BERT_PIPELINE_HOME, else "
                                                   "sqlite:///$BERT_PIPELINE_HOME/mlflow.db")
