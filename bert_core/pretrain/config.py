"""`PretrainConfig`: every `bert-pipeline pretrain` setting, importable without torch (the CLI's --help).

Composed of the pieces fine-tuning shares (bert_core.train.config: optimization, Ray Train, tracking); the
flags, their defaults and help are generated from these fields (bert_pipeline/commands/config_flags.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.options import Form, option, option_like
from bert_core.pretrain import recipe
from bert_core.train.config import (
    OPTIMIZATION,
    RAY,
    TRACKING,
    OptimizerConfig,
    RayTrainConfig,
    TrackingConfig,
    worker_range,
)

DATA = "data"
DEFAULT_BATCH_SIZE = 32
MODEL = "model"
CHECKPOINTS = "checkpoints and logging"

# Settings that change how a run is executed or observed, not what it computes: kept out of the
# manifest's `config`, so re-running with e.g. --resume or another tracking URI is still a no-op.
# The worker count is one of them: the steps do not depend on it (bert_core/pretrain/stream.py).
LAUNCH_FIELDS = ("resume", "tracking", "tracking_uri", "storage", "max_failures", "run_name", "overwrite",
                 "log_interval", "keep_checkpoints", "ckpt_dir", "ckpt_interval", "progress",
                 "watch_fraction", "num_workers", "placement_timeout", "resize_interval",
                 "preemption_check_interval")


@dataclass(kw_only=True)
class PretrainConfig(TrackingConfig, RayTrainConfig, OptimizerConfig):
    """All `bert-pipeline pretrain` settings."""

    GROUPS = (DATA, MODEL, OPTIMIZATION, CHECKPOINTS, TRACKING, RAY)  # the --help sections, in this order

    data: str = option(help="training shards: a directory, a glob (quote it) or an s3:// prefix/glob of "
                       "part-NNNNN.npz files; comma-separated lists allowed", group=DATA, section=Form.DATA,
                       metavar="GLOB_OR_URI")
    data_eval: str | None = option(None, "evaluation shards; the final metrics (manifest.json) are computed on "
                                   "them, or on the first 100 batches of the training data when omitted",
                                   group=DATA, section=Form.DATA, metavar="GLOB_OR_URI")
    num_buckets: int = option(1, "length buckets: batches hold sequences of similar length (1: none)",
                              group=DATA, section=Form.DATA)
    use_avg_len: bool = option(False, "--batch-size counts tokens, not sequences: shorter buckets get more "
                               "sequences per batch", group=DATA, section=Form.DATA)
    seed: int = option(0, "seed of the initial weights, data order and dropout", group=DATA,
                       section=Form.OPTIMIZATION)

    model: str | None = option(None, "architecture to train from scratch: a zoo name (bert_12_768_12, "
                               "bert-base-uncased, any bert_LAYERS_HIDDEN_HEADS; its vocab_size is the shards' vocab's) or a "
                               "config.json file",
                               group=MODEL, section=Form.MODEL, metavar="NAME|CONFIG_JSON", exclusive="model")
    pretrained: str | None = option(None, "start from these weights: a model directory, s3:// URI or zoo name",
                                    group=MODEL, section=Form.MODEL, metavar="DIR", exclusive="model")
    vocab: str | None = option(None, "vocab.txt to put in the output model directory", group=MODEL,
                               section=Form.MODEL,
                               metavar="FILE", default_help="the --pretrained model's, else a vocab.txt next to "
                               "the shards, else the one their make-shards manifest records; a file given "
                               "must be that one, checked before training")
    output: str = option(help="model directory to create (local or s3://); written only when training succeeded",
                         group=MODEL, section=Form.STORAGE, metavar="DIR_OR_URI")
    overwrite: bool = option(False, "replace --output if it holds something else", group=MODEL,
                             section=Form.STORAGE)

    batch_size: int = option(DEFAULT_BATCH_SIZE, "sequences (tokens with --use-avg-len) per micro-batch, all workers together, "
                             "whatever their number: each worker takes its share (1 more on some when it does not "
                             "divide evenly)", group=OPTIMIZATION, section=Form.OPTIMIZATION)
    num_steps: int | None = option(None, "number of optimizer steps", group=OPTIMIZATION,
                                   section=Form.OPTIMIZATION, exclusive="length")
    epochs: int | None = option(None, "number of passes over the training shards", group=OPTIMIZATION,
                                section=Form.OPTIMIZATION,
                                exclusive="length")
    # None: the rule of bert_core/pretrain/recipe.py, from the model's width and the global batch; the help
    # shows its value for the smallest zoo width at the default batch, so --help gives a number.
    lr: float | None = option_like(OptimizerConfig, "lr", None, default_help=(
        f"the rule of bert_core/pretrain/recipe.py: {recipe.LR_RULE}, where global batch = --batch-size x "
        f"--accumulate; e.g. {recipe.lr_example(recipe.BASE_HIDDEN, DEFAULT_BATCH_SIZE)} (bert_2_128_2 at the "
        "default --batch-size); the run logs its value at start; see docs/pretraining.md"))
    warmup_ratio: float | None = option_like(OptimizerConfig, "warmup_ratio", None,
                                             default_help="10% of the steps, at most 10,000 steps")

    ckpt_interval: int = option(1000, "save a checkpoint every N steps; 0 disables", group=CHECKPOINTS,
                                section=Form.STORAGE)
    ckpt_dir: str | None = option(None, "where in-process runs keep checkpoints; Ray runs keep them under --storage",
                                  group=CHECKPOINTS, section=Form.STORAGE, metavar="DIR_OR_URI",
                                  default_help="OUTPUT-checkpoints")
    keep_checkpoints: int = option(3, "number of newest checkpoints kept; 0 keeps all", group=CHECKPOINTS,
                                   section=Form.STORAGE)
    resume: str | None = option(None, "continue an interrupted run: from its latest checkpoint (no value; an error "
                                "if there is none), from checkpoint directory CKPT, or with 'auto' from the latest "
                                "checkpoint if there is one and from scratch otherwise (for retrying orchestrators); "
                                "the losses continue exactly as if uninterrupted", group=CHECKPOINTS,
                                section=Form.STORAGE,
                                metavar="CKPT|auto", const="latest")
    log_interval: int = option(10, "log averaged metrics every N steps", group=CHECKPOINTS, section=Form.STORAGE)
    eval_interval: int = option(0, "evaluate on --data-eval every N steps; 0: only at the end",
                                group=CHECKPOINTS, section=Form.STORAGE)
    eval_max_batches: int = option(0, "cap evaluation at N batches per worker; 0: all of --data-eval",
                                   group=CHECKPOINTS, section=Form.STORAGE)
    # Fraction of the steps after which the run is checked for not learning (bert_core.pretrain.learning_watch).
    watch_fraction: float = option(0.25, "after this fraction of the steps (and twice it, and at the end) check "
                                   "that the run learns: a loss that stopped improving or masked-LM accuracy at "
                                   "chance is a warning, an MLflow tag and a line of the final summary",
                                   group=CHECKPOINTS, section=Form.STORAGE)
    progress: bool = option(True, "no progress bar", group=CHECKPOINTS, section=Form.STORAGE,
                            negate="--no-progress",
                            switch_help="show a progress bar")

    num_workers: int | str = option(
        1, "training workers (one per GPU with --use-gpu), or MIN:MAX for an elastic group that starts once MIN can "
        "be placed, grows to MAX as nodes join and shrinks when nodes leave (the steps are the same for any number "
        "of workers). 0 or 1: in this process (1 runs on Ray when RAY_ADDRESS is set); more: Ray Train on the local "
        "Ray or the cluster at RAY_ADDRESS, given in its GCS form host:6379", group=RAY, section=Form.SCALE)
    resize_interval: float = option(60.0, "with --num-workers MIN:MAX: how often (seconds) a running group checks "
                                    "whether more workers can be placed, and grows if so (restarting from the "
                                    "checkpoint the workers take once a larger group fits: the steps since are "
                                    "redone)", group=RAY,
                                    section=Form.SCALE)
    preemption_check_interval: int = option(
        1, "on Ray: every N steps, ask Ray Train whether a node of the group got a drain notice (a spot or "
        "preemption notice: `ray drain-node`, or the cloud's through the autoscaler); if so, checkpoint at once, "
        "train on while the notice's deadline leaves room, checkpoint again and wait for the group to be restarted "
        "without that node, so no step is lost", group=RAY, section=Form.SCALE)
    max_failures: int = option(0, "restart the workers from the last checkpoint up to K times after a failure; "
                               "-1: always", group=RAY, section=Form.SCALE)
    run_name: str | None = option(None, "Ray run name under --storage", group=RAY, section=Form.STORAGE,
                                  default_help="derived from --output")

    def __post_init__(self) -> None:
        # "4" (a Param typed as a string, a YAML value) means 4; "2:2" is not elastic either.
        low, high = worker_range(self.num_workers)
        if low == high:
            self.num_workers = high

    def validate(self) -> None:
        if (self.model is None) == (self.pretrained is None):
            raise BertPipelineError("give exactly one of --model NAME|CONFIG_JSON (train from scratch) and "
                                    "--pretrained DIR (start from those weights)")
        if (self.num_steps is None) == (self.epochs is None):
            raise BertPipelineError("give exactly one of --num-steps and --epochs")
        for name in ("batch_size", "log_interval", "num_buckets", "preemption_check_interval"):
            if getattr(self, name) < 1:
                raise BertPipelineError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("num_steps", "epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BertPipelineError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not 0.0 < self.watch_fraction < 1.0:
            raise BertPipelineError(f"--watch-fraction must be in (0, 1), got {self.watch_fraction}")
        for name in ("ckpt_interval", "eval_interval", "eval_max_batches", "max_failures"):
            if getattr(self, name) < 0 and not (name == "max_failures" and getattr(self, name) == -1):
                raise BertPipelineError(f"--{name.replace('_', '-')} must not be negative")
        if not self.resize_interval > 0:
            raise BertPipelineError(f"--resize-interval must be positive, got {self.resize_interval}")
        self.check_workers()
        self.check_optimization()

    def checkpoint_root(self) -> str:
        return self.ckpt_dir or self.output.rstrip("/") + "-checkpoints"

    def result_config(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in LAUNCH_FIELDS}

    def launch_config(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k in LAUNCH_FIELDS}
