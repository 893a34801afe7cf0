"""`bert-pipeline evaluate {squad,glue,xnli,ner}`: official-equivalent scoring from the command line.

`squad` prints exactly what the official evaluate-v1.1.py / evaluate-v2.0.py prints; `glue` and
`xnli` print the metrics as indented JSON. `--output FILE` also writes that JSON, atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_core.metrics import glue, ner, squad

GLUE_TASK_NAMES = ", ".join(sorted(glue.GLUE_TASKS) + sorted(glue.TASK_ALIASES))


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="also write the printed JSON to FILE (written to a temporary file, then renamed)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)

    p = sub.add_parser(
        "squad",
        help="SQuAD v1.1/v2.0 exact match and F1, printed exactly as the official scripts print them",
        description="Score SQuAD predictions exactly as the official evaluate-v1.1.py / evaluate-v2.0.py "
        "do and print the same JSON. The version comes from the data file's 'version' field (or, "
        "without one, v2.0 when any question has 'is_impossible'), unless --version forces it.",
    )
    p.add_argument(
        "data_json", metavar="DATA_JSON", help="SQuAD data file, e.g. dev-v1.1.json or dev-v2.0.json"
    )
    p.add_argument(
        "pred_json", metavar="PRED_JSON", help="predictions: JSON object {question id: answer text}"
    )
    p.add_argument(
        "--na-prob-file",
        metavar="F",
        help="v2.0 only: JSON object {question id: probability of no answer}; adds best_exact/best_f1 "
        "and their thresholds",
    )
    p.add_argument(
        "--na-prob-thresh",
        metavar="X",
        type=float,
        default=1.0,
        help='v2.0 only: predict "" where the no-answer probability exceeds X (default 1.0)',
    )
    p.add_argument(
        "--version",
        choices=[squad.V1, squad.V2],
        help="score as this SQuAD version instead of the one the data file names",
    )
    unknown = p.add_mutually_exclusive_group()
    unknown.add_argument(
        "--strict",
        action="store_true",
        help="refuse a prediction file holding ids that are not in the data file, naming up to 5 of them "
        "(default: ignore them as the official scripts do, and say on stderr how many were ignored)",
    )
    unknown.add_argument(
        "--allow-unknown-ids",
        action="store_true",
        help="ignore prediction ids that are not in the data file (the default now; kept for old scripts)",
    )
    _add_output(p)

    p = sub.add_parser(
        "glue",
        help="GLUE dev metrics of a submission-format prediction TSV",
        description="Score GLUE predictions (TSV with header 'index<TAB>prediction', one row per gold "
        "example in order) against a dev TSV as download_glue_data.py writes it. Prints the task's "
        "metrics (accuracy, f1, mcc, pearson, spearman; fractions, not percent) as JSON.",
    )
    p.add_argument("task", metavar="TASK", help=f"GLUE task, case-insensitive: {GLUE_TASK_NAMES}")
    p.add_argument("gold_tsv", metavar="GOLD_TSV", help="the task's gold dev TSV, e.g. MRPC/dev.tsv")
    p.add_argument("predictions", metavar="PREDICTIONS", help="GLUE submission TSV: index<TAB>prediction")
    _add_output(p)

    p = sub.add_parser(
        "xnli",
        help="XNLI accuracy of a submission-format prediction TSV",
        description="Score XNLI predictions against the original XNLI TSV (rows of one --language) or a "
        "single-language file in the Baidu/ERNIE layout (text_a, text_b, label).",
    )
    p.add_argument("gold_tsv", metavar="GOLD_TSV", help="XNLI dev/test TSV in either layout")
    p.add_argument("predictions", metavar="PREDICTIONS", help="GLUE submission TSV: index<TAB>prediction")
    p.add_argument(
        "--language",
        default=None,
        help=f"rows of this language in the original multi-language XNLI file (default "
        f"{glue.DEFAULT_XNLI_LANGUAGE}); the Baidu/ERNIE layout has one language and ignores it",
    )
    _add_output(p)

    p = sub.add_parser(
        "ner",
        help="entity-level precision/recall/F1 of CoNLL-format NER predictions (conlleval semantics)",
        description="Score a predicted CoNLL file against the gold one: same tokens in the same order, the "
        "tag in the last column of each line; IOB1, IOB2, IOE and IOBES tags are all understood.",
    )
    p.add_argument("gold_conll", metavar="GOLD_CONLL", help="gold CoNLL-2003 style file (token ... tag)")
    p.add_argument("predictions", metavar="PREDICTIONS", help="CoNLL file with the predicted tag last")
    _add_output(p)


def write_atomic(path: str | Path, text: str) -> None:
    """Write to a temporary file next to `path`, then rename: a killed run leaves no partial file."""
    target = Path(path)
    directory = target.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BertPipelineError(f"--output {path}: cannot create directory {directory}: {exc}") from exc
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run_squad(args: argparse.Namespace) -> str:
    scored = squad.score_squad_file(
        args.data_json,
        args.pred_json,
        na_prob_file=args.na_prob_file,
        na_prob_thresh=args.na_prob_thresh,
        version=args.version,
        strict=args.strict,
    )
    return squad.format_like_official(scored.result, scored.version)


def run(args: argparse.Namespace) -> int:
    if args.benchmark == "squad":
        text = _run_squad(args)
    elif args.benchmark == "glue":
        text = _json(glue.evaluate_glue_files(args.task, args.gold_tsv, args.predictions))
    elif args.benchmark == "ner":
        text = _json(ner.evaluate_ner_files(args.gold_conll, args.predictions))
    else:
        text = _json(
            glue.evaluate_glue_files("xnli", args.gold_tsv, args.predictions, language=args.language)
        )
    sys.stdout.write(text)
    sys.stdout.flush()
    if args.output:
        write_atomic(args.output, text)
    return 0


def _json(metrics: dict[str, float]) -> str:
    return json.dumps(metrics, indent=2) + "\n"
