"""The DAGs' task functions that are not covered by the demo run: planning and the make-shards fan-out."""

from __future__ import annotations

from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError
from bert_core.io import manifest
from operators import tasks as ops

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_plans(tmp_path, monkeypatch, minilm_dir):
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    specs = ops.plan_finetune({"tasks": {"SST-2": "", "squad": "/data/squad"}}, "manual__2026-01-01T00:00:00+00:00")
    assert [(s["task"], Path(s["data_dir"]).name) for s in specs] == [("sst-2", "sst2"), ("squad", "squad")]
    work = tmp_path / "home" / "finetune" / "manual__2026-01-01T00_00_00_00_00"
    assert specs[0]["output"] == f"{work}/finetune-sst-2" and Path(specs[0]["model"]) == minilm_dir
    with pytest.raises(BertPipelineError, match="give a data directory for 'cola'"):
        ops.plan_finetune({"tasks": {"cola": ""}}, None)
    with pytest.raises(BertPipelineError, match="at least one task"):
        ops.plan_finetune({"tasks": {}}, None)
    plan = ops.plan_pretraining({"work_dir": str(tmp_path / "w"), "inputs": []}, None)
    assert plan["inputs"] == [ops.demo_data("corpus")] and plan["vocab"] == str(minilm_dir / "vocab.txt")
    demo = ops.plan_demo({"model": "/m"}, "r1")
    assert demo["vocab"] == "/m/vocab.txt" and demo["work_dir"].endswith("/demo/r1")


def test_segment_fans_out_per_input_file(tmp_path):
    segmented = ops.segment([ops.demo_data("corpus")], str(tmp_path / "segmented"))
    files = ops.segmented_files(segmented)
    assert [Path(f).name for f in files] == ["part-a.txt", "part-b.txt"]
    assert ops.shard_dir("/w", files[0]) == "/w/shards/part-a"


def test_single_worker_pretrain_and_rerun_finetune_register(tmp_path, monkeypatch, minilm_dir):
    """One worker pretrains in-process (its own MLflow run); a fine-tuning re-run on an up-to-date output
    logs the existing model, so both stay registrable."""
    from operators import registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    segmented = ops.segment([ops.demo_data("corpus")], str(tmp_path / "segmented"))
    shards = ops.make_shards(segmented, str(tmp_path / "shards"), str(minilm_dir / "vocab.txt"),
                             {"max_seq_length": 64, "max_predictions_per_seq": 10, "dupe_factor": 1})
    assert ops.validate_shards(shards)["instances"] > 100
    pretrained = ops.pretrain(shards, str(tmp_path / "pretrained"),
                              {"model": "bert_2_64_2", "num_workers": 1, "num_steps": 3, "batch_size": 8},
                              vocab=str(minilm_dir / "vocab.txt"))
    assert pretrained["mlflow_run_id"]
    assert ops.register_and_promote(pretrained, str(tmp_path / "reg"), promote=False)["candidate"] == "1"

    runs = [ops.finetune("sst-2", ops.demo_data("sst2"), pretrained["output"], str(tmp_path / "ft"),
                          dict(epochs=1, batch_size=16, lr=1e-4, max_len=16))
            for _ in range(2)]
    assert runs[0]["metrics"] == runs[1]["metrics"] and runs[0]["mlflow_run_id"] != runs[1]["mlflow_run_id"]
    reports = [ops.register_and_promote(ops.evaluate(r, str(tmp_path / "eval")), str(tmp_path / "reg"))
               for r in runs]
    assert [r["candidate"] for r in reports] == ["1", "2"]
    assert reports[1]["champion_before"] == "1" or not reports[0]["promoted"]
    assert not (tmp_path / "mlruns").exists()
    assert registry.model_name("sst-2") == reports[0]["name"]


def test_evaluate_rescores_every_file_finetuning_scored(tmp_path, monkeypatch):
    """The evaluate step re-scores exactly what fine-tuning scored: MNLI's two dev files, NER's CoNLL output."""
    import shutil

    from tests.tiny_bert import write_tiny_bert
    from tests.toy_tasks import write_ner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    model = write_tiny_bert(tmp_path / "tiny")
    mnli = tmp_path / "mnli"
    shutil.copytree(FIXTURES / "glue" / "MNLI", mnli)
    shutil.copyfile(mnli / "dev_matched.tsv", mnli / "train.tsv")
    for task, data in (("mnli", mnli), ("ner", write_ner(tmp_path / "ner", n_train=16, n_dev=6))):
        done = ops.finetune(task, str(data), str(model), str(tmp_path / f"ft-{task}"),
                           dict(epochs=1, batch_size=16, lr=1e-4, max_len=24))
        evaluated = ops.evaluate(done, str(tmp_path / f"eval-{task}"))
        assert evaluated["metrics"] == done["metrics"], task
        assert manifest.read(tmp_path / f"eval-{task}")["metrics"] == done["metrics"]
    assert "f1" in evaluated["metrics"]  # NER: entity-level scores of its .txt predictions
    assert "dev_mismatched/accuracy" in manifest.read(tmp_path / "eval-mnli")["metrics"]


def test_finetune_settings_are_config_fields(tmp_path):
    """The task's settings are FinetuneConfig fields, named exactly: a misspelt one is an error naming it."""
    from bert_core.errors import BertPipelineError

    with pytest.raises(BertPipelineError, match="unknown doc_strid; known: .*doc_stride"):
        ops.finetune("squad", str(tmp_path), "model", str(tmp_path / "out"), {"doc_strid": 64})
