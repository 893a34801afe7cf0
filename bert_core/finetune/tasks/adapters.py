"""Per-task-kind glue between files and the model: which head, which tensors, which prediction files.

An adapter turns a data file into fixed-length arrays (inputs + training targets) and turns the
model's outputs on an evaluation file back into the prediction files the official scorers read.
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bert_core.errors import BertPipelineError
from bert_core.finetune.tasks import features, outputs, squad
from bert_core.model.modeling import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bert_core.tasks import conll, glue
from bert_core.tasks.catalog import Split, TaskInfo, find_file
from bert_core.tasks.squad import V2, other_version_present, read_squad, version_files

log = logging.getLogger(__name__)

CHECK_EXAMPLES = 8  # dev examples kept with a model, with their scored predictions, to check serving by


@dataclass
class EvalSet:
    name: str  # "dev", "dev_mismatched", "test", ...
    path: Path
    arrays: dict[str, np.ndarray]
    has_gold: bool
    payload: Any = None  # what post-processing needs (examples, features, sentences)


@dataclass
class Predictions:
    files: list[str]  # relative to the output directory
    gold_file: Path | None
    prediction_file: str | None  # the file the scorer reads
    na_prob_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Adapter(abc.ABC):
    model_class: type
    output_names: tuple[str, ...] = ("logits",)

    def __init__(self, task: TaskInfo, data_dir: Path, tokenizer, cfg):
        self.task, self.data_dir, self.tokenizer, self.cfg = task, data_dir, tokenizer, cfg

    def config_overrides(self) -> dict[str, Any]:
        return {}

    def train_file(self) -> Path:
        """--train-file when given, else the task's train file in the data dir."""
        if self.cfg.train_file:
            path = Path(self.cfg.train_file)
            if not path.is_file():
                raise BertPipelineError(f"--train-file {self.cfg.train_file}: no such file")
            return path
        language = self.cfg.language or glue.DEFAULT_XNLI_LANGUAGE
        return find_file(self.data_dir, self._train_candidates(language), "train", self.task,
                         hint=self.task.missing_train_hint)

    def _train_candidates(self, language: str) -> tuple[str, ...]:
        return self.task.train_candidates(language)

    def eval_files(self) -> list[tuple[Split, Path]]:
        """The evaluation files present in the data dir (an error when a required one is missing)."""
        found = []
        for split in self.task.eval_splits():
            path = find_file(self.data_dir, split.files, split.name, self.task, required=split.required)
            if path is not None:
                found.append((split, path))
        return found

    def eval_sets(self) -> list[EvalSet]:
        return [self.eval_set(split.name, path, split.gold) for split, path in self.eval_files()]

    def check_files(self) -> None:
        """Read every file the run reads (train, dev, test), without tokenizing: a broken row is an error naming
        the file and the line where the run is planned, before its MLflow run is opened or a worker starts."""
        for path in [self.train_file()] + [path for _, path in self.eval_files()]:
            self._parse(path)

    @abc.abstractmethod
    def _parse(self, path: Path) -> None:
        """Read one of the run's files as the task's reader does (its errors name the file and the line)."""

    def loss_weight(self, arrays: dict[str, np.ndarray], index: np.ndarray) -> int:
        """How many terms the model's mean loss averages over in rows `index`: rows, for the heads whose
        loss is a mean over examples. Micro-batches and workers are weighted by it, so that together
        they compute the mean over the whole batch."""
        return len(index)

    @abc.abstractmethod
    def train_arrays(self) -> dict[str, np.ndarray]:
        """Model inputs and training targets of the train file."""

    @abc.abstractmethod
    def eval_set(self, name: str, path: Path, has_gold: bool) -> EvalSet:
        """Model inputs of an evaluation file, with what post-processing needs."""

    @abc.abstractmethod
    def write(self, eval_set: EvalSet, outputs: dict[str, np.ndarray], out_dir: Path) -> Predictions:
        """Prediction files for the model's outputs on `eval_set`."""

    @abc.abstractmethod
    def check_examples(self, eval_set: EvalSet, outputs: dict[str, np.ndarray],
                       limit: int = CHECK_EXAMPLES) -> list[dict[str, Any]]:
        """The first `limit` examples of `eval_set` as serving requests, each with the answer these model
        outputs give it: [{"input": record, "expected": answer}] (bert_core.finetune.tasks.outputs)."""


