"""A task model's answer for one input, as a JSON-able record: what serving returns and what the checks
written at evaluation time expect. One builder per task kind, used by both, so they cannot drift apart.

- classification: {"label": str, "probabilities": {label: p}}
- regression (STS-B): {"score": float}
- SQuAD: {"answer": str, "start": int, "end": int, "score": float}: the answer's character span in the
  context (`context[start:end] == answer`) and its probability among the n-best candidates; SQuAD 2.0's
  "no answer" is answer "" with start = end = -1.
- NER: {"entities": [{"type", "text", "start", "end"}]}: character spans in the input text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_WORD = re.compile(r"\S+")
NO_ANSWER_OFFSET = -1


def classification(logits: np.ndarray, labels: Sequence[str]) -> dict[str, Any]:
    z = np.asarray(logits, dtype=np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    return {"label": labels[int(np.argmax(z))], "probabilities": {label: float(v) for label, v in zip(labels, p)}}


def regression(logits: np.ndarray) -> dict[str, Any]:
    return {"score": float(np.asarray(logits).reshape(-1)[0])}


def squad_answer(qas_id: str, result) -> dict[str, Any]:
    """The answer to question `qas_id` in a SquadPredictions `result` (bert_core.finetune.tasks.squad)."""
    text = result.predictions[qas_id]
    nbest = result.nbest[qas_id]
    score = next((c["probability"] for c in nbest if c["text"] == text), 0.0)
    start, end = result.spans.get(qas_id, (NO_ANSWER_OFFSET, NO_ANSWER_OFFSET)) if text else (
        NO_ANSWER_OFFSET, NO_ANSWER_OFFSET)
    return {"answer": text, "start": int(start), "end": int(end), "score": float(score)}


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the whitespace-separated words of `text` (the words NER labels)."""
    return [(m.start(), m.end()) for m in _WORD.finditer(text)]


def entities(text: str, spans: Sequence[tuple[int, int]], tags: Sequence[str]) -> dict[str, Any]:
    """IOB2 word tags -> entities with character spans (an I- tag that does not continue an entity of its
    type starts one, as conlleval reads it)."""
    found: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for (start, end), tag in zip(spans, tags):
        kind = tag[2:] if tag[:2] in ("B-", "I-") else None
        if kind is not None and tag.startswith("I-") and current is not None and current["type"] == kind:
            current["end"] = end
            continue
        if current is not None:
            found.append(current)
            current = None
        if kind is not None:
            current = {"type": kind, "start": start, "end": end}
    if current is not None:
        found.append(current)
    return {"entities": [{"type": e["type"], "text": text[e["start"]:e["end"]], "start": e["start"], "end": e["end"]}
                         for e in found]}


def same_answer(expected: dict[str, Any], got: dict[str, Any], tolerance: float = 1e-3) -> str | None:
    """None when `got` is the same answer as `expected` (labels, texts and spans equal; numbers within
    `tolerance`, relative to 1 or to the value); else what differs."""
    for key, want in expected.items():
        if key not in got:
            return f"{key!r} missing"
        have = got[key]
        if isinstance(want, dict):
            if not isinstance(have, dict):
                return f"{key}: expected an object, got {have!r}"
            inner = same_answer(want, have, tolerance)
            if inner:
                return f"{key}.{inner}"
        elif isinstance(want, float) and not isinstance(want, bool):
            if not isinstance(have, (int, float)) or not math.isclose(want, have, rel_tol=tolerance, abs_tol=tolerance):
                return f"{key}: expected {want:.6g}, got {have!r}"
        elif want != have:
            return f"{key}: expected {want!r}, got {have!r}"
    return None
