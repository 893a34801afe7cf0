"""SQuAD 1.1 / 2.0 for fine-tuning: windowing examples (read by bert_core.tasks.squad) into features, and
n-best post-processing of the model's start/end logits into answers.

Windowing follows Google's run_squad.py (query truncated to max_query_length, doc spans of
max_seq_length - len(query) - 3 tokens every doc_stride tokens, each token scored in the span
where it has the most context, answers outside a span labelled [CLS]). One thing is simpler:
tokens carry character offsets into the original context (bert_core.model.tokenization), so an answer
maps to tokens and back by offsets, and a predicted span's text is the exact slice of the
context, with no whitespace-token bookkeeping or de-tokenization heuristics (get_final_text).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bert_core.errors import BertPipelineError
from bert_core.finetune.config import SQUAD_MAX_SEQ_LENGTH, SquadOptions
from bert_core.tasks.squad import SquadExample


@dataclass
class SquadFeature:
    example_index: int
    input_ids: list[int]
    segment_ids: list[int]
    # Character (start, end) in the context for context tokens; None for [CLS], question and [SEP].
    token_offsets: list[tuple[int, int] | None]
    # True where this window is the one giving the token the most context (Google's _check_is_max_context).
    token_is_max_context: list[bool]
    start_position: int = 0
    end_position: int = 0


def _max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    """Google's _check_is_max_context: is `position` best centred in this span among all that hold it?"""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == span_index


def make_features(examples: Sequence[SquadExample], tokenizer, max_seq_length: int = SQUAD_MAX_SEQ_LENGTH,
                  doc_stride: int = SquadOptions.doc_stride, max_query_length: int = SquadOptions.max_query_length,
                  training: bool = False) -> list[SquadFeature]:
    """Windows of `[CLS] question [SEP] context-span [SEP]`; answer positions when training."""
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tokenizer.encode_batch([e.context for e in examples], add_special_tokens=False)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    features = []
    for index, (example, q, c) in enumerate(zip(examples, questions, contexts)):
        query = q.ids[:max_query_length]
        max_doc = max_seq_length - len(query) - 3
        if max_doc <= 0:
            raise BertPipelineError(f"max_seq_length {max_seq_length} leaves no room for context after a "
                                    f"{len(query)}-token question (max_query_length {max_query_length})")
        if not c.ids:
            raise BertPipelineError(f"question {example.qas_id!r}: the context has no tokens")
        spans: list[tuple[int, int]] = []
        start = 0
        while start < len(c.ids):
            length = min(len(c.ids) - start, max_doc)
            spans.append((start, length))
            if start + length == len(c.ids):
                break
            start += min(length, doc_stride)
        answer_tokens = _answer_token_span(example, c.offsets) if training else None
        for span_index, (start, length) in enumerate(spans):
            prefix = len(query) + 2
            ids = [cls, *query, sep, *c.ids[start:start + length], sep]
            segments = [0] * prefix + [1] * (length + 1)
            offsets: list[tuple[int, int] | None] = [None] * prefix + list(c.offsets[start:start + length]) + [None]
            max_ctx = [False] * prefix + [_max_context(spans, span_index, start + i) for i in range(length)] + [False]
            feature = SquadFeature(index, ids, segments, offsets, max_ctx)
            if answer_tokens is not None:
                first, last = answer_tokens
                if start <= first and last < start + length:
                    feature.start_position = first - start + prefix
                    feature.end_position = last - start + prefix
                # else: the answer is not (wholly) in this window -> [CLS], as in Google's run_squad.
            features.append(feature)
    return features


def _answer_token_span(example: SquadExample, offsets: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """Token indexes (first, last) covering the first gold answer; None when unanswerable."""
    if example.is_impossible or not example.answers:
        return None
    text, start = example.answers[0]
    end = start + len(text)
    inside = [i for i, (a, b) in enumerate(offsets) if b > start and a < end]
    if not inside:
        raise BertPipelineError(f"question {example.qas_id!r}: answer {text!r} covers no token of the context")
    return inside[0], inside[-1]


def char_span(example: SquadExample, feature: SquadFeature, start: int, end: int) -> str:
    """The context text of token positions [start, end] of a feature."""
    first, last = feature.token_offsets[start], feature.token_offsets[end]
    return example.context[first[0]:last[1]]


@dataclass
class SquadPredictions:
    predictions: dict[str, str]
    nbest: dict[str, list[dict]]
    null_odds: dict[str, float] = field(default_factory=dict)  # v2: null score - best span score
    # Character (start, end) in the context of each non-empty prediction (not written to the files).
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)


