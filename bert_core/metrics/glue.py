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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bert_core.errors import BertPipelineError
from bert_core.tasks import glue as tasks

SUBMISSION_HEADER = ["index", "prediction"]
POSITIVE_LABEL = "1"  # F1 of MRPC and QQP is the F1 of this label

# Task files, labels and names are bert_core's (one reader for training and scoring); metrics are ours.
GLUE_TASKS = tasks.GLUE_TASKS
TASK_ALIASES = tasks.TASK_ALIASES
DEFAULT_XNLI_LANGUAGE = tasks.DEFAULT_XNLI_LANGUAGE
task_key = tasks.task_key
get_task = tasks.get_task

TASK_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",), "sst-2": ("accuracy",), "mrpc": ("accuracy", "f1"), "sts-b": ("pearson", "spearman"),
    "qqp": ("accuracy", "f1"), "mnli": ("accuracy",), "mnli-mm": ("accuracy",), "qnli": ("accuracy",),
    "rte": ("accuracy",), "wnli": ("accuracy",), "ax": ("mcc",), "xnli": ("accuracy",),
}


def read_gold_labels(task: str, path: str | Path, language: str | None = None) -> list[str | float]:
    """Gold labels of a GLUE dev TSV in file order (floats for STS-B); an error for a file without labels."""
    examples = tasks.read_examples(task, path, language=language, what="gold file")
    if examples and examples[0].label is None:
        spec = get_task(task)
        raise BertPipelineError(f"gold file {path} has no {spec.label_column!r} column: a test file has no "
                                f"gold labels (expected the GLUE {spec.name} dev layout: {spec.layout})")
    return [ex.label for ex in examples]


def read_predictions(path: str | Path, task: str) -> list[str | float]:
    """Predictions from a GLUE submission TSV (`index<TAB>prediction`), validated against the task."""
    key = task_key(task)
    spec = GLUE_TASKS[key]
    rows = tasks.iter_tsv(path, "prediction file")
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
        preds.append(tasks.parse_label(spec, key, value, where, "prediction"))
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
    return {name: float(compute[name](golds, preds)) for name in TASK_METRICS[task_key(task)]}


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
