"""One name for the sequence length, `max_seq_length`: its default depends on the task kind, and what was
written under the former fine-tuning name `max_len` (a DAG conf, a task card, a finetune manifest) still
reads as it was meant."""

import json

import pytest

from bert_core.errors import BertPipelineError
from bert_core.finetune import presets, task_card
from bert_core.finetune.config import FinetuneConfig, renamed_settings
from bert_core.finetune.evaluate import settings_from_manifest


def _config(task: str, **settings) -> FinetuneConfig:
    return FinetuneConfig(task=task, data_dir="d", model="m", output="o", **settings)


@pytest.mark.parametrize(("task", "length"), [("sst-2", 128), ("sts-b", 128), ("mnli", 128), ("ner", 128),
                                              ("squad", 384), ("SQuAD2.0", 384)])
def test_the_default_depends_on_the_task_kind(task, length):
    """As Google's run_classifier.py (128) and run_squad.py (384); a value given is kept for every kind."""
    assert _config(task).max_seq_length == length
    assert _config(task, max_seq_length=64).max_seq_length == 64
    assert _config(task).result_config()["max_seq_length"] == length  # what the manifest records


def test_an_unknown_task_is_an_error_naming_it():
    with pytest.raises(BertPipelineError, match="unknown task 'sst3'"):
        _config("sst3")


def test_deprecated_max_len_is_read_per_task_kind(caplog):
    """`max_len` was the classification/regression/NER length (max_seq_length did not apply there, so max_len
    wins); a SQuAD run ignored it (SQuAD's length was already max_seq_length)."""
    old = {"max_len": 64, "max_seq_length": 256, "epochs": 2}
    with caplog.at_level("WARNING", logger="bert_core.finetune.config"):
        assert renamed_settings(old, "classification", "conf") == {"max_seq_length": 64, "epochs": 2}
    assert "conf: 'max_len' is deprecated (read as max_seq_length 64); write 'max_seq_length'" in caplog.text
    assert renamed_settings(old, "squad", "conf") == {"max_seq_length": 256, "epochs": 2}
    assert "'max_len' is deprecated and never applied to SQuAD" in caplog.text
    assert renamed_settings({"max_len": 64}, "ner", "conf") == {"max_seq_length": 64}
    assert renamed_settings({"epochs": 2}, "squad", "conf") == {"epochs": 2}  # nothing to say


def test_presets_layering_reads_the_deprecated_name_in_settings_and_overrides():
    assert presets.settings_for("mrpc", {"max_len": 64}, None) == {"max_seq_length": 64}
    assert presets.settings_for("squad", {"max_len": 64}, None) == {}
    assert presets.settings_for("mnli", {"max_len": 64}, "gluonnlp")["max_seq_length"] == 80  # the preset wins
    assert presets.settings_for("mnli", {}, "gluonnlp", {"mnli": {"max_len": 100}})["max_seq_length"] == 100


@pytest.mark.parametrize(("kind", "length"), [("classification", 32), ("ner", 32), ("squad", 64)])
def test_a_task_card_written_before_the_rename_still_loads(tmp_path, kind, length):
    """Registered models carry task.json files with both old fields; each kind reads the length it used."""
    squad = {"doc_stride": 16, "max_query_length": 16, "n_best_size": 20, "max_answer_length": 30,
             "version_2": False, "null_score_diff_threshold": 0.0}
    (tmp_path / "task.json").write_text(json.dumps({"task": "x", "kind": kind, "max_len": 32, "max_seq_length": 64,
                                                    "squad": squad}))
    card = task_card.read_card(tmp_path)
    assert card.max_seq_length == length and card.squad_options().doc_stride == 16
    task_card.write_card(tmp_path, card)  # written again: the one name only
    assert "max_len" not in json.loads((tmp_path / "task.json").read_text())
    assert task_card.read_card(tmp_path) == card


def test_a_bad_task_card_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "task.json").write_text("[1, 2]")
    with pytest.raises(BertPipelineError, match=r"task.json: not a task card .*expected a JSON object"):
        task_card.read_card(tmp_path)
    (tmp_path / "task.json").write_text(json.dumps({"task": "sst-2", "kind": "classification"}))
    with pytest.raises(BertPipelineError, match=r"task.json: not a task card .*max_seq_length"):
        task_card.read_card(tmp_path)


def test_a_finetune_manifest_written_before_the_rename_gives_the_length_the_model_used():
    old = {"task": "sst-2", "max_len": 32, "max_seq_length": 384, "doc_stride": 128, "epochs": 3}
    assert settings_from_manifest({"config": old}) == {"max_seq_length": 32, "doc_stride": 128}
    assert settings_from_manifest({"config": {**old, "task": "squad"}})["max_seq_length"] == 384
    new = {"task": "sst-2", "max_seq_length": 32}
    assert settings_from_manifest({"config": new}) == {"max_seq_length": 32}
