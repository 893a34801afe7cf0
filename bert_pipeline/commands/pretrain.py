"""`bert-pipeline pretrain --data GLOB --model NAME|CONFIG_JSON --output DIR [...]`.

Masked-LM + next-sentence pretraining from `make-shards` shards to a model directory (config.json,
model.safetensors, vocab.txt, manifest.json with the final loss / masked-LM accuracy / NSP accuracy).
One worker runs in this process; --num-workers N > 1 (or RAY_ADDRESS with one worker) runs on Ray Train.
Flag names follow the GluonNLP/Google BERT scripts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from bert_pipeline.commands.ray_flags import add_ray_train_arguments

log = logging.getLogger(__name__)


def _default(name: str):
    # Imported lazily: --help must not pay for torch.
    from bert_core.pretrain.config import PretrainConfig

    return next(f.default for f in dataclasses.fields(PretrainConfig) if f.name == name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = _default
    data = parser.add_argument_group("data")
    data.add_argument("--data", required=True, metavar="GLOB_OR_URI",
                      help="training shards: a directory, a glob (quote it) or an s3:// prefix/glob of part-NNNNN.npz "
                           "files; comma-separated lists allowed")
    data.add_argument("--data-eval", metavar="GLOB_OR_URI",
                      help="evaluation shards; the final metrics (manifest.json) are computed on them, or on the "
                           "first 100 batches of the training data when omitted")
    data.add_argument("--num-buckets", type=int, default=d("num_buckets"),
                      help="length buckets: batches hold sequences of similar length (default: %(default)s = none)")
    data.add_argument("--use-avg-len", action="store_true",
                      help="--batch-size counts tokens, not sequences: shorter buckets get more sequences per batch")
    data.add_argument("--seed", type=int, default=d("seed"),
                      help="seed of the initial weights, data order and dropout (default: %(default)s)")

    model = parser.add_argument_group("model")
    which = model.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="NAME|CONFIG_JSON",
                       help="architecture to train from scratch: a zoo name (bert_12_768_12, bert-base-uncased, any "
                            "bert_LAYERS_HIDDEN_HEADS) or a config.json file")
    which.add_argument("--pretrained", metavar="DIR",
                       help="start from these weights: a model directory, s3:// URI or zoo name")
    model.add_argument("--vocab", metavar="FILE",
                       help="vocab.txt to put in the output model directory (default: the --pretrained model's, "
                            "else a vocab.txt next to the shards)")
    model.add_argument("--output", required=True, metavar="DIR_OR_URI",
                       help="model directory to create (local or s3://); written only when training succeeded")
    model.add_argument("--overwrite", action="store_true", help="replace --output if it holds something else")

    opt = parser.add_argument_group("optimization")
    opt.add_argument("--batch-size", type=int, default=d("batch_size"),
                     help="sequences (tokens with --use-avg-len) per worker per micro-batch (default: %(default)s)")
    opt.add_argument("--accumulate", type=int, default=d("accumulate"),
                     help="micro-batches per optimizer step (gradient accumulation; default: %(default)s)")
    steps = opt.add_mutually_exclusive_group(required=True)
    steps.add_argument("--num-steps", type=int, help="number of optimizer steps")
    steps.add_argument("--epochs", type=int, help="number of passes over the training shards")
    opt.add_argument("--optimizer", choices=("adamw", "bertadam", "lamb"), default=d("optimizer"),
                     help="adamw (torch), bertadam (Google BERT's Adam: no bias correction; needs a long warmup) "
                          "or lamb (layer-wise trust ratio, for large batches) (default: adamw)")
    opt.add_argument("--lr", type=float, default=d("lr"),
                     help="peak learning rate (default: by model width and global batch, "
                          "1e-3 x (128 / hidden) x sqrt(global batch / 64), within [2e-5, 3e-3]; "
                          "see docs/pretraining.md)")
    opt.add_argument("--warmup-ratio", type=float, default=d("warmup_ratio"),
                     help="fraction of the steps with linear warmup; then linear decay to 0 (default: 10%% of the "
                          "steps, at most 10,000 steps)")
    opt.add_argument("--weight-decay", type=float, default=d("weight_decay"),
                     help="decoupled weight decay; never on biases and LayerNorm (default: %(default)s)")
    opt.add_argument("--adam-eps", type=float, default=d("adam_eps"), help="optimizer epsilon (default: %(default)s)")
    opt.add_argument("--max-grad-norm", type=float, default=d("max_grad_norm"),
                     help="clip gradients to this global norm; 0 disables (default: %(default)s)")
    opt.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default=d("dtype"),
                     help="compute precision: float16 uses dynamic loss scaling; weights stay float32 "
                          "(default: %(default)s)")

    ckpt = parser.add_argument_group("checkpoints and logging")
    ckpt.add_argument("--ckpt-interval", type=int, default=d("ckpt_interval"),
                      help="save a checkpoint every N steps; 0 disables (default: %(default)s)")
    ckpt.add_argument("--ckpt-dir", metavar="DIR_OR_URI",
                      help="where in-process runs keep checkpoints (default: OUTPUT-checkpoints); Ray runs keep "
                           "them under --storage")
    ckpt.add_argument("--keep-checkpoints", type=int, default=d("keep_checkpoints"),
                      help="number of newest checkpoints kept; 0 keeps all (default: %(default)s)")
    ckpt.add_argument("--resume", nargs="?", const="latest", metavar="CKPT|auto",
                      help="continue an interrupted run: from its latest checkpoint (no value; an error if there is "
                           "none), from checkpoint directory CKPT, or with 'auto' from the latest checkpoint if "
                           "there is one and from scratch otherwise (for retrying orchestrators); the losses "
                           "continue exactly as if uninterrupted")
    ckpt.add_argument("--log-interval", type=int, default=d("log_interval"),
                      help="log averaged metrics every N steps (default: %(default)s)")
    ckpt.add_argument("--eval-interval", type=int, default=d("eval_interval"),
                      help="evaluate on --data-eval every N steps; 0: only at the end (default: %(default)s)")
    ckpt.add_argument("--eval-max-batches", type=int, default=d("eval_max_batches"),
                      help="cap evaluation at N batches per worker; 0: all of --data-eval (default: %(default)s)")
    ckpt.add_argument("--watch-fraction", type=float, default=d("watch_fraction"),
                      help="after this fraction of the steps (and twice it, and at the end) check that the run "
                           "learns: a loss that stopped improving or masked-LM accuracy at chance is a warning, "
                           "an MLflow tag and a line of the final summary (default: %(default)s)")
    ckpt.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")

    track = parser.add_argument_group("tracking")
    track.add_argument("--no-tracking", dest="tracking", action="store_false",
                       help="do not log to MLflow (experiment bert-pretrain)")
    track.add_argument("--tracking-uri", metavar="URI",
                       help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                            "sqlite:///$BERT_PIPELINE_HOME/mlflow.db)")

    scale = add_ray_train_arguments(parser, d("num_workers"), storage_holds="checkpoints")
    scale.add_argument("--max-failures", type=int, default=d("max_failures"),
                       help="restart the workers from the last checkpoint up to K times after a failure; -1: "
                            "always (default: %(default)s)")
    scale.add_argument("--run-name", help="Ray run name under --storage (default: derived from --output)")


def run(args: argparse.Namespace) -> int:
    from bert_core.launch.run import run_step
    from bert_core.pretrain.step import PRETRAIN, PretrainConfig

    fields = {f.name for f in dataclasses.fields(PretrainConfig)}
    config = PretrainConfig(**{k: v for k, v in vars(args).items() if k in fields})
    result = run_step(PRETRAIN, config)
    check = result.get("learning_check") or {}
    print(json.dumps({"output": config.output, **result.get("metrics", {}),
                      "learning_check": check.get("status")}), file=sys.stdout)
    if check.get("status") in ("not_learning", "warned"):
        head = "this run did not learn" if check["status"] == "not_learning" else "learning check"
        for problem in check.get("problems", []):
            print(f"warning: {head}: {problem}", file=sys.stderr)
    return 0
