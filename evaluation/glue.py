"""GLUE / XNLI dev-set metrics, as the benchmark defines them, over GLUE-layout TSV files.

Metrics are plain floats (fractions, not percentages), as the GLUE metric scripts of HF and
GluonNLP report them: CoLA and the AX diagnostic -> ``mcc`` (sklearn's Matthews correlation,
multi-class for AX, 0.0 when undefined); MRPC, QQP -> ``accuracy`` and ``f1`` of label ``1``;
STS-B -> ``pearson`` and ``spearman`` (average ranks for ties, as scipy); everything else ->
``accuracy``. They are computed with numpy only; the tests cross-check them against sklearn/scipy.

Gold files are read in the layout `download_glue_data.py` writes (XNLI: the original XNLI TSV or
the Baidu/ERNIE `text_a/text_b/label` one). Fields are split on tabs and nothing else: GLUE text
holds unbalanced quote characters, so a quote must never start a quoted field (csv.QUOTE_NONE
semantics), and lines are split on "\\n" only.

Predictions use the GLUE submission format: a TSV with header ``index<TAB>prediction``, one row per
gold example in gold file order, labels as strings (floats for STS-B).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bert_core.errors import BertPipelineError

NLI_LABELS = ("contradiction", "entailment", "neutral")
BINARY_LABELS = ("0", "1")
TWO_WAY_NLI_LABELS = ("entailment", "not_entailment")
POSITIVE_LABEL = "1"  # F1 of MRPC and QQP is the F1 of this label


@dataclass(frozen=True)
class TaskSpec:
    """What scoring needs to know about one task's dev file and predictions."""

    name: str
    labels: tuple[str, ...] | None  # None: regression (STS-B), labels are floats
    metrics: tuple[str, ...]
    # Header name of the gold label column; None for CoLA, whose dev.tsv has no header.
    label_column: str | None
    # CoLA only: the label's column index and the number of columns (no header to learn them from).
    label_index: int = 1
    num_columns: int = 4
    layout: str = ""  # how the gold file looks, for error messages


GLUE_TASKS: dict[str, TaskSpec] = {
    "cola": TaskSpec(
        "CoLA",
        BINARY_LABELS,
        ("mcc",),
        None,
        layout="no header; 4 columns: source, label, original label, sentence",
    ),
    "sst-2": TaskSpec("SST-2", BINARY_LABELS, ("accuracy",), "label", layout="header 'sentence<TAB>label'"),
    "mrpc": TaskSpec(
        "MRPC",
        BINARY_LABELS,
        ("accuracy", "f1"),
        "Quality",
        layout="header 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String'",
    ),
    "sts-b": TaskSpec(
        "STS-B",
        None,
        ("pearson", "spearman"),
        "score",
        layout="10-column header ending in 'score' (index, genre, ..., sentence1, sentence2, score)",
    ),
    "qqp": TaskSpec(
        "QQP",
        BINARY_LABELS,
        ("accuracy", "f1"),
        "is_duplicate",
        layout="header 'id<TAB>qid1<TAB>qid2<TAB>question1<TAB>question2<TAB>is_duplicate'",
    ),
    "mnli": TaskSpec(
        "MNLI",
        NLI_LABELS,
        ("accuracy",),
        "gold_label",
        layout="dev_matched.tsv: 16-column header ending in 'gold_label'",
    ),
    "mnli-mm": TaskSpec(
        "MNLI-mm",
        NLI_LABELS,
        ("accuracy",),
        "gold_label",
        layout="dev_mismatched.tsv: 16-column header ending in 'gold_label'",
    ),
    "qnli": TaskSpec(
        "QNLI",
        TWO_WAY_NLI_LABELS,
        ("accuracy",),
        "label",
        layout="header 'index<TAB>question<TAB>sentence<TAB>label'",
    ),
    "rte": TaskSpec(
        "RTE",
        TWO_WAY_NLI_LABELS,
        ("accuracy",),
        "label",
        layout="header 'index<TAB>sentence1<TAB>sentence2<TAB>label'",
    ),
    "wnli": TaskSpec(
        "WNLI",
        BINARY_LABELS,
        ("accuracy",),
        "label",
        layout="header 'index<TAB>sentence1<TAB>sentence2<TAB>label'",
    ),
    "ax": TaskSpec(
        "AX",
        NLI_LABELS,
        ("mcc",),
        "Label",
        layout="diagnostic-full.tsv: header ending in 'Premise<TAB>Hypothesis<TAB>Label'",
    ),
    # The label column depends on the layout; see _xnli_label_column.
    "xnli": TaskSpec(
        "XNLI",
        NLI_LABELS,
        ("accuracy",),
        "label",
        layout="original XNLI header with 'language' and 'gold_label', or 'text_a<TAB>text_b<TAB>label'",
    ),
}

TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli-m": "mnli"}

# Google's XnliProcessor maps the XNLI-MT training label "contradictory" to "contradiction".
LABEL_ALIASES = {"xnli": {"contradictory": "contradiction"}}

DEFAULT_XNLI_LANGUAGE = "zh"
SUBMISSION_HEADER = ["index", "prediction"]


def task_key(task: str) -> str:
    """Canonical GLUE_TASKS key for a case-insensitive task name or alias."""
    key = task.strip().lower()
    key = TASK_ALIASES.get(key, key)
    if key not in GLUE_TASKS:
        valid = sorted(GLUE_TASKS) + sorted(TASK_ALIASES)
        raise BertPipelineError(f"unknown GLUE task {task!r}; valid tasks: {', '.join(valid)}")
    return key


def get_task(task: str) -> TaskSpec:
    return GLUE_TASKS[task_key(task)]


# ---------------------------------------------------------------------------------------------
# TSV reading
# ---------------------------------------------------------------------------------------------


def _iter_tsv(path: str | Path, what: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for every non-blank line, split on tabs only (QUOTE_NONE semantics)."""
    try:
        # Binary iteration splits on b"\n" only: a stray "\r" inside a field stays in that field.
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise BertPipelineError(f"{what} {path}, line {lineno}: not UTF-8 ({exc})") from exc
                if lineno == 1:
                    line = line.removeprefix("\ufeff")  # MRPC's dev.tsv starts with a BOM
                line = line.removesuffix("\n").removesuffix("\r")
                if not line.strip():
                    continue
                yield lineno, line.split("\t")
    except FileNotFoundError as exc:
        raise BertPipelineError(f"{what} not found: {path}") from exc
    except IsADirectoryError as exc:
        raise BertPipelineError(f"{what} {path} is a directory, expected a TSV file") from exc
    except PermissionError as exc:
        raise BertPipelineError(f"cannot read {what} {path}: {exc}") from exc


def _header_index(header: list[str], column: str, spec: TaskSpec, path: str | Path, lineno: int) -> int:
    if column not in header:
        raise BertPipelineError(
            f"gold file {path}, line {lineno}: no {column!r} column in the header {header!r}; "
            f"expected the GLUE {spec.name} dev layout ({spec.layout})"
        )
    return header.index(column)


def _gold_value(spec: TaskSpec, key: str, value: str, where: str, column: str) -> str | float:
    if spec.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise BertPipelineError(f"{where}: {column} {value!r} is not a number")
        return score
    value = LABEL_ALIASES.get(key, {}).get(value, value)
    if value not in spec.labels:
        raise BertPipelineError(
            f"{where}: {column} {value!r} is not a {spec.name} label; expected one of {', '.join(spec.labels)}"
        )
    return value


def read_gold_labels(task: str, path: str | Path, language: str | None = None) -> list[str | float]:
    """Gold labels of a GLUE dev TSV in file order (floats for STS-B).

    `language` selects the rows of the original multi-language XNLI file (default ``zh``); it is
    not used by the single-language Baidu/ERNIE layout and is an error for other tasks.
    """
    key = task_key(task)
    spec = GLUE_TASKS[key]
    if language is not None and key != "xnli":
        raise BertPipelineError(f"a language applies to XNLI only, not {spec.name}")
    rows = _iter_tsv(path, "gold file")
    labels: list[str | float] = []
    if spec.label_column is None:  # CoLA: no header
        for lineno, fields in rows:
            where = f"gold file {path}, line {lineno}"
            if len(fields) < spec.num_columns:
                raise BertPipelineError(
                    f"{where}: {len(fields)} tab-separated column(s), expected {spec.num_columns} "
                    f"({spec.layout})"
                )
            labels.append(_gold_value(spec, key, fields[spec.label_index], where, "label"))
        return labels

    first = next(rows, None)
    if first is None:
        raise BertPipelineError(f"gold file {path} is empty; expected the GLUE {spec.name} dev layout")
    header_line, header = first
    language_index = None
    column = spec.label_column
    if key == "xnli" and "language" in header:  # original XNLI: all languages in one file
        column = "gold_label"
        language_index = header.index("language")
        language = language or DEFAULT_XNLI_LANGUAGE
    index = _header_index(header, column, spec, path, header_line)
    # Label in the last column: take the last field, so a stray tab in a sentence does not shift it.
    last = index == len(header) - 1
    languages_seen: set[str] = set()
    for lineno, fields in rows:
        where = f"gold file {path}, line {lineno}"
        if len(fields) < len(header):
            raise BertPipelineError(
                f"{where}: {len(fields)} tab-separated column(s), expected {len(header)} as in the header"
            )
        if language_index is not None:
            languages_seen.add(fields[language_index])
            if fields[language_index] != language:
                continue
        labels.append(_gold_value(spec, key, fields[-1] if last else fields[index], where, column))
    if language_index is not None and not labels:
        raise BertPipelineError(
            f"gold file {path}: no rows with language {language!r}; languages present: "
            f"{', '.join(sorted(languages_seen)) or 'none'}"
        )
    return labels


def read_predictions(path: str | Path, task: str) -> list[str | float]:
    """Predictions from a GLUE submission TSV (`index<TAB>prediction`), validated against the task."""
    key = task_key(task)
    spec = GLUE_TASKS[key]
    rows = _iter_tsv(path, "prediction file")
    first = next(rows, None)
    if first is None or [f.strip() for f in first[1]] != SUBMISSION_HEADER:
        got = "nothing" if first is None else repr("\t".join(first[1]))
        raise BertPipelineError(
            f"prediction file {path}: expected the GLUE submission header 'index<TAB>prediction', got {got}"
        )
    preds: list[str | float] = []
    for lineno, fields in rows:
        where = f"prediction file {path}, line {lineno}"
        if len(fields) != 2:
            raise BertPipelineError(
                f"{where}: {len(fields)} tab-separated column(s), expected 2 (index, prediction)"
            )
        index, value = fields[0].strip(), fields[1].strip()
        if index != str(len(preds)):
            raise BertPipelineError(
                f"{where}: index {index!r}, expected {len(preds)} (one row per gold example, in gold file "
                "order, indexed from 0)"
            )
        preds.append(_gold_value(spec, key, value, where, "prediction"))
    return preds


# ---------------------------------------------------------------------------------------------
# Metrics (numpy; same semantics as sklearn/scipy)
# ---------------------------------------------------------------------------------------------


def accuracy(golds: Sequence, preds: Sequence) -> float:
    return sum(1 for g, p in zip(golds, preds, strict=True) if g == p) / len(golds)


def binary_f1(golds: Sequence[str], preds: Sequence[str], positive: str = POSITIVE_LABEL) -> float:
    """sklearn `f1_score(average='binary')`: 2TP / (2TP + FP + FN), 0.0 when there is no positive at all."""
    tp = sum(1 for g, p in zip(golds, preds, strict=True) if g == positive and p == positive)
    fp = sum(1 for g, p in zip(golds, preds, strict=True) if g != positive and p == positive)
    fn = sum(1 for g, p in zip(golds, preds, strict=True) if g == positive and p != positive)
    denominator = 2 * tp + fp + fn
    return 2 * tp / denominator if denominator else 0.0


def matthews_corrcoef(golds: Sequence[str], preds: Sequence[str]) -> float:
    """sklearn's multi-class Matthews correlation (R_K), 0.0 when undefined (a constant side)."""
    labels = sorted(set(golds) | set(preds))
    index = {label: i for i, label in enumerate(labels)}
    confusion = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(confusion, ([index[g] for g in golds], [index[p] for p in preds]), 1)
    # float64 like sklearn, so the products cannot overflow on large files.
    t_sum = confusion.sum(axis=1, dtype=np.float64)
    p_sum = confusion.sum(axis=0, dtype=np.float64)
    n_correct = np.trace(confusion, dtype=np.float64)
    n_samples = p_sum.sum()
    cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
    cov_ypyp = n_samples**2 - np.dot(p_sum, p_sum)
    cov_ytyt = n_samples**2 - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ypyp * cov_ytyt))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """scipy's `pearsonr` statistic; NaN when either side is constant (undefined, as in scipy)."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if len(xa) < 2 or np.all(xa == xa[0]) or np.all(ya == ya[0]):
        return math.nan
    xm = xa - xa.mean()
    ym = ya - ya.mean()
    # Scale by the max before the norm, as scipy does, so large values cannot overflow.
    xmax = np.max(np.abs(xm))
    ymax = np.max(np.abs(ym))
    normxm = xmax * np.linalg.norm(xm / xmax)
    normym = ymax * np.linalg.norm(ym / ymax)
    r = np.dot(xm / normxm, ym / normym)
    return float(np.clip(r, -1.0, 1.0))


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """scipy `rankdata(method='average')`: ranks from 1, ties share the mean of their ranks."""
    a = np.asarray(values, dtype=np.float64)
    sorter = np.argsort(a, kind="mergesort")
    inverse = np.empty(len(a), dtype=np.intp)
    inverse[sorter] = np.arange(len(a), dtype=np.intp)
    a_sorted = a[sorter]
    first_of_group = np.r_[True, a_sorted[1:] != a_sorted[:-1]]
    dense = first_of_group.cumsum()[inverse]
    bounds = np.r_[np.nonzero(first_of_group)[0], len(a)]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """scipy's `spearmanr` statistic: Pearson correlation of the average ranks."""
    return pearson(average_ranks(x), average_ranks(y))


