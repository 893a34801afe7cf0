"""Airflow Params generated from the library's config fields, and a run's settings checked before any work."""

from __future__ import annotations

import pytest

from bert_core.errors import BertPipelineError
from bert_core.pretrain.config import PretrainConfig
from operators import tasks as ops
from operators.params import config_params, settings_from
from operators.plan_pretraining import plan as plan_pretraining

SHARDS = ("max_seq_length", "holdout_fraction")
PRETRAIN = ("model", "pretrained", "num_steps", "batch_size", "optimizer", "lr", "dtype", "num_workers", "use_gpu")


def test_params_carry_the_fields_default_type_choices_and_help():
    params = config_params(PretrainConfig, ["dtype", "lr", "optimizer", "use_gpu", "batch_size"], {"batch_size": 64})
    # The DAGs' precision default is the config field's: auto, resolved by the run for its device.
    assert params["dtype"].value == "auto" and params["dtype"].schema["enum"] == ["auto", "float32", "float16",
                                                                                  "bfloat16"]
    assert "auto: bfloat16 where the device computes it natively" in params["dtype"].description
    assert params["lr"].value is None and params["lr"].schema["type"] == ["number", "null"]
    assert "peak learning rate" in params["lr"].description.lower()
    assert params["use_gpu"].schema["type"] == "boolean"
    assert params["batch_size"].value == 64 and "Library default: 32" in params["batch_size"].description
    with pytest.raises(BertPipelineError, match="no field 'lrate'"):
        config_params(PretrainConfig, ["lrate"])


def test_a_params_form_section_comes_from_its_field():
    """The section is written once, with the field (option(..., section=...)); a field without one cannot become
    a Param, and a DAG's Params are ordered by section, so each section is one block of the form."""
    import dataclasses

    from bert_core.options import Form, option
    from operators.params import SECTIONS, in_sections, section

    params = config_params(PretrainConfig, ["num_workers", "lr", "model", "dtype", "storage"])
    assert {name: p.schema["section"] for name, p in params.items()} == {
        "num_workers": SECTIONS[Form.SCALE], "lr": SECTIONS[Form.OPTIMIZATION], "model": SECTIONS[Form.MODEL],
        "dtype": SECTIONS[Form.SCALE], "storage": SECTIONS[Form.STORAGE]}
    assert list(in_sections(params)) == ["model", "lr", "num_workers", "dtype", "storage"]

    @dataclasses.dataclass
    class Unsectioned:
        steps: int = option(1, "steps")

    with pytest.raises(BertPipelineError, match="Unsectioned.steps has no trigger-form section"):
        config_params(Unsectioned, ["steps"])
    from airflow.sdk import Param

    with pytest.raises(BertPipelineError, match="Param 'x': section 'misc' is not a trigger-form section"):
        in_sections({"x": Param(1, type="integer", section="misc")})
    with pytest.raises(BertPipelineError, match="no trigger-form section 'misc'"):
        section("misc")


def test_settings_leave_empty_params_to_the_library():
    assert settings_from({"lr": None, "dtype": "bfloat16", "other": 1}, ["lr", "dtype"]) == {"dtype": "bfloat16"}
    assert settings_from({"pretrain_lr": 1e-3, "lr": 2e-3}, ["lr"], "pretrain_") == {"lr": 1e-3}


def test_prefixed_params_for_two_steps_in_one_dag():
    params = config_params(PretrainConfig, ["num_workers"], {"num_workers": 2}, prefix="pretrain_",
                           label="Pretraining")
    assert list(params) == ["pretrain_num_workers"] and params["pretrain_num_workers"].value == 2
    assert params["pretrain_num_workers"].description.startswith("Pretraining: training workers")


