"""`bert-pipeline embed`: token and sentence vectors for sentences given inline or in a file."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from bert_core.errors import BertPipelineError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sentences", nargs="+", metavar="TEXT", help="sentences to embed")
    source.add_argument("--file", metavar="F", help="UTF-8 text file, one sentence per line (blank lines kept)")
    parser.add_argument("--model", required=True, metavar="NAME_OR_DIR",
                        help="model directory, s3:// URI or zoo name (needs vocab.txt)")
    parser.add_argument("--output", metavar="F", help="write .jsonl (tokens, token vectors, sentence vector per "
                        "line) or .npy (sentence vectors, [N, hidden]); default: a readable summary on stdout")
    parser.add_argument("--layer", type=int, nargs="+", default=[-1],
                        help="encoder layer(s) to read; several are averaged (default: -1, the last)")
    parser.add_argument("--pooling", choices=["cls", "mean"], default="cls",
                        help="sentence vector: the [CLS] vector, or the mean of the token vectors (default cls)")
    parser.add_argument("--max-seq-length", type=int, default=128,
                        help="window length; longer sentences are split with overlap and stitched (default 128)")
    parser.add_argument("--stride", type=int, default=None,
                        help="tokens between window starts for long sentences (default: half a window)")
    parser.add_argument("--batch-size", type=int, default=32, help="windows per forward pass (default 32)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise BertPipelineError(f"--file {path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise BertPipelineError(f"--file {path}: not UTF-8 ({exc})") from None


def run(args: argparse.Namespace) -> int:
    from bert_core.deploy.embedding import BertEmbedding

    sentences = args.sentences if args.sentences is not None else _read_lines(args.file)
    embedder = BertEmbedding(args.model, max_seq_length=args.max_seq_length, stride=args.stride,
                             batch_size=args.batch_size, layer=args.layer, pooling=args.pooling, device=args.device)
    results = embedder(sentences)
    if args.output is None:
        for r in results:
            head = " ".join(f"{v:+.4f}" for v in r.sentence_vector[:6])
            print(f"{len(r.tokens):4d} tokens  [{head} ...] ({r.sentence_vector.shape[0]} dims)  {r.sentence[:60]!r}")
        return 0
    out = Path(args.output)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if out.suffix == ".npy":
        with open(tmp, "wb") as f:
            np.save(f, np.stack([r.sentence_vector for r in results]))
    elif out.suffix == ".jsonl":
        with open(tmp, "w", encoding="utf-8") as f:
            for r in results:
                f.write(json.dumps({"sentence": r.sentence, "tokens": r.tokens,
                                    "token_vectors": r.token_vectors.tolist(),
                                    "sentence_vector": r.sentence_vector.tolist()}, ensure_ascii=False) + "\n")
    else:
        raise BertPipelineError(f"--output {out}: expected a .jsonl or .npy file name")
    os.replace(tmp, out)
    print(f"wrote {len(results)} embeddings to {out}")
    return 0
