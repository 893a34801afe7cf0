"""`bert-pipeline predict --export DIR INPUT`: run an exported model on task input, write predictions."""

from __future__ import annotations

import argparse

from bert_pipeline.commands.config_flags import add_config_arguments, config_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--export", required=True, metavar="DIR", help="directory written by `bert-pipeline export`")
    parser.add_argument("input", metavar="INPUT", help="GLUE-style TSV (classification/regression) or SQuAD JSON (QA)")
    parser.add_argument("--task", help="GLUE/XNLI task name, to read a TSV (e.g. MRPC, SST-2, STS-B, XNLI)")
    parser.add_argument("--output", required=True, metavar="PATH",
                        help="GLUE: the submission TSV to write; SQuAD: the directory for predictions.json, "
                        "nbest_predictions.json (and null_odds.json with --version-2)")
    parser.add_argument("--quantized", action="store_true", help="run the INT8 graph of the export")
    from bert_core.finetune.config import SquadOptions

    add_config_arguments(parser, SquadOptions)


def run(args: argparse.Namespace) -> int:
    from bert_core.deploy.export import ExportedModel, predict_file
    from bert_core.finetune.config import SquadOptions

    squad = config_from_args(SquadOptions, args)
    examples, written = predict_file(ExportedModel(args.export), args.input, args.output, task=args.task,
                                     quantized=args.quantized, squad=squad)
    print(f"wrote {', '.join(written)} for {examples} examples")
    return 0
