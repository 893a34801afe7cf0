"""CoNLL reading and conlleval-equivalent entity scoring (hand-computed expectations)."""

import json

import pytest

from bert_core.errors import BertPipelineError
from bert_core.metrics.ner import chunks, evaluate_ner_files, ner_metrics
from bert_core.tasks.conll import read_conll, to_iob2, write_predictions
from bert_pipeline.cli import main
from tests.paths import FIXTURES

DEV = FIXTURES / "conll" / "dev.txt"


def test_reader_skips_docstart_and_keeps_iob1_tags():
    sentences = read_conll(DEV)
    assert [len(s.words) for s in sentences] == [5, 7, 3]
    assert sentences[1].tags == ("O", "I-ORG", "I-ORG", "O", "I-PER", "B-PER", "O")
    assert sentences[0].line == 3


def test_iob1_to_iob2_and_chunks_agree():
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]
    assert to_iob2(iob1) == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    assert chunks(iob1) == chunks(to_iob2(iob1)) == {(0, 2, "PER"), (2, 3, "PER"), (4, 5, "LOC"), (5, 6, "ORG")}


def test_conlleval_semantics():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG", "O"]]
    # Correct: the PER only. Boundaries must match exactly (ORG is cut short), types too (LOC vs ORG).
    m = ner_metrics(gold, pred)
    assert m["precision"] == pytest.approx(1 / 3) and m["recall"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(1 / 3) and m["accuracy"] == pytest.approx(5 / 7)
    # An I- tag after O starts an entity (conlleval), and a type change ends one.
    assert chunks(["O", "I-PER", "I-LOC"]) == {(1, 2, "PER"), (2, 3, "LOC")}
    assert ner_metrics([["O", "O"]], [["O", "O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 1.0}


def test_files_and_cli(tmp_path, capsys):
    sentences = read_conll(DEV)
    predicted = [list(s.tags) for s in sentences]
    predicted[1][5] = "I-PER"  # merges "Kofi" and "Jonas" into one PER: two gold entities missed, one wrong
    write_predictions(tmp_path / "pred.txt", sentences, predicted)
    m = evaluate_ner_files(DEV, tmp_path / "pred.txt")
    # gold: PER, LOC, ORG, PER, PER = 5; predicted: PER, LOC, ORG, PER(merged) = 4; correct 3.
    assert m["precision"] == pytest.approx(3 / 4) and m["recall"] == pytest.approx(3 / 5)
    assert main(["evaluate", "ner", str(DEV), str(tmp_path / "pred.txt")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == m and printed["f1"] == pytest.approx(2 / 3)


def test_bad_input(tmp_path):
    (tmp_path / "bad.txt").write_text("Ana B-PER\nsings\n")
    with pytest.raises(BertPipelineError, match=r"bad.txt, line 2: expected 'TOKEN ... TAG'"):
        read_conll(tmp_path / "bad.txt")
    (tmp_path / "bad.txt").write_text("Ana PERSON\n")
    with pytest.raises(BertPipelineError, match="tag 'PERSON' is not O or B-/I-/E-/S-TYPE"):
        read_conll(tmp_path / "bad.txt")
    (tmp_path / "other.txt").write_text("Marta I-PER\n")
    with pytest.raises(BertPipelineError, match="has 1 sentences but"):
        evaluate_ner_files(DEV, tmp_path / "other.txt")