@pytest.mark.parametrize("conf, message", [
    ({"model": "bert_2_128_2", "pretrained": "/weights"}, "exactly one of model NAME"),
    ({"batch_size": 0, "num_workers": 2}, "params: batch_size must be at least 1"),
    ({"holdout_fraction": 0.0}, "holdout_fraction must be above 0"),
    ({"max_seq_length": 4}, "max_seq_length must be at least 5"),
    ({"dtype": "float8"}, "params: dtype must be one of"),
    ({"num_workers": "two"}, r"params: num_workers: expected a number N or a range MIN:MAX"),
    ({"model": "bert_2_128_two"}, "params: model: unknown model 'bert_2_128_two': not a directory and not a zoo"),
    ({"inputs": ["/no/corpus/*.txt"]}, r"params: inputs: input /no/corpus/\*.txt: matches no file"),
    ({"inputs": ["/no/corpus.txt"]}, "params: inputs: input /no/corpus.txt: no such file or directory"),
    ({"vocab": "/no/vocab.txt"}, "params: vocab: no such file /no/vocab.txt"),
])
def test_impossible_settings_fail_the_plan_task_with_the_param_named(conf, message, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    params = {"work_dir": str(tmp_path), "inputs": [], "vocab": "v.txt", "model": "bert_2_128_2", "num_steps": 10,
              "batch_size": 64, "num_workers": 2, "holdout_fraction": 0.05, **conf}
    with pytest.raises(BertPipelineError, match=message):
        plan_pretraining(params, None, SHARDS, PRETRAIN)


def test_use_gpu_without_a_gpu_is_refused_up_front(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a machine with a GPU
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    params = {"work_dir": str(tmp_path), "vocab": "v.txt", "model": "bert_2_128_2", "num_steps": 10,
              "holdout_fraction": 0.05, "use_gpu": True}
    with pytest.raises(BertPipelineError, match="use_gpu is set, but this machine has no GPU"):
        plan_pretraining(params, None, SHARDS, PRETRAIN)


def test_inputs_param_may_be_left_empty():
    """The form must not mark `inputs` required: empty means the bundled corpus."""
    from pipelines.bert_pretraining import PARAMS

    assert "null" in PARAMS["inputs"].schema["type"]


def test_the_forms_lr_description_gives_the_rules_value():
    """An empty lr is the rule's: the form says which number that is with its default model and batch."""
    from pipelines.bert_pretraining import PARAMS

    assert "bert_core/pretrain/recipe.py" in PARAMS["lr"].description
    assert "lr 1.41e-03 for hidden 128, global batch 32" in PARAMS["lr"].description


def test_pretrain_and_make_shards_settings_are_config_fields(tmp_path):
    with pytest.raises(BertPipelineError, match="unknown lrate; known: .*lr"):
        ops.pretrain(str(tmp_path), str(tmp_path / "out"), {"model": "bert_2_128_2", "lrate": 1e-3})
    with pytest.raises(BertPipelineError, match="unknown masking_prob; known: .*masked_lm_prob"):
        ops.make_shards(str(tmp_path), str(tmp_path / "shards"), "v.txt", {"masking_prob": 0.2})
    assert not (tmp_path / "out").exists() and not (tmp_path / "shards").exists()


def test_a_retried_pretrain_task_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    """The task's first try dies after step 3 (checkpoint at step 2); the retry continues from there and
    its model is complete."""
    from bert_core.io import manifest
    from bert_core.pretrain.step import pretrain
    from tests.fault_injection import FailAtStep
    from tests.synthetic_shards import tiny_model_config, write_shards

    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    data = write_shards(tmp_path / "shards")
    output = str(tmp_path / "pretrained")
    settings = {"model": str(tiny_model_config(tmp_path / "tiny.json")), "num_steps": 5, "batch_size": 4,
                "num_workers": 1, "ckpt_interval": 2}
    first_try = PretrainConfig(data=str(data), output=output, resume="auto", progress=False, tracking=False,
                               **settings)
    with pytest.raises(RuntimeError, match="injected failure at step 3"):
        pretrain(first_try, hooks=[FailAtStep(3)])
    retried = ops.pretrain(str(data), output, settings)
    training = manifest.read(output)["training"]
    assert training["resumed_from"].endswith("step-00000002") and training["steps"] == 5
    assert retried["metrics"]["loss"] > 0


def test_num_workers_param_takes_a_number_or_an_elastic_range():
    """bert_pretraining's num_workers: an int (fixed) or "MIN:MAX" (elastic), the same values the CLI flag takes."""
    param = config_params(PretrainConfig, ["num_workers"], {"num_workers": 2})["num_workers"]
    assert param.schema["type"] == ["integer", "string"]
    assert param.resolve(2) == 2 and param.resolve("1:4") == "1:4"
    assert "MIN:MAX" in param.description
    with pytest.raises(BertPipelineError, match=r"--num-workers: expected a number N or a range MIN:MAX"):
        PretrainConfig(data="d", output="o", model="m", num_steps=1, num_workers="two")


def test_a_negated_flags_param_describes_the_field_not_the_flag():
    """`--cased` turns do_lower_case off; the form's switch is do_lower_case itself (on: lower-case)."""
    from dataclasses import dataclass

    from bert_core.options import option
    from pipelines.bert_pretraining import PARAMS

    assert PARAMS["do_lower_case"].value is True
    assert PARAMS["do_lower_case"].description.startswith("Lower-case and strip accents before WordPiece")
    assert "keep case" not in PARAMS["do_lower_case"].description.split(";")[0]

    @dataclass
    class Switches:
        colour: bool = option(True, "no colour", negate="--no-colour", section="Storage")

    with pytest.raises(BertPipelineError, match="Switches.colour: its help describes --no-colour; give its option"):
        config_params(Switches, ["colour"], {})


def test_form_descriptions_name_params_not_command_line_flags():
    """The library's help names flags (--batch-size, --data-eval); a form names its own Params or the setting."""
    import re

    from pipelines.bert_demo import PARAMS as DEMO_PARAMS
    from pipelines.bert_finetune import PARAMS as FINETUNE_PARAMS
    from pipelines.bert_pretraining import PARAMS

    for form in (PARAMS, DEMO_PARAMS, FINETUNE_PARAMS):
        for name, param in form.items():
            flags = re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*(?!\w)", param.description or "")
            assert not flags, (name, flags, param.description)
    assert "with finetune_num_workers" not in DEMO_PARAMS["finetune_batch_size"].description
    assert "split across finetune_num_workers" in DEMO_PARAMS["finetune_batch_size"].description
    assert "Evaluate on the held-out shards every N steps" in PARAMS["eval_interval"].description
    assert PARAMS["num_steps"].description.endswith("(No library default.)")
