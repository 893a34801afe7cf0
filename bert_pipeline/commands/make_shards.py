"""`bert-pipeline make-shards SEGMENTED... --output DIR --vocab VOCAB`: pretraining shards.

Google's create_pretraining_data.py algorithm (bert_core.data.instances), streamed in bounded
units, in parallel, deterministic for a seed (bert_core.data.make_shards).
"""

from __future__ import annotations

import argparse

from bert_pipeline.commands.config_flags import add_config_arguments, config_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.data.instances import ShardConfig

    parser.description = (
        "Make BERT pretraining instances (masked LM + next sentence) exactly as Google's "
        "create_pretraining_data.py does, written as part-NNNNN.npz shards plus manifest.json. Memory stays "
        "bounded (input is processed in units of documents; the random next sentence comes from the same "
        "unit), and the same seed and input give byte-identical shards whatever --workers. Re-running with "
        "the same inputs and flags does nothing."
    )
    parser.add_argument("inputs", nargs="+", metavar="SEGMENTED",
                        help="segmented text (one sentence per line, blank line between documents): files, "
                        "globs, directories (e.g. the output of `segment`) or s3:// URIs; .gz/.bz2 are streamed")
    parser.add_argument("--output", required=True, metavar="DIR_OR_URI", help="output directory or s3:// prefix")
    parser.add_argument("--vocab", required=True, metavar="VOCAB", help="WordPiece vocab.txt (local or s3://)")
    add_config_arguments(parser, ShardConfig)
    parser.add_argument("--holdout-output", metavar="DIR_OR_URI",
                        help="where the held-out shards go (default: OUTPUT-heldout); give it to `pretrain "
                        "--data-eval`")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="processes making instances in parallel; with RAY_ADDRESS set, units run as Ray "
                        "tasks on the cluster instead. Does not change the output (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (it only shows on a terminal)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an output directory holding shards made with another configuration")


def run(args: argparse.Namespace) -> int:
    from bert_core.data.instances import ShardConfig
    from bert_core.launch.ray_shards import make_shards

    config = config_from_args(ShardConfig, args)
    options = dict(workers=args.workers, overwrite=args.overwrite, progress=False if args.no_progress else None)
    if config.holdout_fraction > 0:
        from bert_core.launch.ray_shards import make_split_shards

        make_split_shards(args.inputs, args.output, args.vocab, config, args.holdout_output, **options)
    elif args.holdout_output:
        from bert_core.errors import BertPipelineError

        raise BertPipelineError("--holdout-output needs --holdout-fraction above 0")
    else:
        make_shards(args.inputs, args.output, args.vocab, config, **options)
    return 0
