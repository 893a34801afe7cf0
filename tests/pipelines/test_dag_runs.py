"""bert_finetune and bert_pretraining run through Airflow's dag.test() on the bundled data (tiny settings):
the mapped tasks fan out, and the registry gets the new versions."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from bert_core.io import manifest
from tests.airflow_home import migrated_home

pytestmark = pytest.mark.slow


@pytest.fixture()
def airflow_env(monkeypatch, tmp_path):
    home = migrated_home(monkeypatch, tmp_path)
    yield home
    import ray

    ray.shutdown()


def _run(dag_id: str, conf: dict):
    dag = getattr(importlib.import_module(f"pipelines.{dag_id}"), dag_id)()
    return dag.test(run_conf=conf)


def test_pretraining_then_finetune_dags(airflow_env, tmp_path):
    """bert_pretraining makes a tiny BERT; bert_finetune fine-tunes it (fast, and the path a user takes)."""
    work = tmp_path / "pt"
    run = _run("bert_pretraining", {"model": "bert_2_64_2", "max_seq_length": 64, "dupe_factor": 2,
                                    "num_steps": 4, "batch_size": 8, "work_dir": str(work)})
    assert str(run.state).endswith("success")
    assert sorted(p.name for p in (work / "shards").iterdir()) == ["part-a", "part-b"]  # one per input file
    for part in ("part-a", "part-b"):
        assert json.loads((work / "shards" / part / "validation.json").read_text())["success"]
    pretrained = manifest.read(work / "pretrained")
    assert pretrained["training"]["world_size"] == 2
    assert len(pretrained["config"]["data"].split(",")) == 2
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri(), registry_uri=default_tracking_uri())
    versions = client.search_model_versions("name='bert-pretrained'")
    assert any(v.tags.get("output") == str(Path(work / "pretrained")) for v in versions)

    ft = tmp_path / "ft"
    run = _run("bert_finetune", {"tasks": {"sst-2": "", "squad": ""}, "model": str(work / "pretrained"),
                                 "epochs": 1, "max_len": 32, "max_seq_length": 64, "work_dir": str(ft)})
    assert str(run.state).endswith("success")
    summary = json.loads((ft / "registry" / "summary.json").read_text())
    assert [(m["name"], m["gates"]) for m in summary["models"]] == [("bert-sst-2", ["accuracy"]),
                                                                    ("bert-squad", ["f1", "exact_match"])]
    for report in summary["models"]:
        assert (ft / "registry" / f"{report['name']}-v{report['candidate']}.json").is_file()
    assert manifest.read(ft / "evaluate-sst-2")["metrics"] == manifest.read(ft / "finetune-sst-2")["metrics"]
