"""GLUE/XNLI readers and metrics: hand-computed values on GLUE-layout fixtures, plus a cross-check
against sklearn/scipy where those are installed."""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

import numpy as np
import pytest

from bert_core.errors import BertPipelineError
from bert_core.metrics import glue
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "glue"

# task, gold file, prediction file, metrics worked out by hand (see the comments).
HAND_COMPUTED = [
    # TP=4 TN=2 FP=1 FN=1: (4*2 - 1*1) / sqrt(5*5*3*3) = 7/15
    ("CoLA", "CoLA/dev.tsv", "CoLA/predictions.tsv", {"mcc": 7 / 15}),
    ("SST-2", "SST-2/dev.tsv", "SST-2/predictions.tsv", {"accuracy": 4 / 5}),
    # 4 of 6 right; TP=2 FP=1 FN=1: F1 = 4 / (4 + 1 + 1)
    ("MRPC", "MRPC/dev.tsv", "MRPC/predictions.tsv", {"accuracy": 4 / 6, "f1": 2 / 3}),
    # gold 0,1,2.5,4,5 vs 0.5,1.5,2,4.5,4.5: sum dxdy 14.5, sum dx^2 17, sum dy^2 13.2;
    # ranks 1..5 vs 1,2,3,4.5,4.5: 9.5 / sqrt(10 * 9.5)
    (
        "STS-B",
        "STS-B/dev.tsv",
        "STS-B/predictions.tsv",
        {"pearson": 14.5 / math.sqrt(17 * 13.2), "spearman": math.sqrt(0.95)},
    ),
    # 3 of 4; TP=1 FP=0 FN=1
    ("QQP", "QQP/dev.tsv", "QQP/predictions.tsv", {"accuracy": 3 / 4, "f1": 2 / 3}),
    ("MNLI", "MNLI/dev_matched.tsv", "MNLI/predictions_matched.tsv", {"accuracy": 3 / 4}),
    ("MNLI-mm", "MNLI/dev_mismatched.tsv", "MNLI/predictions_mismatched.tsv", {"accuracy": 2 / 3}),
    ("QNLI", "QNLI/dev.tsv", "QNLI/predictions.tsv", {"accuracy": 3 / 4}),
    ("RTE", "RTE/dev.tsv", "RTE/predictions.tsv", {"accuracy": 1.0}),
    ("WNLI", "WNLI/dev.tsv", "WNLI/predictions.tsv", {"accuracy": 2 / 3}),
    # 3 classes, n=6, 4 right; true counts 2,2,2, predicted 1,2,3:
    # (4*6 - 12) / sqrt((36 - 14) * (36 - 12))
    ("AX", "AX/diagnostic-full.tsv", "AX/predictions.tsv", {"mcc": 12 / math.sqrt(22 * 24)}),
    ("XNLI", "XNLI/xnli.dev.tsv", "XNLI/predictions_zh.tsv", {"accuracy": 2 / 3}),
    ("XNLI", "XNLI/dev_ernie.tsv", "XNLI/predictions_ernie.tsv", {"accuracy": 3 / 4}),
]


@pytest.mark.parametrize(("task", "gold", "pred", "expected"), HAND_COMPUTED, ids=lambda v: str(v))
def test_hand_computed_metrics(task: str, gold: str, pred: str, expected: dict[str, float]) -> None:
    metrics = glue.evaluate_glue_files(task, FIXTURES / gold, FIXTURES / pred)
    assert list(metrics) == list(expected)  # names and order of the task's metrics
    assert metrics == pytest.approx(expected, abs=1e-12)
    assert all(type(v) is float for v in metrics.values())


def test_every_task_has_a_hand_computed_case() -> None:
    covered = {glue.task_key(task) for task, *_ in HAND_COMPUTED}
    assert covered == set(glue.GLUE_TASKS)


