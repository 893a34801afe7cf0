"""`bert-pipeline validate-shards SHARDS_DIR`: a great-expectations suite over make-shards output.

Exit code 0 when every expectation is met, 1 when one fails (each failure printed with the
expectation, the check and the shard), 2 for unusable input. See bert_core.data.validate_shards.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.data.validate_shards import ValidationConfig

    d = ValidationConfig()
    parser.description = (
        "Validate pretraining shards and their manifest with great-expectations: schema and dtypes, ids "
        "inside the vocabulary, [CLS]/[SEP] placement, segment ids, masked positions (inside the valid "
        "length, unique, never [CLS]/[SEP]), prediction counts, masked fraction, 80/10/10 split and "
        "random-next fraction against the configuration, shard sha256 and counts against manifest.json. "
        "Writes validation.json; exits 1 naming each failed expectation and the shard it failed in."
    )
    parser.add_argument("shards_dir", metavar="SHARDS_DIR", help="output directory (or s3:// prefix) of make-shards")
    parser.add_argument("--output", metavar="FILE_OR_URI",
                        help="where to write validation.json (default: SHARDS_DIR/validation.json)")
    parser.add_argument("--vocab", metavar="VOCAB",
                        help="vocab.txt to check ids against; must be the one the shards were made with (default: "
                        "the vocab size and special ids recorded in manifest.json)")
    parser.add_argument("--masked-fraction-tolerance", type=float, default=d.masked_fraction_tolerance,
                        help="allowed absolute deviation of the predicted-token fraction from the configuration "
                        "(default: %(default)s)")
    parser.add_argument("--mask-split-tolerance", type=float, default=d.mask_split_tolerance,
                        help="allowed absolute deviation from 80%% [MASK] / 10%% unchanged (default: %(default)s)")
    parser.add_argument("--random-next-tolerance", type=float, default=d.random_next_tolerance,
                        help="how far below one half the random-next fraction may be (default: %(default)s)")
    parser.add_argument("--max-random-next", type=float, default=d.max_random_next,
                        help="highest random-next fraction accepted: Google's algorithm exceeds one half for "
                        "short documents (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from bert_core.data.validate_shards import ValidationConfig, validate_shards

    config = ValidationConfig(
        masked_fraction_tolerance=args.masked_fraction_tolerance, mask_split_tolerance=args.mask_split_tolerance,
        random_next_tolerance=args.random_next_tolerance, max_random_next=args.max_random_next,
    )
    result = validate_shards(args.shards_dir, output=args.output, vocab_file=args.vocab, config=config)
    if result["success"]:
        return 0
    failed = result["failed"]
    print(f"bert-pipeline validate-shards: {len(failed)} expectation(s) failed: {failed[0]['message']}",
          file=sys.stderr)
    for check in failed[1:]:
        print(f"  {check['message']}", file=sys.stderr)
    return 1
