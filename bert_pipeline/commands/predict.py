"""`bert-pipeline predict --export DIR INPUT`: run an exported model on task input, write predictions."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--export", required=True, metavar="DIR", help="directory written by `bert-pipeline export`")
    parser.add_argument("input", metavar="INPUT", help="GLUE-style TSV (classification/regression) or SQuAD JSON (QA)")
    parser.add_argument("--task", help="GLUE/XNLI task name, to read a TSV (e.g. MRPC, SST-2, STS-B, XNLI)")
    parser.add_argument("--output", required=True, metavar="PATH",
                        help="GLUE: the submission TSV to write; SQuAD: the directory for predictions.json, "
                        "nbest_predictions.json (and null_odds.json with --version-2)")
    parser.add_argument("--quantized", action="store_true", help="run the INT8 graph of the export")
    parser.add_argument("--doc-stride", type=int, default=128, help="SQuAD: tokens between windows (default 128)")
    parser.add_argument("--max-query-length", type=int, default=64, help="SQuAD: question tokens kept (default 64)")
    parser.add_argument("--n-best-size", type=int, default=20, help="SQuAD: candidates kept per question")
    parser.add_argument("--max-answer-length", type=int, default=30, help="SQuAD: longest answer in tokens")
    parser.add_argument("--version-2", action="store_true", help="SQuAD 2.0: allow no-answer predictions")
    parser.add_argument("--null-score-diff-threshold", type=float, default=0.0,
                        help="SQuAD 2.0: predict no answer when null score - best span score exceeds this")


def run(args: argparse.Namespace) -> int:
    from bert_core.deploy.export import ExportedModel, SquadOptions, predict_file

    squad = SquadOptions(doc_stride=args.doc_stride, max_query_length=args.max_query_length,
                         n_best_size=args.n_best_size, max_answer_length=args.max_answer_length,
                         version_2=args.version_2, null_score_diff_threshold=args.null_score_diff_threshold)
    examples, written = predict_file(ExportedModel(args.export), args.input, args.output, task=args.task,
                                     quantized=args.quantized, squad=squad)
    print(f"wrote {', '.join(written)} for {examples} examples")
    return 0
