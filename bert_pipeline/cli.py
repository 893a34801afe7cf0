"""`bert-pipeline` command line.

Each command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are imported only when their command runs, so ``bert-pipeline --help`` stays instant and a
command never pays for another's heavy imports (torch, ray, airflow).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import logging
import signal
import sys

from bert_core.errors import BertPipelineError
from bert_core.io.tracking import quiet_artifact_transfers

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "segment": ("bert_pipeline.commands.segment", "split raw documents into sentences, one per line"),
    "build-vocab": ("bert_pipeline.commands.build_vocab", "train a WordPiece vocab.txt (BERT layout) on segmented text"),
    "make-shards": ("bert_pipeline.commands.make_shards", "make masked-LM/next-sentence pretraining shards (.npz)"),
    "validate-shards": ("bert_pipeline.commands.validate_shards", "validate pretraining shards with great-expectations"),
    "pretrain": ("bert_pipeline.commands.pretrain", "masked-LM + next-sentence pretraining from shards (Ray Train)"),
    "finetune": ("bert_pipeline.commands.finetune", "fine-tune on a GLUE/XNLI/SQuAD/NER task; dev scored every epoch"),
    "evaluate": (
        "bert_pipeline.commands.evaluate",
        "score predictions exactly as the official SQuAD v1.1/v2.0 and GLUE/XNLI evaluators do",
    ),
    "embed": ("bert_pipeline.commands.embed", "token and sentence vectors from a BERT model (BertEmbedding)"),
    "export": ("bert_pipeline.commands.export", "export a task model to static-shape ONNX or torch.export (.pt2)"),
    "predict": ("bert_pipeline.commands.predict", "answer raw-text requests with a model (dir or models:/ URI), or run an export on task files"),
    "convert-tf-checkpoint": (
        "bert_pipeline.commands.convert_tf_checkpoint",
        "convert a Google TensorFlow BERT checkpoint to a model directory (config.json + model.safetensors)",
    ),
    "demo": ("bert_pipeline.commands.demo", "run the bert_demo DAG (raw text to a promoted model) on bundled tiny data"),
    "run": (
        "bert_pipeline.commands.run",
        "run one of the DAGs (bert_pretraining, bert_finetune, ...) once, in this process, with a live task view",
    ),
    "promote": (
        "bert_pipeline.commands.promote",
        "put a registered model version through the promotion gates, promote it by hand, or reject it",
    ),
    "report": ("bert_pipeline.commands.report", "build a DAG run's report.html: curves, registry decisions, timeline"),
    "stack": (
        "bert_pipeline.commands.stack",
        "start, stop or check the local MLflow server, Ray head and Airflow (up | down | status)",
    ),
    "zoo": (
        "bert_pipeline.commands.zoo",
        "list the model zoo names and where each model's files are expected",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bert-pipeline",
        description="BERT from raw text to a promoted, evaluated model. Run `bert-pipeline COMMAND --help` "
        "for the flags of a command.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def install_stack_dump() -> None:
    """`kill -USR1 PID` makes a running command write every thread's Python stack to its stderr (during a DAG run
    that is the run's log), and carry on: what a run that seems stuck is doing, without stopping it. Installed by
    the console script (`run`), not by `main`, which tests and other programs call in their own processes."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = build_parser()
    # Parse only the global part first; the command's own parser handles the rest.
    global_args, rest = top.parse_known_args(argv)
    if global_args.command is None:
        top.print_help()
        return 0 if not argv else 2
    module_name, help_text = COMMANDS[global_args.command]
    logging.basicConfig(
        level=logging.DEBUG if global_args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"bert-pipeline {global_args.command}", description=help_text)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        with quiet_artifact_transfers():  # a command reports its own progress; MLflow's bars were noise in it
            return int(module.run(args) or 0)
    except (BertPipelineError, FileNotFoundError) as exc:
        if global_args.verbose:
            logging.exception("details")
        print(f"bert-pipeline {global_args.command}: error: {exc}", file=sys.stderr)
        return 2


def run() -> None:
    """The `bert-pipeline` console script: `main`, then an orderly exit that skips the interpreter's teardown
    (see bert_pipeline/process_exit.py for why)."""
    from bert_pipeline.process_exit import run_and_exit

    install_stack_dump()
    run_and_exit(main)


if __name__ == "__main__":
    run()
