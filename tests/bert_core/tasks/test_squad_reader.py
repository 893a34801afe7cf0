"""SQuAD files: both versions read, and answers that do not match their context refused with the place named."""

import json

import pytest

from bert_core.errors import BertPipelineError
from bert_core.tasks.squad import read_squad
from tests.paths import FIXTURES

SQUAD = FIXTURES / "squad"


def _squad_file(tmp_path, context, answers, question="Where?"):
    qa = {"id": "q1", "question": question, "answers": answers}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": [qa]}]}]}), encoding="utf-8")
    return path


def test_reads_both_versions():
    v1, ex1 = read_squad(SQUAD / "data-v1.1.json")
    v2, ex2 = read_squad(SQUAD / "data-v2.0.json")
    assert (v1, v2) == ("1.1", "2.0")
    assert any(e.is_impossible and not e.answers for e in ex2)
    assert all(e.answers for e in ex1)


def test_answer_offsets_that_do_not_match_the_context_are_an_error(tmp_path):
    path = _squad_file(tmp_path, "The river is long.", [{"text": "river", "answer_start": 3}])
    with pytest.raises(BertPipelineError, match=r"question 'q1': answer 'river' at answer_start 3 does not match"):
        read_squad(path)
    (tmp_path / "bad.json").write_text('{"data": 3}')
    with pytest.raises(BertPipelineError, match="expected a SQuAD JSON object"):
        read_squad(tmp_path / "bad.json")
