"""Text in, task answers out: a model directory (or an ONNX export of it) behind one `predict(records)` call.

This is what a registered model serves (bert_core.deploy.mlflow_model wraps it as an MLflow pyfunc) and
what `bert-pipeline predict --model` runs, so both give the same answers. Tokenization, truncation,
windowing and batching happen here, with the settings the model was fine-tuned and scored with (its
`task.json`, bert_core.finetune.task_card); a directory without a card is a pretrained encoder and
answers with sentence embeddings.

Requests are records (dicts); the fields per task kind:

| kind | fields | answer (bert_core.finetune.tasks.outputs) |
|---|---|---|
| classification (GLUE, XNLI) | text, text_pair (pair tasks) | label, probabilities |
| regression (STS-B) | text, text_pair | score |
| squad | question, context | answer, start, end, score |
| ner | text | entities [{type, text, start, end}] |
| embedding (pretrained) | text | embedding (mean of the token vectors, windows for long text) |

Long input: classification, regression and NER keep the first `max_seq_length` tokens of the example
(pairs cut longest first, as in training; NER words past the cut are tagged O); a SQuAD context of any
length is read in doc-stride windows of `max_seq_length` tokens; embeddings window long text. Over
`MAX_CHARS` characters in one field, or an empty or missing field, is an `InvalidRequest` naming the row
and field.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bert_core.errors import BertPipelineError
from bert_core.finetune import task_card
from bert_core.finetune.tasks import features, outputs
from bert_core.model.modeling import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bert_core.model.tokenization import BertTokenizer

log = logging.getLogger(__name__)

MAX_CHARS = 1_000_000  # one field of one request: ~200k words, far beyond any real document
EMBEDDING = "embedding"
FIELDS: dict[str, tuple[str, ...]] = {
    "classification": ("text", "text_pair"), "regression": ("text", "text_pair"),
    "squad": ("question", "context"), "ner": ("text",), EMBEDDING: ("text",),
}
HEADS = {"classification": BertForSequenceClassification, "regression": BertForSequenceClassification,
         "squad": BertForQuestionAnswering, "ner": BertForTokenClassification}


class InvalidRequest(BertPipelineError):
    """A request this model cannot answer; the message names the row (0-based, `row`) and the field, so a caller
    that read the rows from a file can name the line instead (`detail`: the message without the row)."""

    def __init__(self, detail: str, row: int | None = None):
        super().__init__(detail if row is None else f"row {row}: {detail}")
        self.detail, self.row = detail, row


def _records(model_input: Any) -> list[dict[str, Any]]:
    """Requests as a list of dicts from what callers pass: records, one record, a pandas DataFrame (what
    MLflow's server hands a pyfunc), a dict of columns, a string or a list of strings (the `text` field)."""
    if hasattr(model_input, "to_dict") and hasattr(model_input, "columns"):
        model_input = model_input.to_dict(orient="records")
    if isinstance(model_input, str):
        return [{"text": model_input}]
    if isinstance(model_input, Mapping):
        values = list(model_input.values())
        if values and all(isinstance(v, (list, tuple)) for v in values):
            n = len(values[0])
            if any(len(v) != n for v in values):
                raise InvalidRequest("columns of different lengths: " + ", ".join(
                    f"{k} has {len(v)}" for k, v in model_input.items()))
            return [{k: v[i] for k, v in model_input.items()} for i in range(n)]
        return [dict(model_input)]
    if isinstance(model_input, Iterable):
        rows = []
        for i, row in enumerate(model_input):
            if isinstance(row, str):
                rows.append({"text": row})
            elif isinstance(row, Mapping):
                rows.append(dict(row))
            else:
                raise InvalidRequest(f"expected an object with named fields or a string, got "
                                     f"{type(row).__name__}", row=i)
        return rows
    raise InvalidRequest(f"expected records (a list of objects), got {type(model_input).__name__}")


def _text(record: dict[str, Any], name: str, row: int, required: bool = True) -> str | None:
    value = record.get(name)
    if value is None or (isinstance(value, float) and math.isnan(value)):  # a DataFrame's missing cell
        if required:
            # The fields the row has: a null or NaN value is no field (a DataFrame gives every row every column,
            # NaN where a row had none: listing those said `field 'text' is missing (fields: text)`).
            given = [k for k, v in record.items() if v is not None and not (isinstance(v, float) and math.isnan(v))]
            raise InvalidRequest(f"field {name!r} is missing (fields: {', '.join(sorted(map(str, given))) or 'none'})",
                                 row=row)
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"field {name!r} must be a string, got {type(value).__name__}", row=row)
    if not value.strip():
        raise InvalidRequest(f"field {name!r} is empty", row=row)
    if len(value) > MAX_CHARS:
        raise InvalidRequest(f"field {name!r} has {len(value):,} characters; the limit is {MAX_CHARS:,}", row=row)
    return value


