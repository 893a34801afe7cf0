"""`bert-pipeline make-shards SEGMENTED... --output DIR --vocab VOCAB`: pretraining shards.

Google's create_pretraining_data.py algorithm (bert_core.data.instances), streamed in bounded
units, in parallel, deterministic for a seed (bert_core.data.make_shards).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.data.instances import ShardConfig

    d = ShardConfig()
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
    parser.add_argument("--max-seq-length", type=int, default=d.max_seq_length,
                        help="tokens per instance, [CLS] and [SEP]s included (default: %(default)s)")
    parser.add_argument("--max-predictions-per-seq", type=int, default=d.max_predictions_per_seq,
                        help="most masked-LM predictions per instance (default: %(default)s)")
    parser.add_argument("--masked-lm-prob", type=float, default=d.masked_lm_prob,
                        help="fraction of an instance's tokens to predict (default: %(default)s)")
    parser.add_argument("--short-seq-prob", type=float, default=d.short_seq_prob,
                        help="probability of a document's instances targeting a random shorter length "
                        "(default: %(default)s)")
    parser.add_argument("--dupe-factor", type=int, default=d.dupe_factor,
                        help="passes over the input, each with fresh masks (default: %(default)s)")
    parser.add_argument("--random-seed", type=int, default=d.random_seed, help="seed (default: %(default)s)")
    parser.add_argument("--whole-word-mask", action="store_true",
                        help="mask all WordPiece pieces of a word together (Google's --do_whole_word_mask)")
    parser.add_argument("--google-random-stream", action="store_true",
                        help="draw every random number exactly as Google's script does (about 2x slower to make "
                        "instances). Default: the same distributions from faster vectorised draws. With it, a "
                        "single-file input that fits in one unit gives exactly Google's instances")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--do-lower-case", dest="do_lower_case", action="store_true", default=d.do_lower_case,
                      help="lower-case and strip accents before WordPiece, for uncased vocabs (default)")
    case.add_argument("--cased", dest="do_lower_case", action="store_false", help="keep case, for cased vocabs")
    parser.add_argument("--instances-per-shard", type=int, default=d.instances_per_shard, metavar="N",
                        help="instances per .npz shard; the last one may hold fewer (default: %(default)s)")
    parser.add_argument("--chunk-documents", type=int, default=d.chunk_documents, metavar="N",
                        help="documents per unit of work; the random next sentence is drawn from the unit "
                        "(default: %(default)s)")
    parser.add_argument("--chunk-chars", type=int, default=d.chunk_chars, metavar="N",
                        help="a unit also closes after this many characters of text (bounds memory with "
                        "long documents) (default: %(default)s)")
    parser.add_argument("--shuffle-buffer", type=int, default=d.shuffle_buffer, metavar="N",
                        help="instances from consecutive units are mixed in a buffer of this many before "
                        "being written (default: %(default)s)")
    parser.add_argument("--holdout-fraction", type=float, default=d.holdout_fraction, metavar="F",
                        help="hold out about this fraction of the documents (chosen by a hash of each document's "
                        "text, so the split is stable across runs and seeds) as evaluation shards: one masking "
                        "pass, random next sentences from held-out documents only; 0: none (default: %(default)s)")
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

    config = ShardConfig(
        max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions_per_seq,
        masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob, dupe_factor=args.dupe_factor,
        random_seed=args.random_seed, whole_word_mask=args.whole_word_mask, do_lower_case=args.do_lower_case,
        google_random_stream=args.google_random_stream,
        chunk_documents=args.chunk_documents, chunk_chars=args.chunk_chars,
        instances_per_shard=args.instances_per_shard, shuffle_buffer=args.shuffle_buffer,
        holdout_fraction=args.holdout_fraction,
    )
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