def _top(logits: Sequence[float], n: int) -> list[int]:
    return sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)[:n]


def postprocess(examples: Sequence[SquadExample], features: Sequence[SquadFeature],
                start_logits: Sequence[Sequence[float]], end_logits: Sequence[Sequence[float]],
                options: SquadOptions | None = None) -> SquadPredictions:
    """Google's write_predictions: best non-null span per question, n-best lists, v2 null decision, with
    `options`' n_best_size, max_answer_length, version_2 and null_score_diff_threshold (BERT's run_squad.py
    defaults when None). Fine-tuning's dev predictions, export's batch predict and serving all answer through
    this one function, so the same logits give the same answers in all three.

    Each feature's logits (a list or an array per feature) are read up to the feature's own length: positions
    past it are padding, whose logits depend on how the caller padded its batch (to the longest row, to the
    sequence length, or 0 where a length-grouped export computed nothing), and must not take n-best places."""
    options = options or SquadOptions()
    n_best_size, max_answer_length = options.n_best_size, options.max_answer_length
    version_2, null_score_diff_threshold = options.version_2, options.null_score_diff_threshold
    by_example: dict[int, list[int]] = collections.defaultdict(list)
    for fi, feature in enumerate(features):
        by_example[feature.example_index].append(fi)
    result = SquadPredictions({}, {}, {})
    for ei, example in enumerate(examples):
        candidates = []  # (score, start_logit, end_logit, text, character span)
        null_score, null_start, null_end = math.inf, 0.0, 0.0
        for fi in by_example.get(ei, []):
            feature, length = features[fi], len(features[fi].input_ids)
            starts = np.asarray(start_logits[fi][:length], dtype=np.float64).tolist()
            ends = np.asarray(end_logits[fi][:length], dtype=np.float64).tolist()
            if version_2 and starts[0] + ends[0] < null_score:
                null_score, null_start, null_end = starts[0] + ends[0], starts[0], ends[0]
            for s in _top(starts, n_best_size):
                for e in _top(ends, n_best_size):
                    if (feature.token_offsets[s] is None or feature.token_offsets[e] is None
                            or e < s or e - s + 1 > max_answer_length or not feature.token_is_max_context[s]):
                        continue
                    span = (feature.token_offsets[s][0], feature.token_offsets[e][1])
                    candidates.append((starts[s] + ends[e], starts[s], ends[e], example.context[span[0]:span[1]], span))
        candidates.sort(key=lambda c: c[0], reverse=True)
        nbest, seen = [], set()
        spans: dict[str, tuple[int, int]] = {}
        for score, s_logit, e_logit, text, span in candidates:
            if text in seen:
                continue
            seen.add(text)
            spans[text] = span
            nbest.append((score, s_logit, e_logit, text))
            if len(nbest) >= n_best_size:
                break
        if version_2 and "" not in seen and math.isfinite(null_score):
            nbest.append((null_score, null_start, null_end, ""))
        if not nbest:  # Google's fallback keeps every question answered
            nbest.append((0.0, 0.0, 0.0, "empty"))
        nbest.sort(key=lambda c: c[0], reverse=True)
        top = max(c[0] for c in nbest)
        weights = [math.exp(c[0] - top) for c in nbest]
        total = sum(weights)
        result.nbest[example.qas_id] = [
            {"text": text, "probability": w / total, "start_logit": float(s), "end_logit": float(e)}
            for (_, s, e, text), w in zip(nbest, weights)]
        best_span = next((c for c in nbest if c[3] != ""), None)
        if not version_2:
            result.predictions[example.qas_id] = nbest[0][3]
            if nbest[0][3] in spans:
                result.spans[example.qas_id] = spans[nbest[0][3]]
            continue
        best_span_score = best_span[0] if best_span else -math.inf
        diff = null_score - best_span_score
        result.null_odds[example.qas_id] = float(diff)
        result.predictions[example.qas_id] = "" if diff > null_score_diff_threshold or best_span is None \
            else best_span[3]
        if result.predictions[example.qas_id]:
            result.spans[example.qas_id] = spans[best_span[3]]
    return result