class ClassificationAdapter(Adapter):
    """GLUE and XNLI sentence(-pair) classification, and STS-B regression (num_labels=1)."""

    model_class = BertForSequenceClassification

    def __init__(self, task, data_dir, tokenizer, cfg):
        super().__init__(task, data_dir, tokenizer, cfg)
        self.spec = glue.get_task(task.name)
        self.labels = list(self.spec.labels) if self.spec.labels else None

    def config_overrides(self) -> dict[str, Any]:
        if self.labels is None:
            return {"num_labels": 1, "problem_type": "regression", "id2label": None}
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels)),
                "problem_type": "single_label_classification"}

    def _read(self, path: Path) -> list[glue.Example]:
        return glue.read_examples(self.task.name, path, language=self.cfg.language, what=f"{self.task.name} file")

    def _parse(self, path: Path) -> None:
        self._read(path)

    def train_arrays(self) -> dict[str, np.ndarray]:
        path = self.train_file()
        examples = self._read(path)
        if any(e.label is None for e in examples):
            raise BertPipelineError(f"{path}: the training file has no labels")
        arrays = features.encode_examples(self.tokenizer, examples, self.cfg.max_seq_length)
        if self.labels is None:
            arrays["labels"] = np.array([e.label for e in examples], dtype=np.float32)
        else:
            index = {label: i for i, label in enumerate(self.labels)}
            arrays["labels"] = np.array([index[e.label] for e in examples], dtype=np.int64)
        return arrays

    def eval_set(self, name: str, path: Path, has_gold: bool) -> EvalSet:
        examples = self._read(path)
        if has_gold and any(e.label is None for e in examples):
            raise BertPipelineError(f"{path}: the dev file has no labels")
        arrays = features.encode_examples(self.tokenizer, examples, self.cfg.max_seq_length)
        return EvalSet(name, path, arrays, has_gold, examples)

    def write(self, eval_set, outputs, out_dir) -> Predictions:
        logits = outputs["logits"]
        if self.labels is None:
            predictions = [float(v) for v in logits[:, 0]]
        else:
            predictions = [self.labels[i] for i in logits.argmax(-1)]
        name = f"{eval_set.name}_predictions.tsv"
        features.write_glue_submission(out_dir / name, predictions)
        return Predictions([name], eval_set.path if eval_set.has_gold else None, name)

    def check_examples(self, eval_set, outputs_, limit=CHECK_EXAMPLES):
        checks = []
        for example, logits in zip(eval_set.payload[:limit], outputs_["logits"]):
            record = {"text": example.text_a}
            if example.text_b is not None:
                record["text_pair"] = example.text_b
            expected = (outputs.regression(logits) if self.labels is None
                        else outputs.classification(logits, self.labels))
            checks.append({"input": record, "expected": expected})
        return checks


