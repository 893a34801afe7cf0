"""`bert-pipeline demo` end to end: the bert_demo DAG through Airflow's dag.test(), local Ray, sqlite MLflow."""

from __future__ import annotations

import json

import pytest

from bert_core import manifest
from bert_core.cli import main
from tests.airflow_home import embedded_env

pytestmark = pytest.mark.slow

# Fewer steps/epochs than the demo's defaults: the test checks the wiring, not the numbers.
CONF = {"pretrain_steps": 8, "finetune_epochs": 1, "squad_epochs": 1}


@pytest.fixture()
def demo_env(monkeypatch, tmp_path):
    yield embedded_env(monkeypatch, tmp_path)
    import ray

    ray.shutdown()


def test_demo_end_to_end(demo_env, tmp_path, capsys):
    work = tmp_path / "run"
    assert main(["demo", "--home", str(demo_env), "--conf", json.dumps({**CONF, "work_dir": str(work)})]) == 0
    out = capsys.readouterr().out
    assert "bert_demo finished." in out and "mlflow ui --backend-store-uri sqlite:///" in out

    # Every step left its manifest (ARCHITECTURE §2).
    steps = {"segmented": "segment", "shards": "make-shards", "pretrained": "pretrain",
             "finetune-sst-2": "finetune", "finetune-squad": "finetune", "evaluate-sst-2": "evaluate",
             "evaluate-squad": "evaluate"}
    for directory, step in steps.items():
        assert manifest.read(work / directory)["step"] == step, directory
        assert not manifest.verify_outputs(work / directory)
    assert json.loads((work / "shards" / "validation.json").read_text())["success"]
    assert set(manifest.read(work / "pretrained")["metrics"]) >= {"loss", "mlm_accuracy", "nsp_accuracy"}
    assert "accuracy" in manifest.read(work / "finetune-sst-2")["metrics"]
    assert {"exact_match", "f1"} <= set(manifest.read(work / "evaluate-squad")["metrics"])

    # Registered versions with the champion alias, in the embedded sqlite store; decisions recorded.
    from mlflow import MlflowClient

    summary = json.loads((work / "demo_summary.json").read_text())
    client = MlflowClient(summary["tracking_uri"], registry_uri=summary["tracking_uri"])
    assert summary["tracking_uri"] == f"sqlite:///{demo_env / 'mlflow.db'}"
    for model in summary["models"]:
        assert model["promoted"], model
        champion = client.get_model_version_by_alias(model["name"], "champion")
        assert str(champion.version) == model["candidate"]
        assert champion.tags["promotion.decision"] == "promoted"
        assert (work / "registry" / f"{model['name']}-v{model['candidate']}.json").is_file()
    assert {m["name"] for m in summary["models"]} == {"bert-pretrained", "bert-sst-2", "bert-squad"}
    assert not (tmp_path / "mlruns").exists()  # artifacts stay under the home