def test_task_names_are_case_insensitive_with_aliases() -> None:
    assert glue.task_key("SST2") == glue.task_key("sst-2") == "sst-2"
    assert glue.task_key("StsB") == "sts-b"
    assert glue.task_key("MNLI-M") == "mnli"
    assert glue.task_key("mnli-mm") == "mnli-mm"
    with pytest.raises(BertPipelineError, match=r"unknown GLUE task 'squad'; valid tasks: ax, cola, .*xnli"):
        glue.task_key("squad")


def test_metric_names_per_task() -> None:
    names = dict(glue.TASK_METRICS)
    assert set(names) == set(glue.GLUE_TASKS)
    assert names["cola"] == names["ax"] == ("mcc",)
    assert names["mrpc"] == names["qqp"] == ("accuracy", "f1")
    assert names["sts-b"] == ("pearson", "spearman")
    for key in ("sst-2", "mnli", "mnli-mm", "qnli", "rte", "wnli", "xnli"):
        assert names[key] == ("accuracy",)


# --- readers -----------------------------------------------------------------------------------


def test_mrpc_reader_handles_bom_and_stray_quotes() -> None:
    path = FIXTURES / "MRPC" / "dev.tsv"
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    # The fixture is built so that default csv quoting mis-reads it (a quote opens a field that spans
    # lines); the reader must not.
    with open(path, encoding="utf-8-sig", newline="") as f:
        assert len(list(csv.reader(f, delimiter="\t"))) != 7
    assert glue.read_gold_labels("mrpc", path) == ["1", "0", "0", "1", "1", "0"]


def test_gold_readers() -> None:
    assert glue.read_gold_labels("cola", FIXTURES / "CoLA" / "dev.tsv") == [
        "1",
        "1",
        "0",
        "1",
        "0",
        "1",
        "1",
        "0",
    ]
    assert glue.read_gold_labels("sts-b", FIXTURES / "STS-B" / "dev.tsv") == [0.0, 1.0, 2.5, 4.0, 5.0]
    assert glue.read_gold_labels("ax", FIXTURES / "AX" / "diagnostic-full.tsv")[:2] == ["entailment"] * 2
    assert glue.read_gold_labels("xnli", FIXTURES / "XNLI" / "dev_ernie.tsv") == [
        "entailment",
        "contradiction",
        "neutral",
        "contradiction",
    ]


def test_xnli_original_layout_filters_language() -> None:
    path = FIXTURES / "XNLI" / "xnli.dev.tsv"
    assert glue.read_gold_labels("xnli", path) == ["entailment", "contradiction", "neutral"]  # zh default
    assert glue.read_gold_labels("xnli", path, language="en") == ["neutral"]
    assert glue.evaluate_glue_files(
        "xnli", path, FIXTURES / "XNLI" / "predictions_en.tsv", language="en"
    ) == {"accuracy": 1.0}
    with pytest.raises(BertPipelineError, match=r"no rows with language 'fr'; languages present: de, en, zh"):
        glue.read_gold_labels("xnli", path, language="fr")
    with pytest.raises(BertPipelineError, match="a language applies to XNLI only"):
        glue.read_gold_labels("mnli", FIXTURES / "MNLI" / "dev_matched.tsv", language="en")


def test_xnli_contradictory_alias(tmp_path: Path) -> None:
    gold = tmp_path / "dev.tsv"
    gold.write_text("text_a\ttext_b\tlabel\n甲\t乙\tcontradictory\n", encoding="utf-8")
    assert glue.read_gold_labels("xnli", gold) == ["contradiction"]


def test_read_predictions() -> None:
    assert glue.read_predictions(FIXTURES / "STS-B" / "predictions.tsv", "stsb") == [0.5, 1.5, 2.0, 4.5, 4.5]
    assert glue.read_predictions(FIXTURES / "RTE" / "predictions.tsv", "rte") == [
        "entailment",
        "not_entailment",
    ]


