"""Named fine-tuning presets: per-task values, layering with the caller's settings and overrides, search grids."""

import pytest

from bert_core.errors import BertPipelineError
from bert_core.finetune import presets
from bert_core.finetune.config import FinetuneConfig


def test_gluonnlp_table():
    base = {"lr": 1e-4, "epochs": 2, "batch_size": 16}
    assert presets.settings_for("mrpc", base, "gluonnlp") == {
        "lr": 2e-5, "epochs": 3, "batch_size": 32, "optimizer": "bertadam", "max_seq_length": 128, "adam_eps": 1e-6,
        "warmup_ratio": 0.1}
    sst2 = presets.settings_for("sst-2", base, "gluonnlp")
    assert (sst2["batch_size"], sst2["epochs"], sst2["lr"]) == (16, 4, 2e-5)
    mnli = presets.settings_for("mnli", {}, "gluonnlp")
    assert (mnli["max_seq_length"], mnli["adam_eps"], mnli["lr"]) == (80, 1e-8, 5e-5)  # the script's default lr
    squad = presets.settings_for("squad", {}, "gluonnlp")
    assert (squad["optimizer"], squad["batch_size"], squad["lr"], squad["epochs"], squad["max_seq_length"]) == (
        "adamw", 12, 3e-5, 2, 384)
    squad2 = presets.settings_for("squad", {"version_2": True}, "gluonnlp")
    assert squad2["null_score_diff_threshold"] == -2.0
    for task in presets.PRESETS["gluonnlp"].per_task:  # every value is a real setting
        FinetuneConfig(task=task, data_dir="d", model="m", output="o",
                       **presets.settings_for(task, {}, "gluonnlp")).validate()


def test_bert_paper_and_layering():
    paper = presets.settings_for("rte", {"lr": 1e-4, "dtype": "bfloat16"}, "bert-paper")
    assert (paper["batch_size"], paper["epochs"], paper["lr"], paper["dtype"]) == (32, 3, 2e-5, "bfloat16")
    squad2 = presets.settings_for("squad", {}, "bert-paper", {"squad": {"version_2": True}})
    assert (squad2["epochs"], squad2["batch_size"], squad2["lr"]) == (2, 48, 5e-5)
    overridden = presets.settings_for("rte", {}, "bert-paper", {"rte": {"lr": 3e-5, "epochs": 10}})
    assert (overridden["lr"], overridden["epochs"], overridden["batch_size"]) == (3e-5, 10, 32)
    assert presets.settings_for("rte", {"lr": 1e-4}, "none") == {"lr": 1e-4}
    with pytest.raises(BertPipelineError, match=r"overrides.rte.learning_rate: not a fine-tuning setting"):
        presets.settings_for("rte", {}, None, {"rte": {"learning_rate": 3e-5}})
    with pytest.raises(BertPipelineError, match="unknown fine-tuning preset 'roberta'"):
        presets.settings_for("rte", {}, "roberta")


def test_search_grids():
    assert presets.grid_for("rte", "preset", "bert-paper") == {"lr": [5e-5, 4e-5, 3e-5, 2e-5], "seed": [1, 2, 3]}
    assert presets.grid_for("sst-2", "preset", "bert-paper") == {"lr": [5e-5, 4e-5, 3e-5, 2e-5]}
    assert presets.grid_for("sst-2", {"lr": [1e-4, 3e-4]}) == {"lr": [1e-4, 3e-4]}
    assert presets.grid_for("sst-2", None) == {} == presets.grid_for("sst-2", {})
    with pytest.raises(BertPipelineError, match="needs a preset with a search protocol"):
        presets.grid_for("sst-2", "preset", "gluonnlp")
    with pytest.raises(BertPipelineError, match=r"search.max_seq_length: not a setting a search varies"):
        presets.grid_for("sst-2", {"max_seq_length": [64]})
    with pytest.raises(BertPipelineError, match=r"search.lr: expected a non-empty list"):
        presets.grid_for("sst-2", {"lr": 1e-4})


def test_a_search_per_task_names_the_tasks_that_search():
    search = {"SST-2": {"lr": [1e-4, 3e-4]}, "rte": "preset"}
    assert presets.per_task_search(search) == {"sst-2": {"lr": [1e-4, 3e-4]}, "rte": "preset"}
    assert presets.grid_for("sst-2", search) == {"lr": [1e-4, 3e-4]}
    assert presets.grid_for("rte", search, "bert-paper") == {"lr": [5e-5, 4e-5, 3e-5, 2e-5], "seed": [1, 2, 3]}
    assert presets.grid_for("squad", search) == {}  # not named: no search
    assert presets.per_task_search({"lr": [1e-4]}) is None  # one grid for every task
    with pytest.raises(BertPipelineError, match=r"search.sst-2.max_seq_length: not a setting a search varies"):
        presets.grid_for("sst-2", {"sst-2": {"max_seq_length": [64]}})
    with pytest.raises(BertPipelineError, match=r"search.sst-2: expected 'preset' or an object"):
        presets.grid_for("sst-2", {"sst-2": [1e-4]})


def test_search_recipe_is_a_deprecated_name_of_search_preset(caplog):
    """The bert_finetune form shipped `search: "recipe"`: it still runs the preset's grid, with a warning."""
    with caplog.at_level("WARNING", logger="bert_core.finetune.presets"):
        assert presets.grid_for("rte", "recipe", "bert-paper") == presets.grid_for("rte", "preset", "bert-paper")
    assert "'recipe' is deprecated; write 'preset'" in caplog.text