class TaskPredictor:
    """`TaskPredictor.from_model_dir(dir)(records)` -> one answer dict per record, in order.

    `runner(input_ids, token_type_ids, attention_mask)` -> the head's outputs as numpy arrays, by name:
    the eager PyTorch model by default, or an ONNX export (`from_model_dir(..., export_dir=...)`)."""

    def __init__(self, kind: str, tokenizer: BertTokenizer, runner, card: task_card.TaskCard | None = None,
                 labels: Sequence[str] | None = None, pair: bool = False, batch_size: int = 32, embedder=None):
        self.kind, self.tokenizer, self.runner, self.card = kind, tokenizer, runner, card
        self.labels = list(labels) if labels is not None else None
        self.pair = pair
        self.embedder = embedder
        self.batch_size = batch_size
        self.fields = FIELDS[kind]

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, rows: int) -> None:
        # Set after loading too (a logged pyfunc's predictor, as `predict --model models:/...` runs it), so the
        # embedding kind's own batching follows.
        if rows < 1:
            raise BertPipelineError(f"batch size must be at least 1, got {rows}")
        self._batch_size = rows
        if self.embedder is not None:
            self.embedder.batch_size = rows

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, batch_size: int = 32, export_dir: str | Path | None = None,
                       device: str = "cpu", quantized: bool = False) -> TaskPredictor:
        """A fine-tuned model directory (`task.json` beside the weights; a finetune output dir works too: its
        `model/`) or a pretrained encoder (no card: sentence embeddings). `export_dir`: run that ONNX/pt2
        export of the same model (`bert-pipeline export`) instead of eager PyTorch; `quantized`: its INT8
        graph (`--quantize int8`)."""
        if quantized and export_dir is None:
            raise BertPipelineError("serving the INT8 graph needs an export (export_dir) made with --quantize int8")
        directory = Path(model_dir)
        if not (directory / "config.json").is_file() and (directory / "model" / "config.json").is_file():
            directory = directory / "model"
        if not (directory / "config.json").is_file():
            raise BertPipelineError(f"{model_dir}: not a model directory (no config.json)")
        tokenizer = BertTokenizer.from_model_dir(directory)
        card = task_card.read_card(directory)
        if card is None:
            from bert_core.deploy.embedding import BertEmbedding

            embedder = BertEmbedding(str(directory), tokenizer=tokenizer, batch_size=batch_size, pooling="mean",
                                     device=device)
            return cls(EMBEDDING, tokenizer, None, batch_size=batch_size, embedder=embedder)
        if export_dir is not None:
            runner = _ExportRunner(export_dir, card.kind, quantized)
            model_config = runner.config
            # Requests are cut (and SQuAD contexts windowed) at the card's max_seq_length, as in training: a graph
            # made for shorter rows refused every request longer than it, which the short check examples that
            # promotion runs did not show.
            limit = runner.model.meta["max_seq_length"]
            if limit < card.max_seq_length:
                raise BertPipelineError(
                    f"{export_dir}: the export takes at most {limit} tokens, but {directory} was fine-tuned and is "
                    f"served at max_seq_length {card.max_seq_length} (its task.json): longer requests would fail; "
                    f"export it again with --max-seq-length {card.max_seq_length} or more")
        else:
            model = HEADS[card.kind].from_pretrained(str(directory)).eval().to(device)
            runner = _TorchRunner(model, card.kind, device)
            model_config = model.config
        labels = None
        if card.kind in ("classification", "ner"):
            id2label = model_config.id2label or {}
            labels = [id2label.get(i, str(i)) for i in range(model_config.num_labels)]
        pair = False
        if card.kind in ("classification", "regression"):
            from bert_core.tasks import glue

            try:
                pair = glue.get_task(card.task).text_b is not None
            except BertPipelineError:
                pair = False
        return cls(card.kind, tokenizer, runner, card, labels, pair, batch_size)

    def input_example(self) -> list[dict[str, str]]:
        """A request of this model's kind (for the MLflow signature); our own text."""
        if self.kind == "squad":
            return [{"question": "Where did the concert take place?",
                     "context": "The spring concert took place in the old market hall, next to the river."}]
        if self.kind in ("classification", "regression") and self.pair:
            return [{"text": "The concert was moved to the market hall.",
                     "text_pair": "The concert took place in the market hall."}]
        return [{"text": "Lena Varga opened a small bakery in Riga last spring."}]

    def __call__(self, model_input: Any) -> list[dict[str, Any]]:
        return self.predict(model_input)

    def predict(self, model_input: Any) -> list[dict[str, Any]]:
        records = _records(model_input)
        if not records:
            return []
        if self.kind in (EMBEDDING, "ner") or (self.kind in ("classification", "regression") and not self.pair):
            # A second text for a model that reads one: refused, not dropped (a pretrained encoder answered a pair
            # with the embedding of its first text, an NER model tagged the first text alone).
            self._no_pair(records)
        if self.kind == EMBEDDING:
            texts = [self._field(r, "text", i) for i, r in enumerate(records)]
            return [{"embedding": [float(v) for v in e.sentence_vector]} for e in self.embedder(texts)]
        if self.kind == "squad":
            return self._squad(records)
        if self.kind == "ner":
            return self._ner(records)
        return self._classify(records)

    def _field(self, record: dict[str, Any], name: str, row: int, required: bool = True) -> str | None:
        """`_text`, and a text the tokenizer reads nothing from (only control, zero-width or other characters it
        drops) is refused as an empty one is: a SQuAD context of no tokens has no window to read (it failed as
        an unexpected error, HTTP 400 without our message), and a classification answered [CLS] [SEP] alone.
        Only a text without a letter or digit is tokenized here, so real requests cost nothing more."""
        value = _text(record, name, row, required)
        if value is not None and not any(ch.isalnum() for ch in value) and not self.tokenizer.tokenize(value):
            raise InvalidRequest(f"field {name!r} has no text the model can read (only control, "
                                 "zero-width or other characters its tokenizer drops)", row=row)
        return value

    def _no_pair(self, records: list[dict[str, Any]]) -> None:
        for i, record in enumerate(records):
            value = record.get("text_pair")
            if value is None or (isinstance(value, float) and math.isnan(value)):  # a DataFrame's missing cell
                continue
            what = f"this {self.card.task} model" if self.card is not None else "this pretrained encoder"
            raise InvalidRequest(f"field 'text_pair': {what} reads one text per example: remove it", row=i)

    # -- batching: rows sorted by length, each batch padded to its longest row only
    def _run(self, ids: Sequence[Sequence[int]], segments: Sequence[Sequence[int]]) -> list[dict[str, np.ndarray]]:
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[dict[str, np.ndarray] | None] = [None] * len(ids)
        for b in range(0, len(order), self.batch_size):
            rows = order[b:b + self.batch_size]
            length = max(len(ids[i]) for i in rows)
            arrays = features.pad([ids[i] for i in rows], [segments[i] for i in rows], length)
            result = self.runner(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"])
            for k, i in enumerate(rows):
                out[i] = {name: value[k] for name, value in result.items()}
        return out  # type: ignore[return-value]

    def _classify(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        texts = [self._field(r, "text", i) for i, r in enumerate(records)]
        pairs = [self._field(r, "text_pair", i) for i, r in enumerate(records)] if self.pair else None
        encodings = self.tokenizer.encode_batch(texts, pairs,
                                                max_length=self.card.max_seq_length, truncation="longest_first")
        results = self._run([e.ids for e in encodings], [e.segment_ids for e in encodings])
        if self.kind == "regression":
            return [outputs.regression(r["logits"]) for r in results]
        return [outputs.classification(r["logits"], self.labels) for r in results]

    def _ner(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        texts = [self._field(r, "text", i) for i, r in enumerate(records)]
        spans = [outputs.word_spans(t) for t in texts]
        arrays, _, word_token = features.encode_words(self.tokenizer, texts, [[a for a, _ in s] for s in spans],
                                                      self.card.max_seq_length)
        lengths = arrays["attention_mask"].sum(1)
        results = self._run([row[:n] for row, n in zip(arrays["input_ids"], lengths)],
                            [row[:n] for row, n in zip(arrays["token_type_ids"], lengths)])
        answers = []
        for text, word_spans, positions, result in zip(texts, spans, word_token, results):
            best = result["logits"].argmax(-1)
            tags = [self.labels[best[t]] if t is not None else "O" for t in positions]
            answers.append(outputs.entities(text, word_spans, tags))
        return answers

    def _squad(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from bert_core.finetune.tasks.squad import make_features, postprocess
        from bert_core.tasks.squad import SquadExample

        examples = [SquadExample(str(i), self._field(r, "question", i), self._field(r, "context", i), ())
                    for i, r in enumerate(records)]
        options = self.card.squad_options()
        feats = make_features(examples, self.tokenizer, self.card.max_seq_length, options.doc_stride,
                              options.max_query_length)
        results = self._run([f.input_ids for f in feats], [f.segment_ids for f in feats])
        result = postprocess(examples, feats, [r["start_logits"] for r in results], [r["end_logits"] for r in results],
                             options)
        return [outputs.squad_answer(e.qas_id, result) for e in examples]


class _TorchRunner:
    def __init__(self, model, kind: str, device: str):
        self.model, self.kind, self.device = model, kind, device

    @torch.inference_mode()
    def __call__(self, input_ids, token_type_ids, attention_mask) -> dict[str, np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
                   for a in (input_ids, token_type_ids, attention_mask)]
        out = self.model(*tensors)
        if self.kind == "squad":
            return {"start_logits": out.start_logits.float().cpu().numpy(),
                    "end_logits": out.end_logits.float().cpu().numpy()}
        return {"logits": out.logits.float().cpu().numpy()}


class _ExportRunner:
    """An export directory (bert-pipeline export) as a runner: its graph, fed padded batches."""

    def __init__(self, export_dir: str | Path, kind: str, quantized: bool = False):
        from bert_core.deploy.runtime import ExportedModel
        from bert_core.model.config import BertConfig

        self.model = ExportedModel(export_dir)
        if quantized and not self.model.meta.get("quantized_graph"):
            raise BertPipelineError(f"{export_dir}: the export has no INT8 graph (export it with --quantize int8)")
        self.kind, self.quantized = kind, quantized
        self.config = BertConfig.from_json_file(str(Path(export_dir) / "config.json"))
        self.names = self.model.meta["outputs"]

    def __call__(self, input_ids, token_type_ids, attention_mask) -> dict[str, np.ndarray]:
        result = self.model.run(input_ids, token_type_ids, attention_mask, quantized=self.quantized)
        return dict(zip(self.names, result))
