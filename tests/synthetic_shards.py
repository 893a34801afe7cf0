"""Tiny pretraining shards in the ARCHITECTURE §5 format, written with np.savez, from a learnable language.

Each segment is an arithmetic progression over the non-special ids (next = previous + d, d in 1..3),
so a masked token follows from its neighbours. Sentence B continues A's progression (label 0) or
is a fresh progression starting elsewhere (label 1), so NSP is learnable from the A/B boundary.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
NUM_SPECIAL = 5


def _progression(start: int, step: int, count: int, span: int) -> list[int]:
    return [NUM_SPECIAL + (start + j * step) % span for j in range(count)]


def make_arrays(n: int, max_seq_length: int = 32, max_pred: int = 5, vocab_size: int = 40, seed: int = 0,
                min_len: int = 8, random_next_prob: float = 0.5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    span = vocab_size - NUM_SPECIAL
    out = {
        "input_ids": np.zeros((n, max_seq_length), np.int32),
        "segment_ids": np.zeros((n, max_seq_length), np.int8),
        "valid_lengths": np.zeros(n, np.int32),
        "masked_lm_positions": np.zeros((n, max_pred), np.int32),
        "masked_lm_ids": np.zeros((n, max_pred), np.int32),
        "masked_lm_weights": np.zeros((n, max_pred), np.float32),
        "next_sentence_labels": np.zeros(n, np.int8),
    }
    for i in range(n):
        total = int(rng.integers(min_len, max_seq_length + 1))
        body = total - 3
        len_a = int(rng.integers(2, body - 1))
        len_b = body - len_a
        start, step = int(rng.integers(span)), int(rng.integers(1, 4))
        a = _progression(start, step, len_a, span)
        is_random = bool(rng.random() < random_next_prob)
        if is_random:
            start_b = (start + len_a * step + int(rng.integers(4, span - 4))) % span
            b = _progression(start_b, int(rng.integers(1, 4)), len_b, span)
        else:
            b = _progression(start + len_a * step, step, len_b, span)
        tokens = [CLS, *a, SEP, *b, SEP]
        segments = [0] * (len_a + 2) + [1] * (len_b + 1)
        candidates = [j for j, t in enumerate(tokens) if t not in (CLS, SEP)]
        num_pred = min(max_pred, max(1, round(0.15 * len(candidates))))
        positions = sorted(rng.choice(candidates, size=num_pred, replace=False).tolist())
        ids = [tokens[j] for j in positions]
        for j in positions:
            tokens[j] = MASK
        out["input_ids"][i, :total] = tokens
        out["segment_ids"][i, :total] = segments
        out["valid_lengths"][i] = total
        out["masked_lm_positions"][i, :num_pred] = positions
        out["masked_lm_ids"][i, :num_pred] = ids
        out["masked_lm_weights"][i, :num_pred] = 1.0
        out["next_sentence_labels"][i] = int(is_random)
    return out


def write_shards(directory: Path, num_shards: int = 2, per_shard: int = 32, seed: int = 0,
                 manifest: bool = True, vocab_size: int = 40, manifest_vocab_size: int | None = None,
                 **kwargs) -> Path:
    """`num_shards` part-NNNNN.npz files (+ a manifest.json recording the vocab size) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    counts = []
    for k in range(num_shards):
        arrays = make_arrays(per_shard, vocab_size=vocab_size, seed=seed * 1000 + k, **kwargs)
        np.savez(directory / f"part-{k:05d}.npz", **arrays)
        counts.append(per_shard)
    if manifest:
        data = {"step": "make-shards", "config": {"vocab_size": manifest_vocab_size or vocab_size},
                "inputs": [], "outputs": [], "instances": counts}
        (directory / "manifest.json").write_text(json.dumps(data))
    return directory


def tiny_model_config(path: Path, vocab_size: int = 40, hidden: int = 32, layers: int = 2, heads: int = 2,
                      dropout: float = 0.0, max_positions: int = 64) -> Path:
    """A CONFIG_JSON for --model: a very small BERT, dropout off unless asked."""
    path.write_text(json.dumps({
        "vocab_size": vocab_size, "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "intermediate_size": 4 * hidden, "max_position_embeddings": max_positions,
        "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout,
    }))
    return path
