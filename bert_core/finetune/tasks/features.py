"""Fixed-length model inputs from task examples, and the prediction files tasks write.

Shared by fine-tuning, evaluation of exported models (`predict`) and anything else that feeds a
task model, so every path encodes text and writes predictions the same way.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bert_core.finetune.tasks.squad import SquadFeature, SquadPredictions
from bert_core.tasks.glue import Example


def encode_examples(tokenizer, examples: Sequence[Example], max_seq_length: int) -> dict[str, np.ndarray]:
    """input_ids / token_type_ids / attention_mask [N, max_seq_length] (int64, 0-padded), pairs cut
    longest-first."""
    pairs = None if all(e.text_b is None for e in examples) else [e.text_b or "" for e in examples]
    encodings = tokenizer.encode_batch([e.text_a for e in examples], pairs, max_length=max_seq_length,
                                       truncation="longest_first")
    return pad([e.ids for e in encodings], [e.segment_ids for e in encodings], max_seq_length)


def encode_words(tokenizer, texts: Sequence[str], word_starts: Sequence[Sequence[int]], max_seq_length: int):
    """Word-labelled text (NER): (arrays [N, max_seq_length], first_piece [N, max_seq_length], word_token).

    first_piece[row, t] is the index of the word whose first word piece is token t (-1 elsewhere);
    word_token[row][w] is that token for word w, None when the word was cut by `max_seq_length`.
    `word_starts[row]` are the character offsets where the words of texts[row] start."""
    encodings = tokenizer.encode_batch(list(texts), max_length=max_seq_length, truncation="only_first")
    arrays = pad([e.ids for e in encodings], [e.segment_ids for e in encodings], max_seq_length)
    first_piece = np.full((len(texts), len(arrays["input_ids"][0])), -1, dtype=np.int64)
    word_token: list[list[int | None]] = []
    for row, (enc, starts) in enumerate(zip(encodings, word_starts)):
        positions: list[int | None] = [None] * len(starts)
        for t, (offset, seq) in enumerate(zip(enc.offsets, enc.sequence_ids)):
            if seq is None:
                continue
            w = bisect.bisect_right(starts, offset[0]) - 1
            if positions[w] is None:
                positions[w] = t
                first_piece[row, t] = w
        word_token.append(positions)
    return arrays, first_piece, word_token


def pad(ids: Sequence[Sequence[int]], segments: Sequence[Sequence[int]], length: int) -> dict[str, np.ndarray]:
    arrays = {name: np.zeros((len(ids), length), dtype=np.int64)
              for name in ("input_ids", "token_type_ids", "attention_mask")}
    for row, (i, s) in enumerate(zip(ids, segments)):
        arrays["input_ids"][row, :len(i)] = i
        arrays["token_type_ids"][row, :len(s)] = s
        arrays["attention_mask"][row, :len(i)] = 1
    return arrays


def pad_squad_features(features: Sequence[SquadFeature], length: int) -> dict[str, np.ndarray]:
    return pad([f.input_ids for f in features], [f.segment_ids for f in features], length)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_glue_submission(path: str | os.PathLike, predictions: Sequence[str | float]) -> None:
    """GLUE submission TSV: header `index<TAB>prediction`, one row per example in input order."""
    rows = ["index\tprediction"] + [f"{i}\t{p}" for i, p in enumerate(predictions)]
    _atomic_write(Path(path), "\n".join(rows) + "\n")


def write_squad_predictions(out_dir: str | os.PathLike, result: SquadPredictions, version_2: bool) -> list[str]:
    """predictions.json, nbest_predictions.json and, for SQuAD 2.0, null_odds.json (Google's names)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"predictions.json": result.predictions, "nbest_predictions.json": result.nbest}
    if version_2:
        files["null_odds.json"] = result.null_odds
    for name, data in files.items():
        _atomic_write(out / name, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return list(files)
