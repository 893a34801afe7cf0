"""`bert-pipeline build-vocab SEGMENTED... --vocab-size N --output vocab.txt`: a WordPiece vocabulary.

See bert_core.data.vocab_builder (tokenizers' WordPiece trainer, BERT normalisation, Google's layout).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.data.vocab_builder import VocabConfig

    d = VocabConfig()
    parser.description = (
        "Train a WordPiece vocabulary on segmented text with BERT's normalisation, laid out like Google's: "
        "[PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], more [unusedN], then the learned tokens. Written "
        "atomically with its manifest; re-running with the same inputs and flags does nothing. The same inputs and "
        "flags give the same vocab.txt, byte for byte, on any machine and in any process."
    )
    parser.add_argument("inputs", nargs="+", metavar="SEGMENTED",
                        help="text files, globs, directories or s3:// URIs (e.g. the output of `segment`)")
    parser.add_argument("--output", required=True, metavar="FILE_OR_DIR",
                        help="vocab file to write (its manifest goes to FILE.manifest.json), or a directory "
                        "(gets vocab.txt and manifest.json); local or s3://")
    parser.add_argument("--vocab-size", type=int, default=d.vocab_size,
                        help="total tokens, special and unused included (default: %(default)s, BERT-base's)")
    parser.add_argument("--cased", dest="do_lower_case", action="store_false",
                        help="keep case and accents (default: lower-case and strip accents, as uncased BERT)")
    parser.add_argument("--unused", type=int, default=None, metavar="N",
                        help="[unusedN] placeholder tokens (default: 994 as Google's, or vocab-size/30 if fewer)")
    parser.add_argument("--min-frequency", type=int, default=d.min_frequency,
                        help="least frequency of a pair to be merged (default: %(default)s)")
    parser.add_argument("--limit-alphabet", type=int, default=d.limit_alphabet,
                        help="most frequent characters kept in the alphabet (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing vocab made otherwise")


def run(args: argparse.Namespace) -> int:
    from bert_core.data.vocab_builder import VocabConfig, build_vocab

    config = VocabConfig(vocab_size=args.vocab_size, do_lower_case=args.do_lower_case, unused=args.unused,
                         min_frequency=args.min_frequency, limit_alphabet=args.limit_alphabet)
    build_vocab(args.inputs, args.output, config, overwrite=args.overwrite)
    return 0
