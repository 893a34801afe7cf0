"""Batch prediction with an export on task files: what it says about the file it was given."""

import json

import numpy as np
import pytest

from bert_core.deploy.batch_predict import predict_file
from bert_core.finetune.config import SquadOptions
from tests.tiny_bert import VOCAB


class _Graph:
    """An export's face to predict_file: its meta and a graph that finds no span better than another."""

    def __init__(self, directory):
        self.directory = directory
        self.meta = {"task": "question_answering", "max_seq_length": 64, "do_lower_case": True}

    def run(self, input_ids, token_type_ids, attention_mask, quantized=False):
        return np.zeros(input_ids.shape, np.float32), np.zeros(input_ids.shape, np.float32)


@pytest.mark.parametrize("version_2", [False, True])
def test_a_squad_file_of_the_other_version_is_said(tmp_path, caplog, version_2):
    """A SQuAD 2.0 file predicted without --version-2 answers every question (no "", no null_odds.json) and scores
    lower with nothing to say why: the version the file has and the one predicted are named, as fine-tuning does."""
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "vocab.txt").write_bytes(VOCAB.read_bytes())
    data = tmp_path / "dev.json"
    data.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "Hana lives in Quito.",
        "qas": [{"id": "q1", "question": "Where does Hana live?", "is_impossible": False,
                 "answers": [{"text": "Quito", "answer_start": 14}]},
                {"id": "q2", "question": "Who is Hana's cat?", "is_impossible": True, "answers": []}]}]}]}))
    with caplog.at_level("WARNING"):
        predict_file(_Graph(tmp_path / "export"), data, tmp_path / "out", squad=SquadOptions(version_2=version_2))
    said = "is SQuAD 2.0 but --version-2 is not set: predicting as SQuAD 1.1"
    assert (said in caplog.text) is not version_2
    assert (tmp_path / "out" / "null_odds.json").is_file() is version_2
