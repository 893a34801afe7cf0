"""The nightly's conf errors, each naming the Param and what was expected: checked by its first task (work_dir)
and by plan, on a real MLflow registry (sqlite), before any benchmark runs."""

from __future__ import annotations

import pytest

from bert_core.errors import BertPipelineError
from operators import nightly

OFF = {"throughput_configs": [], "pretrain_step_configs": [], "convergence_config": None}


@pytest.fixture()
def registry_home(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    return tmp_path


def test_a_misspelt_architecture_or_data_directory_fails_the_first_task(tmp_path):
    # These failed only in the throughput / pretrain_speed / evaluate tasks, after minutes of benchmarks.
    with pytest.raises(BertPipelineError, match=r"^throughput_configs\[1\]: unknown model 'bert_base'"):
        nightly.check_conf({**OFF, "throughput_configs": ["bert_2_64_2", "bert_base"]})
    with pytest.raises(BertPipelineError, match=r"^pretrain_step_configs\[0\]: unknown model 'bert-tiny'"):
        nightly.check_conf({**OFF, "pretrain_step_configs": ["bert-tiny"]})
    with pytest.raises(BertPipelineError, match=r"^convergence_config: unknown model 'bert_2_128'"):
        nightly.check_conf({**OFF, "convergence_config": "bert_2_128"})
    with pytest.raises(BertPipelineError, match=r"^data: unknown task 'sst2x'; valid tasks: cola, sst-2"):
        nightly.check_conf({**OFF, "data": {"sst2x": str(tmp_path)}})
    with pytest.raises(BertPipelineError, match=rf"^data.sst-2: {tmp_path}/gone: no such directory"):
        nightly.check_conf({**OFF, "data": {"sst-2": str(tmp_path / "gone")}})
    with pytest.raises(BertPipelineError, match=rf"^convergence_corpus: {tmp_path}/wiki.txt: no such file"):
        nightly.check_conf({**OFF, "convergence_config": "bert_2_64_2", "convergence_corpus": str(tmp_path / "wiki.txt")})
    nightly.check_conf({**OFF, "throughput_configs": ["bert_6_384_12"], "data": {"SST-2": str(tmp_path)}})


def test_a_model_name_not_in_the_registry_is_named_with_what_it_holds(registry_home):
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri

    with pytest.raises(BertPipelineError, match=r"^models: 'bert-sst-2' is not a registered model; the registry at "
                                                r"sqlite:///.* holds none \(register one"):
        nightly.plan({**OFF, "models": ["bert-sst-2"]})
    client = MlflowClient(default_tracking_uri())
    for name in ("bert-sst-2", "bert-squad"):
        client.create_registered_model(name)
    # It said "bert-sst2 has no version with the alias 'champion'", as if the model existed.
    with pytest.raises(BertPipelineError, match=r"^models: 'bert-sst2' is not a registered model \(did you mean "
                                                r"bert-sst-2\?\); the registry at .* holds bert-squad, bert-sst-2$"):
        nightly.plan({**OFF, "models": ["bert-sst2"]})
    with pytest.raises(BertPipelineError, match=r"^models: bert-sst-2 has no version with the alias 'champion'"):
        nightly.plan({**OFF, "models": ["bert-sst-2"]})


def test_a_pinned_data_directory_without_its_dev_file_is_named_as_the_data_param(registry_home, tmp_path):
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri())
    client.create_registered_model("bert-sst-2")
    version = client.create_model_version("bert-sst-2", source=str(tmp_path / "model")).version
    (tmp_path / "pinned").mkdir()
    spec = {"name": "bert-sst-2", "task": "sst-2", "version": version, "role": "champion",
            "data_dir": str(tmp_path / "pinned")}
    # It said only "<dir>: no dev file for sst-2", from inside the evaluation code.
    with pytest.raises(BertPipelineError, match=rf"^data.sst-2 \(the pinned dev data bert-sst-2 v{version} is scored "
                                                rf"on\): {tmp_path}/pinned: no dev file for sst-2 \(looked for dev.tsv"):
        nightly.evaluate_version(spec, str(tmp_path / "night"))


def test_a_version_without_a_finetune_manifest_is_scored_with_its_task_cards_settings(tmp_path, caplog):
    """A version registered by `export --register` has no `output` tag: it was scored at the task's default
    max_seq_length (128), not the 32 it was fine-tuned and scored at, without a word in the log."""
    import logging

    from bert_core.finetune.task_card import TaskCard, write_card

    model = tmp_path / "model"
    model.mkdir()
    write_card(model, TaskCard(task="sst-2", kind="classification", max_seq_length=32,
                               squad={"doc_stride": 128, "version_2": False}))
    with caplog.at_level(logging.INFO, logger="operators.nightly"):
        assert nightly.card_settings(model, "bert-sst-2 v2") == {"max_seq_length": 32}
    squad = tmp_path / "squad"
    squad.mkdir()
    write_card(squad, TaskCard(task="squad", kind="squad", max_seq_length=64,
                               squad={"doc_stride": 32, "max_query_length": 16, "version_2": True}))
    assert nightly.card_settings(squad, "bert-squad2 v1") == {"max_seq_length": 64, "doc_stride": 32,
                                                              "max_query_length": 16, "version_2": True}
    assert nightly.card_settings(tmp_path, "x v1") == {}
    assert "x v1: no finetune manifest and no task card (task.json)" in caplog.text
