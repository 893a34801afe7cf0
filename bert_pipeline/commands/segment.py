"""`bert-pipeline segment INPUT... --output DIR`: raw documents -> one sentence per line.

See bert_core.data.segment for the rules (Punkt for English, trained on the input when no pretrained
model is available; punctuation rules for Chinese/Japanese).
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.data.segment import FORMATS, LANGUAGES, LINE_BREAKS, SegmentConfig

    defaults = SegmentConfig()
    parser.description = (
        "Split raw documents into sentences: one sentence per line, a blank line between documents, one "
        "output file per input file (UTF-8), plus manifest.json. The output directory appears all at "
        "once; re-running with the same inputs and flags does nothing."
    )
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT",
        help="files, globs, directories or s3:// URIs/prefixes of plain text (documents separated by blank "
        "lines) or JSONL (one JSON object per line with the document's text); .gz/.bz2 are read as streams",
    )
    parser.add_argument("--output", required=True, metavar="DIR_OR_URI", help="output directory or s3:// prefix")
    parser.add_argument("--language", choices=LANGUAGES, default=defaults.language,
                        help="en: NLTK Punkt; zh: split after 。！？ and closing quotes (also right for "
                        "Japanese) (default: %(default)s)")
    parser.add_argument("--punkt-model", metavar="PATH",
                        help="a punkt_tab language directory (e.g. nltk_data/tokenizers/punkt_tab/english). "
                        "Default: the one under NLTK_DATA if installed, else Punkt is trained on the input")
    parser.add_argument("--punkt-train-chars", type=int, default=defaults.punkt_train_chars, metavar="N",
                        help="when training Punkt on the input, use at most this many characters of it "
                        "(default: %(default)s)")
    parser.add_argument("--format", dest="input_format", choices=FORMATS, default=defaults.input_format,
                        help="input format; auto: JSONL for *.jsonl, *.ndjson, *.json (before .gz/.bz2), "
                        "plain text otherwise (default: %(default)s)")
    parser.add_argument("--text-field", default=defaults.text_field, metavar="NAME",
                        help="JSONL field holding the document text (default: %(default)s)")
    parser.add_argument("--line-breaks", choices=LINE_BREAKS, default=defaults.line_breaks,
                        help="join: a document's lines are wrapped text and a sentence may span them; split: "
                        "every line is a paragraph of its own (default: %(default)s)")
    parser.add_argument("--on-decode-error", choices=("strict", "replace"), default=defaults.on_decode_error,
                        help="strict: binary or non-UTF-8 input is an error naming the file and byte offset; "
                        "replace: invalid bytes become U+FFFD and NUL bytes are dropped, counted in the log "
                        "and the manifest (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the output directory if it holds something else")


def run(args: argparse.Namespace) -> int:
    from bert_core.data.segment import SegmentConfig, segment

    config = SegmentConfig(
        language=args.language, input_format=args.input_format, text_field=args.text_field,
        line_breaks=args.line_breaks, on_decode_error=args.on_decode_error, punkt_model=args.punkt_model,
        punkt_train_chars=args.punkt_train_chars,
    )
    result = segment(args.inputs, args.output, config, overwrite=args.overwrite)
    totals = result.get("totals", {})
    log.info("segment: %s documents, %s sentences -> %s", totals.get("documents"), totals.get("sentences"),
             args.output)
    return 0
