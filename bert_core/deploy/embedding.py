"""Token and sentence vectors from a BERT encoder (GluonNLP's BertEmbedding, for any model dir).

Sentences are batched by length (less padding) and returned in input order. A sentence longer
than `max_seq_length` is never cut: its tokens are split into overlapping windows, each encoded
as `[CLS] window [SEP]`, and every token takes its vector from the window where it has the most
context on both sides (the rule SQuAD uses for doc-stride windows). Sentence vectors are the
[CLS] vector (`pooling="cls"`, averaged over windows for long sentences) or the mean of the
sentence's token vectors (`pooling="mean"`; special tokens excluded, so the value does not depend
on how a long sentence was windowed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bert_core.errors import BertPipelineError
from bert_core.model.modeling import BertModel
from bert_core.model.tokenization import BertTokenizer


@dataclass
class SentenceEmbedding:
    sentence: str
    tokens: list[str]
    token_vectors: np.ndarray  # [len(tokens), hidden]
    sentence_vector: np.ndarray  # [hidden]


@dataclass(frozen=True)
class _Window:
    sentence: int
    start: int  # first token of the sentence in this window
    length: int


def _windows(n_tokens: int, size: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) windows of at most `size` tokens, starting every `stride` tokens, covering all."""
    spans, start = [], 0
    while True:
        length = min(n_tokens - start, size)
        spans.append((start, length))
        if start + length >= n_tokens:
            return spans
        start += stride


def _owner(spans: list[tuple[int, int]], position: int) -> int:
    best, best_score = 0, -1.0
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if score > best_score:
                best, best_score = index, score
    return best


class BertEmbedding:
    """`BertEmbedding(model="path/or/zoo-name")(["a sentence", ...])` -> one SentenceEmbedding each."""

    def __init__(self, model: str | BertModel, tokenizer: BertTokenizer | None = None, max_seq_length: int = 128,
                 stride: int | None = None, batch_size: int = 32, layer: int | Sequence[int] = -1,
                 pooling: str = "cls", device: str = "cpu"):
        if isinstance(model, str):
            model_dir = model
            model = BertModel.from_pretrained(model)
            if tokenizer is None:
                from bert_core.model.weights import resolve_model_dir

                tokenizer = BertTokenizer.from_model_dir(resolve_model_dir(model_dir))
        if tokenizer is None:
            raise BertPipelineError("BertEmbedding needs a tokenizer when given a model object")
        if pooling not in ("cls", "mean"):
            raise BertPipelineError(f"pooling must be 'cls' or 'mean', not {pooling!r}")
        limit = model.config.max_position_embeddings
        if not 3 <= max_seq_length <= limit:
            raise BertPipelineError(f"max_seq_length must be in [3, {limit}], got {max_seq_length}")
        self.model = model.eval().to(device)
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        window = max_seq_length - 2
        self.stride = stride if stride is not None else max(1, window // 2)
        if not 1 <= self.stride <= window:
            raise BertPipelineError(f"stride must be in [1, {window}] for max_seq_length {max_seq_length}")
        self.batch_size = batch_size
        n_layers = model.config.num_hidden_layers
        self.layers = [layer] if isinstance(layer, int) else list(layer)
        for index in self.layers:
            if not -n_layers <= index < n_layers:
                raise BertPipelineError(f"layer {index} does not exist: the model has {n_layers} layers")
        self.pooling = pooling
        self.device = device

    def __call__(self, sentences: Sequence[str]) -> list[SentenceEmbedding]:
        if isinstance(sentences, str):
            sentences = [sentences]
        encodings = self.tokenizer.encode_batch(list(sentences), add_special_tokens=False)
        window = self.max_seq_length - 2
        plans = [_windows(len(e.ids), window, self.stride) for e in encodings]
        work = [_Window(i, start, length) for i, spans in enumerate(plans) for start, length in spans]
        hidden = self._encode(work, encodings)  # per window: [length + 2, H]
        results = []
        cursor = 0
        for sentence, encoding, spans in zip(sentences, encodings, plans):
            windows = hidden[cursor:cursor + len(spans)]
            cursor += len(spans)
            dim = windows[0].shape[-1]
            if len(spans) == 1:  # the common case: the sentence fits in one window
                vectors = np.array(windows[0][1:1 + len(encoding.ids)], dtype=np.float32)
            else:
                vectors = np.empty((len(encoding.ids), dim), dtype=np.float32)
                for position in range(len(encoding.ids)):
                    owner = _owner(spans, position)
                    vectors[position] = windows[owner][1 + position - spans[owner][0]]
            if self.pooling == "cls" or not len(vectors):
                # An empty sentence still has [CLS] [SEP]: its [CLS] vector is its sentence vector.
                sentence_vector = np.mean([w[0] for w in windows], axis=0)
            else:
                sentence_vector = vectors.mean(axis=0)
            results.append(SentenceEmbedding(sentence, list(encoding.tokens), vectors,
                                             sentence_vector.astype(np.float32)))
        return results

    @torch.inference_mode()
    def _encode(self, work: list[_Window], encodings) -> list[np.ndarray]:
        """Hidden states of every window, batched by length; returned in `work` order."""
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        order = sorted(range(len(work)), key=lambda k: work[k].length)
        out: list[np.ndarray | None] = [None] * len(work)
        for b in range(0, len(order), self.batch_size):
            batch = order[b:b + self.batch_size]
            seq = max(work[k].length for k in batch) + 2
            ids = torch.zeros(len(batch), seq, dtype=torch.long)
            mask = torch.zeros(len(batch), seq, dtype=torch.long)
            for row, k in enumerate(batch):
                w = work[k]
                tokens = [cls, *encodings[w.sentence].ids[w.start:w.start + w.length], sep]
                ids[row, :len(tokens)] = torch.tensor(tokens)
                mask[row, :len(tokens)] = 1
            # Every layer's output is padded back to [batch, seq] when asked for: only when needed.
            last_only = self.layers == [-1] or self.layers == [self.model.config.num_hidden_layers - 1]
            result = self.model(ids.to(self.device), attention_mask=mask.to(self.device),
                                output_all_encoded_layers=not last_only)
            if last_only:
                layers = result.sequence_output
            else:
                layers = torch.stack([result.all_encoder_layers[i] for i in self.layers]).mean(0)
            layers = layers.float().cpu().numpy()
            for row, k in enumerate(batch):
                out[k] = layers[row, :work[k].length + 2]
        return out  # type: ignore[return-value]