class SquadAdapter(Adapter):
    """SQuAD 1.1/2.0: doc-stride windows, n-best post-processing, null odds for 2.0."""

    model_class = BertForQuestionAnswering
    output_names = ("start_logits", "end_logits")

    def _version_files(self, files: tuple[str, ...]) -> tuple[str, ...]:
        return version_files(files, bool(self.cfg.version_2))

    def _version_hint(self, files: tuple[str, ...]) -> str:
        """What to do when only the other version's file is there: --version-2 picks the files."""
        present = other_version_present(self.data_dir, files, bool(self.cfg.version_2))
        if not present:
            return ""
        flag = "without --version-2" if self.cfg.version_2 else "with --version-2"
        return f"found {present[0]}: run {flag} (version_2 in a DAG conf) to use it"

    def _train_candidates(self, language: str) -> tuple[str, ...]:
        return self._version_files(self.task.train_files)

    def train_file(self) -> Path:
        if self.cfg.train_file:
            return super().train_file()
        return find_file(self.data_dir, self._train_candidates(""), "train", self.task,
                         hint=self._version_hint(self.task.train_files))

    def eval_files(self) -> list[tuple[Split, Path]]:
        (dev,) = self.task.eval_splits(bool(self.cfg.version_2))
        return [(dev, find_file(self.data_dir, dev.files, "dev", self.task,
                                hint=self._version_hint(self.task.dev_files)))]

    def _parse(self, path: Path) -> None:
        version, _ = read_squad(path)
        if path == self.train_file():
            return
        if self.cfg.version_2 and version != V2:
            # Its scorer, evaluate-v1.1, takes no no-answer odds: the run trained, then failed at the first score.
            raise BertPipelineError(f"{path}: a SQuAD {version} dev file, but --version-2 (version_2 in a DAG conf) "
                                    "is set and 1.1's scorer takes no no-answer odds: run without --version-2, or "
                                    "score on a SQuAD 2.0 dev file")
        if not self.cfg.version_2 and version == V2:
            # Without it the model never answers "" (no null score is compared), so every unanswerable question
            # scores 0 and the run's figures say nothing of what 2.0 asks; seen as a full run with a warning.
            raise BertPipelineError(f"{path}: a SQuAD 2.0 dev file, but --version-2 (version_2 in a DAG conf) is not "
                                    "set, so the model would answer every question, the unanswerable ones too: run "
                                    "with --version-2, or score on a SQuAD 1.1 dev file")

    def _features(self, path: Path, training: bool):
        version, examples = read_squad(path)
        if (version == "2.0") != bool(self.cfg.version_2) and not training:
            log.warning("%s is SQuAD %s but --version-2 is %s", path, version, bool(self.cfg.version_2))
        feats = squad.make_features(examples, self.tokenizer, self.cfg.max_seq_length, self.cfg.doc_stride,
                                    self.cfg.max_query_length, training=training)
        return examples, feats, features.pad_squad_features(feats, self.cfg.max_seq_length)

    def train_arrays(self) -> dict[str, np.ndarray]:
        _, feats, arrays = self._features(self.train_file(), training=True)
        arrays["start_positions"] = np.array([f.start_position for f in feats], dtype=np.int64)
        arrays["end_positions"] = np.array([f.end_position for f in feats], dtype=np.int64)
        return arrays

    def eval_set(self, name, path, has_gold) -> EvalSet:
        examples, feats, arrays = self._features(path, training=False)
        return EvalSet(name, path, arrays, has_gold, (examples, feats))

    def write(self, eval_set, outputs, out_dir) -> Predictions:
        examples, feats = eval_set.payload
        result = squad.postprocess(examples, feats, outputs["start_logits"], outputs["end_logits"], self.cfg)
        files = features.write_squad_predictions(out_dir, result, self.cfg.version_2)
        return Predictions(files, eval_set.path, "predictions.json",
                           "null_odds.json" if self.cfg.version_2 else None)

    def check_examples(self, eval_set, outputs_, limit=CHECK_EXAMPLES):
        examples, feats = eval_set.payload
        examples = examples[:limit]
        rows = [i for i, f in enumerate(feats) if f.example_index < len(examples)]
        result = squad.postprocess(examples, [feats[i] for i in rows], outputs_["start_logits"][rows],
                                   outputs_["end_logits"][rows], self.cfg)
        return [{"input": {"question": e.question, "context": e.context},
                 "expected": outputs.squad_answer(e.qas_id, result)} for e in examples]


