"""`bert-pipeline predict --export DIR INPUT`: run an exported model on task input, write predictions."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from bert_core.errors import BertPipelineError

log = logging.getLogger(__name__)


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
    from bert_core.export import ExportedModel
    from bert_core.tasks import features as feats
    from bert_core.tokenization import BertTokenizer

    model = ExportedModel(args.export)
    meta = model.meta
    vocab = Path(args.export) / "vocab.txt"
    if not vocab.is_file():
        raise BertPipelineError(f"{args.export}: the export has no vocab.txt (exported without a model?)")
    tokenizer = BertTokenizer(vocab, do_lower_case=meta.get("do_lower_case") is not False)
    seq = meta["seq_length"]
    if meta["task"] == "question_answering":
        from bert_core.tasks.squad import make_features, postprocess, read_squad

        _, examples = read_squad(args.input)
        features = make_features(examples, tokenizer, seq, args.doc_stride, args.max_query_length)
        arrays = feats.pad_squad_features(features, seq)
        start, end = model.run(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                               quantized=args.quantized)
        result = postprocess(examples, features, start.tolist(), end.tolist(), args.n_best_size,
                             args.max_answer_length, args.version_2, args.null_score_diff_threshold)
        written = feats.write_squad_predictions(args.output, result, args.version_2)
        print(f"wrote {', '.join(written)} for {len(examples)} questions to {args.output}")
        return 0
    if not args.task:
        raise BertPipelineError("--task is needed to read a GLUE-style TSV (e.g. --task MRPC)")
    from bert_core.tasks.glue import read_examples

    examples = read_examples(args.task, args.input)
    arrays = feats.encode_examples(tokenizer, examples, seq)
    (logits,) = model.run(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                          quantized=args.quantized)
    if meta["task"] == "regression":
        predictions = [float(v) for v in logits[:, 0]]
    else:
        labels = meta["labels"]
        predictions = [labels[i] for i in np.argmax(logits, axis=-1)]
    feats.write_glue_submission(args.output, predictions)
    print(f"wrote {len(predictions)} predictions to {args.output}")
    return 0
