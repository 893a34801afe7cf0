"""Entity-level NER scores with conlleval.pl's semantics (chunk starts/ends for IOB1, IOB2, IOE, IOBES).

An entity counts as correct only when its type and both boundaries match. Values are fractions:
precision = correct / predicted entities, recall = correct / gold entities, F1 their harmonic
mean (0.0 when undefined), and token-level accuracy, as conlleval prints (it shows percentages).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_core.tasks.conll import read_conll


def _split(tag: str) -> tuple[str, str]:
    if tag == "O" or "-" not in tag:
        return tag, ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def _chunk_end(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != kind


def _chunk_start(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != kind


def chunks(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """(start, end exclusive, type) of every entity in a tag sequence."""
    found = set()
    start, prev_tag, prev_type = None, "O", ""
    for i, full in enumerate([*tags, "O"]):
        tag, kind = _split(full)
        if start is not None and _chunk_end(prev_tag, tag, prev_type, kind):
            found.add((start, i, prev_type))
            start = None
        if _chunk_start(prev_tag, tag, prev_type, kind):
            start = i
        prev_tag, prev_type = tag, kind
    return found


def ner_metrics(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    correct = n_gold = n_pred = tokens = token_hits = 0
    for index, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise BertPipelineError(f"sentence {index}: {len(g)} gold tags but {len(p)} predicted")
        gc, pc = chunks(g), chunks(p)
        correct += len(gc & pc)
        n_gold += len(gc)
        n_pred += len(pc)
        tokens += len(g)
        token_hits += sum(a == b for a, b in zip(g, p))
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": token_hits / tokens if tokens else 0.0}


def evaluate_ner_files(gold_path: str | Path, pred_path: str | Path) -> dict[str, float]:
    """Score a predicted CoNLL file (tag in the last column) against the gold one, token by token."""
    gold, pred = read_conll(gold_path), read_conll(pred_path)
    if len(gold) != len(pred):
        raise BertPipelineError(f"{pred_path} has {len(pred)} sentences but {gold_path} has {len(gold)}")
    for g, p in zip(gold, pred):
        if g.words != p.words:
            raise BertPipelineError(f"{pred_path}, line {p.line}: tokens differ from {gold_path}, line {g.line}")
    return ner_metrics([s.tags for s in gold], [s.tags for s in pred])