class NerAdapter(Adapter):
    """CoNLL NER: tags normalised to IOB2, one label per word on its first word piece."""

    model_class = BertForTokenClassification

    def __init__(self, task, data_dir, tokenizer, cfg, labels: list[str] | None = None):
        """`labels`: a fine-tuned model's own (its config's id2label), to score it on dev data alone: the labels
        of a model being trained come from its training file's tags."""
        super().__init__(task, data_dir, tokenizer, cfg)
        self._train = None
        if labels is None:
            self._train = conll.read_conll(self.train_file())
            tags = {t for s in self._train for t in conll.to_iob2(s.tags)}
            labels = ["O", *sorted(tags - {"O"})]
        self.labels = list(labels)

    def config_overrides(self) -> dict[str, Any]:
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels))}

    def _parse(self, path: Path) -> None:
        if path != self.train_file():  # read by __init__
            conll.read_conll(path)

    def loss_weight(self, arrays: dict[str, np.ndarray], index: np.ndarray) -> int:
        # The token-classification loss is a mean over the labelled word pieces, not over sentences.
        return int((arrays["labels"][index] != -100).sum())

    def _encode(self, sentences: list[conll.Sentence], path: Path):
        texts, starts = [], []
        for s in sentences:
            offsets, position = [], 0
            for word in s.words:
                offsets.append(position)
                position += len(word) + 1
            texts.append(" ".join(s.words))
            starts.append(offsets)
        arrays, first_piece, word_token = features.encode_words(self.tokenizer, texts, starts,
                                                                self.cfg.max_seq_length)
        cut = sum(p is None for positions in word_token for p in positions)
        if cut:
            log.warning("%s: %d word(s) beyond --max-seq-length %d tokens are predicted 'O'", path, cut,
                        self.cfg.max_seq_length)
        return arrays, first_piece, word_token

    def train_arrays(self) -> dict[str, np.ndarray]:
        arrays, first_piece, _ = self._encode(self._train, self.train_file())
        index = {t: i for i, t in enumerate(self.labels)}
        labels = np.full(first_piece.shape, -100, dtype=np.int64)
        for row, s in enumerate(self._train):
            tags = conll.to_iob2(s.tags)
            for t, w in enumerate(first_piece[row]):
                if w >= 0:
                    labels[row, t] = index[tags[w]]
        arrays["labels"] = labels
        return arrays

    def eval_set(self, name, path, has_gold) -> EvalSet:
        sentences = conll.read_conll(path)
        unknown = {t for s in sentences for t in conll.to_iob2(s.tags)} - set(self.labels)
        if has_gold and unknown:
            raise BertPipelineError(f"{path}: tags not seen in the training file: {', '.join(sorted(unknown))}")
        arrays, _, word_token = self._encode(sentences, path)
        return EvalSet(name, path, arrays, has_gold, (sentences, word_token))

    def write(self, eval_set, outputs, out_dir) -> Predictions:
        sentences, word_token = eval_set.payload
        best = outputs["logits"].argmax(-1)
        predicted = [[self.labels[best[row, t]] if t is not None else "O" for t in positions]
                     for row, positions in enumerate(word_token)]
        name = f"{eval_set.name}_predictions.txt"
        conll.write_predictions(out_dir / name, sentences, predicted)
        return Predictions([name], eval_set.path if eval_set.has_gold else None, name)

    def check_examples(self, eval_set, outputs_, limit=CHECK_EXAMPLES):
        sentences, word_token = eval_set.payload
        best = outputs_["logits"].argmax(-1)
        checks = []
        for row, (sentence, positions) in enumerate(zip(sentences[:limit], word_token)):
            text = " ".join(sentence.words)
            tags = [self.labels[best[row, t]] if t is not None else "O" for t in positions]
            checks.append({"input": {"text": text},
                           "expected": outputs.entities(text, outputs.word_spans(text), tags)})
        return checks


ADAPTERS = {"classification": ClassificationAdapter, "regression": ClassificationAdapter,
            "squad": SquadAdapter, "ner": NerAdapter}
