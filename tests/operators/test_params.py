"""Airflow Params generated from the library's config fields, and a run's settings checked before any work."""

from __future__ import annotations

import pytest

from bert_core.errors import BertPipelineError
from bert_core.pretrain.config import PretrainConfig
from operators import tasks as ops
from operators.params import config_params, settings_from

SHARDS = ("max_seq_length", "holdout_fraction")
PRETRAIN = ("model", "pretrained", "num_steps", "batch_size", "optimizer", "lr", "dtype", "num_workers", "use_gpu")


def test_params_carry_the_fields_default_type_choices_and_help():
    params = config_params(PretrainConfig, ["dtype", "lr", "optimizer", "use_gpu", "batch_size"], {"batch_size": 64})
    assert params["dtype"].value == "float32" and params["dtype"].schema["enum"] == ["float32", "float16", "bfloat16"]
    assert params["lr"].value is None and params["lr"].schema["type"] == ["number", "null"]
    assert "peak learning rate" in params["lr"].description.lower()
    assert params["use_gpu"].schema["type"] == "boolean"
    assert params["batch_size"].value == 64 and "Library default: 32" in params["batch_size"].description
    with pytest.raises(BertPipelineError, match="no field 'lrate'"):
        config_params(PretrainConfig, ["lrate"])


def test_settings_leave_empty_params_to_the_library():
    assert settings_from({"lr": None, "dtype": "bfloat16", "other": 1}, ["lr", "dtype"]) == {"dtype": "bfloat16"}


@pytest.mark.parametrize("conf, message", [
    ({"model": "bert_2_128_2", "pretrained": "/weights"}, "exactly one of --model"),
    ({"batch_size": 63, "num_workers": 2}, "batch-size 63 is the batch of all 2 workers"),
    ({"holdout_fraction": 0.0}, "holdout_fraction must be above 0"),
    ({"max_seq_length": 4}, "max_seq_length must be at least 5"),
    ({"dtype": "float8"}, "--dtype must be one of"),
])
def test_impossible_settings_fail_the_plan_task_with_the_param_named(conf, message, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    params = {"work_dir": str(tmp_path), "inputs": [], "vocab": "v.txt", "model": "bert_2_128_2", "num_steps": 10,
              "batch_size": 64, "num_workers": 2, "holdout_fraction": 0.05, **conf}
    with pytest.raises(BertPipelineError, match=message):
        ops.plan_pretraining(params, None, SHARDS, PRETRAIN)


def test_use_gpu_without_a_gpu_is_refused_up_front(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    params = {"work_dir": str(tmp_path), "vocab": "v.txt", "model": "bert_2_128_2", "num_steps": 10,
              "holdout_fraction": 0.05, "use_gpu": True}
    with pytest.raises(BertPipelineError, match="use_gpu is set, but this machine has no GPU"):
        ops.plan_pretraining(params, None, SHARDS, PRETRAIN)


def test_pretrain_settings_are_config_fields(tmp_path):
    with pytest.raises(BertPipelineError, match="unknown lrate; known: .*lr"):
        ops.pretrain(str(tmp_path), str(tmp_path / "out"), {"model": "bert_2_128_2", "lrate": 1e-3})