# --- bad input ---------------------------------------------------------------------------------


def tsv(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_row_count_mismatch_names_both_files_and_counts(tmp_path: Path) -> None:
    pred = tsv(tmp_path, "pred.tsv", "index\tprediction\n0\t1\n1\t0\n")
    gold = FIXTURES / "SST-2" / "dev.tsv"
    with pytest.raises(BertPipelineError) as info:
        glue.evaluate_glue_files("sst-2", gold, pred)
    message = str(info.value)
    assert f"prediction file {pred} has 2 rows but gold file {gold} has 5 examples" in message


def test_index_must_count_from_zero_in_order(tmp_path: Path) -> None:
    pred = tsv(tmp_path, "pred.tsv", "index\tprediction\n0\t1\n2\t0\n")
    with pytest.raises(BertPipelineError, match=r"pred.tsv, line 3: index '2', expected 1"):
        glue.read_predictions(pred, "sst-2")


def test_prediction_label_outside_the_task_labels(tmp_path: Path) -> None:
    pred = tsv(tmp_path, "pred.tsv", "index\tprediction\n0\tentailment\n1\tmaybe\n")
    with pytest.raises(
        BertPipelineError,
        match=r"pred.tsv, line 3: prediction 'maybe' is not a RTE label; expected one of entailment, not_entailment",
    ):
        glue.read_predictions(pred, "rte")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected the GLUE submission header 'index<TAB>prediction', got nothing"),
        (
            "id\tlabel\n0\t1\n",
            "expected the GLUE submission header 'index<TAB>prediction', got 'id\\\\tlabel'",
        ),
        ("index\tprediction\n0\t1\t1\n", "line 2: 3 tab-separated column"),
        # A blank row would drop a prediction silently and shift the rest against the gold rows.
        ("index\tprediction\n0\t1\n\t\n1\t0\n", r"pred.tsv, line 3: blank line before the row at line 4"),
    ],
)
def test_bad_prediction_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BertPipelineError, match=message):
        glue.read_predictions(tsv(tmp_path, "pred.tsv", text), "sst-2")


def test_sts_b_prediction_must_be_a_number(tmp_path: Path) -> None:
    pred = tsv(tmp_path, "pred.tsv", "index\tprediction\n0\t4.5\n1\tnan\n")
    with pytest.raises(BertPipelineError, match=r"line 3: prediction 'nan' is not a number"):
        glue.read_predictions(pred, "sts-b")


@pytest.mark.parametrize(
    ("task", "text", "message"),
    [
        (
            "sst-2",
            "sentence\tlabel\ngood . \t1\nbad . \n",
            r"line 3: 1 tab-separated column\(s\), expected 2 \(header ",
        ),
        (
            "sst-2",
            "sentence\tlabel\ngood . \t7\n",
            r"line 2: label '7' is not a SST-2 label; expected one of 0, 1",
        ),
        (
            "sst-2",
            "text\tsentiment\ngood\t1\n",
            r"line 1: no 'sentence' column in the header .* GLUE SST-2 layout",
        ),
        ("cola", "ab01\t1\tThe cat sat.\n", r"line 1: 3 tab-separated column\(s\), expected 4 \(no header"),
        ("sts-b", "sentence1\tsentence2\tscore\na\tb\thigh\n", r"line 2: score 'high' is not a number"),
        ("mnli", "", "is empty; expected the GLUE MNLI layout"),
        ("mrpc", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n \n0\t3\t4\tc\td\n",
         r"line 3: blank line before the row at line 4"),
        (
            "xnli",
            "premise\thypothesis\tgold\na\tb\tneutral\n",
            r"line 1: no 'hypo' column .* XNLI layout",
        ),
    ],
)
def test_malformed_gold_rows_name_file_and_line(tmp_path: Path, task: str, text: str, message: str) -> None:
    gold = tsv(tmp_path, "dev.tsv", text)
    with pytest.raises(BertPipelineError, match=message) as info:
        glue.read_gold_labels(task, gold)
    assert str(gold) in str(info.value)