def glue_metrics(task: str, golds: Sequence, preds: Sequence) -> dict[str, float]:
    """The task's metrics, in GLUE_TASKS order, as Python floats."""
    spec = get_task(task)
    if len(golds) != len(preds):
        raise BertPipelineError(f"{len(golds)} gold labels but {len(preds)} predictions")
    if not golds:
        raise BertPipelineError(f"no {spec.name} examples to score")
    compute = {
        "accuracy": accuracy,
        "f1": binary_f1,
        "mcc": matthews_corrcoef,
        "pearson": pearson,
        "spearman": spearman,
    }
    return {name: float(compute[name](golds, preds)) for name in spec.metrics}


def evaluate_glue_files(
    task: str, gold_tsv: str | Path, pred_tsv: str | Path, language: str | None = None
) -> dict[str, float]:
    """Read a gold dev TSV and a GLUE submission TSV and score them."""
    golds = read_gold_labels(task, gold_tsv, language=language)
    preds = read_predictions(pred_tsv, task)
    if len(golds) != len(preds):
        raise BertPipelineError(
            f"prediction file {pred_tsv} has {len(preds)} rows but gold file {gold_tsv} has {len(golds)} "
            "examples; the submission needs one row per gold example, in order"
        )
    return glue_metrics(task, golds, preds)
