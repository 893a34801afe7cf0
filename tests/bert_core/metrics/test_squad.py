"""SQuAD scoring equals the official evaluate-v1.1.py / evaluate-v2.0.py, byte for byte.

The golden outputs in tests/fixtures/squad/expected were produced by the official scripts; see the
README there for the naming scheme.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError
from bert_core.metrics import squad
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "squad"
EXPECTED = sorted((FIXTURES / "expected").glob("*.json"))
NAME = re.compile(
    r"^v(?P<version>1\.1|2\.0)-(?P<case>\w+?)(?P<na>-with-na-prob)?(?:-thresh-(?P<thresh>[\d.]+))?$"
)


def golden_case(expected: Path) -> dict:
    """Inputs of one golden output, from its file name (e.g. v2.0-mixed-with-na-prob-thresh-0.5.json)."""
    m = NAME.match(expected.stem)
    assert m, expected.name
    version, case = m["version"], m["case"]
    return {
        "data_json": FIXTURES / f"data-v{version}.json",
        "pred_json": FIXTURES / f"pred-v{version}-{case}.json",
        "na_prob_file": FIXTURES / f"na-prob-v{version}-{case}.json" if m["na"] else None,
        "na_prob_thresh": float(m["thresh"]) if m["thresh"] else 1.0,
    }


def golden_stderr(expected: Path) -> str:
    path = expected.with_suffix(".stderr")
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_every_golden_file_is_covered() -> None:
    # 5 v1.1 cases; 4 v2.0 cases x (no na-prob, na-prob, na-prob + thresh 0.5).
    assert len(EXPECTED) == 17
    for expected in EXPECTED:
        for value in golden_case(expected).values():
            assert not isinstance(value, Path) or value.exists(), value


@pytest.mark.parametrize("expected", EXPECTED, ids=lambda p: p.stem)
def test_file_scoring_prints_exactly_the_official_output(
    expected: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scored = squad.score_squad_file(**golden_case(expected), strict=True)
    out = squad.format_like_official(scored.result, scored.version)
    captured = capsys.readouterr()
    assert out.rstrip("\n") == expected.read_text(encoding="utf-8").rstrip("\n")
    assert captured.err.rstrip("\n") == golden_stderr(expected).rstrip("\n")
    assert captured.out == ""


@pytest.mark.parametrize("expected", EXPECTED, ids=lambda p: p.stem)
def test_in_memory_api_equals_file_api(expected: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = golden_case(expected)
    data = json.loads(case["data_json"].read_text(encoding="utf-8"))
    preds = json.loads(case["pred_json"].read_text(encoding="utf-8"))
    golden = json.loads(expected.read_text(encoding="utf-8"))
    if data["version"] == "1.1":
        result = squad.evaluate_squad_v1(data["data"], preds)
    else:
        na_probs = None
        if case["na_prob_file"]:
            na_probs = json.loads(case["na_prob_file"].read_text(encoding="utf-8"))
        result = squad.evaluate_squad_v2(data, preds, na_probs, case["na_prob_thresh"])
    assert list(result.items()) == list(golden.items())  # same keys, same order, same values
    assert squad.evaluate_squad_file(**case) == result


def test_format_like_official() -> None:
    assert squad.format_like_official({"exact_match": 50.0, "f1": 62.5}, "1.1") == (
        '{"exact_match": 50.0, "f1": 62.5}\n'
    )
    assert squad.format_like_official({"exact": 1.0, "total": 2}, "v2.0") == (
        '{\n  "exact": 1.0,\n  "total": 2\n}\n'
    )


# --- normalisation and per-answer metrics ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The  Cat!", "cat"),
        ("an apple a day", "apple day"),
        ("theatre, anthem", "theatre anthem"),  # articles only as whole words
        (
            "“pâté en croûte”",
            "“pâté en croûte”",
        ),  # no accent stripping; curly quotes are not ASCII punctuation
        ("40,000 passengers.", "40000 passengers"),
        ("A", ""),
    ],
)
def test_normalize_answer(text: str, normalized: str) -> None:
    assert squad.normalize_answer(text) == normalized


def test_v1_and_v2_per_answer_metrics_differ_only_on_empty_answers() -> None:
    assert squad.f1_score_v1("in 1887", "1887") == pytest.approx(2 / 3)
    assert squad.compute_f1("1887", "in 1887") == pytest.approx(2 / 3)
    assert squad.exact_match_score_v1("The Gull", "gull") is True
    assert squad.compute_exact("The Gull", "gull") == 1
    # v2.0: an empty prediction matches an empty gold answer; v1.1 gives F1 0.
    assert squad.compute_f1("", "") == 1
    assert squad.f1_score_v1("", "") == 0
    assert squad.compute_f1("", "something") == 0


def test_find_best_thresh_follows_na_prob_order() -> None:
    has_ans = {"a": True, "b": False, "c": True}
    preds = {"a": "x", "b": "y", "c": "z"}
    exact = {"a": 1, "b": 0, "c": 0}
    na_probs = {"c": 0.9, "a": 0.1, "b": 0.5}
    # Start at 1 (answer nothing: b right). a (+1) -> 2 at 0.1; b (-1) -> 1; c (+0) -> 1.
    assert squad.find_best_thresh(preds, exact, na_probs, has_ans) == (100.0 * 2 / 3, 0.1)


# --- versions ----------------------------------------------------------------------------------


def test_version_detection(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "data-v2.0.json").read_text(encoding="utf-8"))
    assert squad.detect_version(data) == "2.0"
    del data["version"]
    assert squad.detect_version(data) == "2.0"  # from is_impossible
    v1 = json.loads((FIXTURES / "data-v1.1.json").read_text(encoding="utf-8"))
    del v1["version"]
    assert squad.detect_version(v1) == "1.1"
    assert squad.normalize_version("v2.0") == "2.0"
    with pytest.raises(BertPipelineError, match="unknown SQuAD version"):
        squad.normalize_version("3.0")
    with pytest.raises(
        BertPipelineError, match=r"dev.json: its 'version' field is '11', expected 1.1 or 2.0"
    ):
        squad.detect_version({**v1, "version": "11"}, "dev.json")


def test_file_without_version_field_is_inferred(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((FIXTURES / "data-v2.0.json").read_text(encoding="utf-8"))
    del data["version"]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    scored = squad.score_squad_file(path, FIXTURES / "pred-v2.0-mixed.json")
    assert scored.version == "2.0"
    assert squad.format_like_official(scored.result, "2.0") == (
        (FIXTURES / "expected" / "v2.0-mixed.json").read_text(encoding="utf-8")
    )


def test_forced_v1_on_v2_data_warns_like_official_then_fails_clearly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(BertPipelineError, match="'h6' has no gold answers"):
        squad.score_squad_file(FIXTURES / "data-v2.0.json", FIXTURES / "pred-v2.0-exact.json", version="1.1")
    assert "Evaluation expects v-1.1, but got dataset with v-v2.0" in capsys.readouterr().err


def test_forced_v2_on_v1_data() -> None:
    scored = squad.score_squad_file(
        FIXTURES / "data-v1.1.json", FIXTURES / "pred-v1.1-exact.json", version="2.0"
    )
    assert scored.version == "2.0"
    assert scored.result["exact"] == 100.0 and scored.result["total"] == 11
    assert "NoAns_total" not in scored.result  # no unanswerable questions, no NoAns breakdown


def test_na_prob_options_are_v2_only() -> None:
    with pytest.raises(BertPipelineError, match="SQuAD v2.0 only"):
        squad.score_squad_file(
            FIXTURES / "data-v1.1.json",
            FIXTURES / "pred-v1.1-exact.json",
            na_prob_file=FIXTURES / "na-prob-v2.0-exact.json",
        )
    with pytest.raises(BertPipelineError, match="SQuAD v2.0 only"):
        squad.score_squad_file(
            FIXTURES / "data-v1.1.json", FIXTURES / "pred-v1.1-exact.json", na_prob_thresh=0.5
        )


# --- bad input ---------------------------------------------------------------------------------


def write(tmp_path: Path, name: str, content: object) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_data_file_that_is_not_json(tmp_path: Path) -> None:
    bad = write(tmp_path, "dev.json", '{"data": [\n  oops')
    with pytest.raises(BertPipelineError, match=r"SQuAD data file .*dev.json is not valid JSON \(line 2"):
        squad.evaluate_squad_file(bad, FIXTURES / "pred-v1.1-exact.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([1, 2], "expected a JSON object with a 'data' list"),
        ({"version": "1.1", "data": {}}, "'data' is not a list of articles"),
        ({"version": "1.1", "data": [{"title": "x"}]}, r"data\[0\] has no 'paragraphs' list"),
        ({"data": [{"paragraphs": [{"context": "c"}]}]}, r"data\[0\].paragraphs\[0\] has no 'qas' list"),
        ({"data": [{"paragraphs": [{"qas": [{"question": "q"}]}]}]}, r"qas\[0\] has no string 'id'"),
        ({"data": [{"paragraphs": [{"qas": [{"id": "q1", "answers": ["x"]}]}]}]}, r"id 'q1'.*'answers'"),
    ],
)
def test_data_file_that_is_not_squad(tmp_path: Path, content: object, message: str) -> None:
    bad = write(tmp_path, "dev.json", content)
    with pytest.raises(BertPipelineError, match=message) as info:
        squad.evaluate_squad_file(bad, FIXTURES / "pred-v1.1-exact.json")
    assert str(bad) in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (["1887"], "expected a JSON object mapping question id to answer text, got a list"),
        ({"h1": 1887}, "the prediction for id 'h1' is a int, expected a string"),
        ({"h1": None}, "the prediction for id 'h1' is a NoneType"),
    ],
)
def test_prediction_file_that_is_not_an_id_to_text_object(
    tmp_path: Path, content: object, message: str
) -> None:
    bad = write(tmp_path, "pred.json", content)
    with pytest.raises(BertPipelineError, match=message) as info:
        squad.evaluate_squad_file(FIXTURES / "data-v1.1.json", bad)
    assert str(bad) in str(info.value)


def test_missing_files_are_named() -> None:
    with pytest.raises(BertPipelineError, match="SQuAD data file not found: .*nope.json"):
        squad.evaluate_squad_file("nope.json", FIXTURES / "pred-v1.1-exact.json")
    with pytest.raises(BertPipelineError, match="prediction file not found: .*nope.json"):
        squad.evaluate_squad_file(FIXTURES / "data-v1.1.json", "nope.json")


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_unknown_prediction_ids(
    tmp_path: Path, version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    preds = json.loads((FIXTURES / f"pred-v{version}-exact.json").read_text(encoding="utf-8"))
    expected = squad.evaluate_squad_file(
        FIXTURES / f"data-v{version}.json", FIXTURES / f"pred-v{version}-exact.json"
    )
    extra = {**preds, **{f"zz{i}": "x" for i in range(7)}}
    path = write(tmp_path, "pred.json", extra)
    with pytest.raises(BertPipelineError) as info:
        squad.evaluate_squad_file(FIXTURES / f"data-v{version}.json", path, strict=True)
    message = str(info.value)
    assert "7 prediction id(s) are not in the dataset" in message
    assert "'zz0', 'zz1', 'zz2', 'zz3', 'zz4' and 2 more" in message and "zz5" not in message
    assert "--strict" in message
    # Not strict: ignored as the official scripts ignore them, with a line on stderr that counts them.
    capsys.readouterr()
    result = squad.evaluate_squad_file(FIXTURES / f"data-v{version}.json", path)
    assert result == expected
    assert "7 prediction id(s) are not in the dataset and are ignored" in capsys.readouterr().err


def test_v2_missing_predictions_are_reported_then_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preds = json.loads((FIXTURES / "pred-v2.0-exact.json").read_text(encoding="utf-8"))
    del preds["h2"], preds["c4"]
    path = write(tmp_path, "pred.json", preds)
    with pytest.raises(
        BertPipelineError, match=r"2 of 16 questions have no prediction: 'h2', 'c4'.*KeyError"
    ):
        squad.evaluate_squad_file(FIXTURES / "data-v2.0.json", path)
    # The official script's own lines, on stderr since stdout carries only the JSON.
    assert capsys.readouterr().err == "Missing prediction for h2\nMissing prediction for c4\n"


def test_na_prob_file_problems(tmp_path: Path) -> None:
    na = json.loads((FIXTURES / "na-prob-v2.0-mixed.json").read_text(encoding="utf-8"))
    del na["g1"]
    path = write(tmp_path, "na.json", na)
    with pytest.raises(
        BertPipelineError,
        match=r"na-prob file .*na.json: 1 question\(s\) have no no-answer probability: 'g1'",
    ):
        squad.evaluate_squad_file(
            FIXTURES / "data-v2.0.json", FIXTURES / "pred-v2.0-mixed.json", na_prob_file=path
        )
    path = write(tmp_path, "na2.json", {**na, "g1": "high"})
    with pytest.raises(BertPipelineError, match="the value for id 'g1' is 'high', expected a number"):
        squad.evaluate_squad_file(
            FIXTURES / "data-v2.0.json", FIXTURES / "pred-v2.0-mixed.json", na_prob_file=path
        )


def test_na_prob_thresholds_keep_the_file_values_type(tmp_path: Path) -> None:
    # json.load keeps an integer 0 an int, so the official output prints 0 where a float would print 0.0.
    no_answer = {"h6", "h7", "g4", "c4"}
    preds = json.loads((FIXTURES / "pred-v2.0-always_answer.json").read_text(encoding="utf-8"))
    path = write(tmp_path, "na.json", {qid: int(qid in no_answer) for qid in preds})
    result = squad.evaluate_squad_file(
        FIXTURES / "data-v2.0.json", FIXTURES / "pred-v2.0-always_answer.json", path
    )
    text = squad.format_like_official(result, "2.0")
    assert '"best_exact": 100.0,\n  "best_exact_thresh": 0,' in text