def test_missing_gold_file() -> None:
    with pytest.raises(BertPipelineError, match="gold file not found: nope.tsv"):
        glue.read_gold_labels("rte", "nope.tsv")


def test_glue_metrics_length_mismatch_and_empty() -> None:
    with pytest.raises(BertPipelineError, match="3 gold labels but 2 predictions"):
        glue.glue_metrics("sst-2", ["0", "1", "1"], ["0", "1"])
    with pytest.raises(BertPipelineError, match="no SST-2 examples"):
        glue.glue_metrics("sst-2", [], [])


# --- metric functions, hand-computed --------------------------------------------------------------


def test_mcc_edge_cases() -> None:
    assert glue.matthews_corrcoef(["1", "0", "1", "0"], ["1", "0", "1", "0"]) == 1.0
    assert glue.matthews_corrcoef(["1", "0", "1", "0"], ["0", "1", "0", "1"]) == -1.0
    # Undefined (a constant side): 0.0, as sklearn returns.
    assert glue.matthews_corrcoef(["1", "0", "1", "0"], ["1", "1", "1", "1"]) == 0.0
    assert glue.matthews_corrcoef(["1", "1"], ["1", "1"]) == 0.0


def test_binary_f1_edge_cases() -> None:
    assert glue.binary_f1(["0", "0"], ["0", "0"]) == 0.0  # no positives anywhere: sklearn's zero_division 0
    assert glue.binary_f1(["1", "0"], ["0", "0"]) == 0.0
    assert glue.binary_f1(["1", "1", "0"], ["1", "0", "1"]) == 0.5


def test_correlations_hand_computed() -> None:
    assert glue.average_ranks([10, 20, 20, 30, 20]).tolist() == [1.0, 3.0, 3.0, 5.0, 3.0]
    assert glue.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert glue.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert glue.spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)  # monotone, not linear
    # Constant predictions: undefined, NaN as scipy returns.
    assert math.isnan(glue.pearson([1, 2, 3], [2, 2, 2]))
    assert math.isnan(glue.spearman([1, 2, 3], [2, 2, 2]))


# --- cross-check against sklearn/scipy ----------------------------------------


def test_metrics_match_sklearn_and_scipy_on_random_inputs() -> None:
    from scipy import stats
    from sklearn import metrics as sk

    rng = random.Random(1234)
    for trial in range(40):
        n = rng.randint(2, 300)
        k = rng.choice([2, 3])
        labels = ["contradiction", "entailment", "neutral"][:k] if k == 3 else ["0", "1"]
        golds = [rng.choice(labels) for _ in range(n)]
        # Mostly-right predictions, so correlations are spread over their range.
        preds = [g if rng.random() < rng.random() else rng.choice(labels) for g in golds]
        assert glue.accuracy(golds, preds) == pytest.approx(sk.accuracy_score(golds, preds), abs=1e-12)
        assert glue.matthews_corrcoef(golds, preds) == pytest.approx(
            sk.matthews_corrcoef(golds, preds), abs=1e-12
        )
        if k == 2:
            assert glue.binary_f1(golds, preds) == pytest.approx(
                sk.f1_score(golds, preds, pos_label="1", zero_division=0), abs=1e-12
            )
        # STS-B-like scores: rounded so there are ties, and on a large scale for the spread.
        x = np.round(np.array([rng.uniform(0, 5) for _ in range(n)]), 1 if trial % 2 else 3)
        y = np.round(x + np.array([rng.gauss(0, 1) for _ in range(n)]) * 1e3 ** (trial % 3 - 1), 1)
        if np.all(y == y[0]):
            continue
        assert glue.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
        assert glue.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
        assert glue.average_ranks(y).tolist() == stats.rankdata(y).tolist()
