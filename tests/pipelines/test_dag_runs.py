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
    # Two phases, as in BERT's recipe (short sequences first, then longer ones with their own shards), each
    # phase's make-shards mapped over the input files, the second phase starting from the first's weights.
    work = tmp_path / "pt"
    run = _run("bert_pretraining", {"model": "bert_2_64_2", "max_seq_length": 64, "dupe_factor": 2,
                                    "batch_size": 8, "work_dir": str(work),
                                    "phases": [{"max_seq_length": 32, "max_predictions_per_seq": 5, "num_steps": 3},
                                               {"num_steps": 2}]})
    assert str(run.state).endswith("success")
    for phase, seq in (("phase1", 32), ("phase2", 64)):
        shards = work / "shards" / phase
        assert sorted(p.name for p in shards.iterdir()) == ["part-a", "part-b"]  # one per input file
        for part in ("part-a", "part-b"):
            assert json.loads((shards / part / "validation.json").read_text())["success"]
            assert manifest.read(shards / part)["config"]["max_seq_length"] == seq
        assert manifest.read(work / "shards-heldout" / phase)["config"]["max_seq_length"] == seq
    first, second = manifest.read(work / "pretrained" / "phase1"), manifest.read(work / "pretrained" / "phase2")
    assert first["training"]["world_size"] == second["training"]["world_size"] == 2
    assert len(second["config"]["data"].split(",")) == 2 and "phase2" in second["config"]["data"]
    assert second["config"]["pretrained"] == str(work / "pretrained" / "phase1")  # from the first phase's weights
    assert (first["config"]["num_steps"], second["config"]["num_steps"]) == (3, 2)
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri(), registry_uri=default_tracking_uri())
    versions = client.search_model_versions("name='bert-pretrained'")
    assert any(v.tags.get("output") == str(work / "pretrained" / "phase2") for v in versions)

    # A phase longer than the model's positions fails the plan before any work.
    run = _run("bert_pretraining", {"model": "bert_2_64_2", "work_dir": str(tmp_path / "bad-pt"),
                                    "phases": [{"num_steps": 2}, {"max_seq_length": 1024}]})
    assert str(run.state).endswith("failed") and not (tmp_path / "bad-pt" / "shards").exists()

    # A named recipe, per-task overrides (tiny sizes) and a search over two learning rates on Ray Tune.
    ft = tmp_path / "ft"
    run = _run("bert_finetune", {"tasks": {"sst-2": "", "squad": ""}, "model": str(work / "pretrained" / "phase2"),
                                 "recipe": "gluonnlp", "search": {"lr": [1e-4, 1e-3]},
                                 "overrides": {"sst-2": {"epochs": 1, "max_len": 32},
                                               "squad": {"epochs": 1, "batch_size": 8, "max_seq_length": 64,
                                                         "doc_stride": 32}},
                                 "work_dir": str(ft)})
    assert str(run.state).endswith("success")
    summary = json.loads((ft / "registry" / "summary.json").read_text())
    assert [(m["name"], m["gates"]) for m in summary["models"]] == [("bert-sst-2", ["accuracy"]),
                                                                    ("bert-squad", ["f1", "exact_match"])]
    for report in summary["models"]:
        assert (ft / "registry" / f"{report['name']}-v{report['candidate']}.json").is_file()
        search = report["search"]
        assert sorted(search["trials"]) == ["lr=0.0001", "lr=0.001"] and search["spread"]["trials"] == 2
        best = ft / f"finetune-{report['name'].removeprefix('bert-')}" / search["best"]
        trial = manifest.read(best)
        assert trial["config"]["batch_size"] == (16 if report["name"] == "bert-sst-2" else 8)  # recipe, override
        assert trial["config"]["optimizer"] == ("bertadam" if report["name"] == "bert-sst-2" else "adamw")
        assert manifest.read(ft / f"evaluate-{report['name'].removeprefix('bert-')}")["metrics"] == trial["metrics"]
        version = client.get_model_version(report["name"], report["candidate"])
        assert version.run_id == trial["mlflow_run_id"]  # the best trial's model is the registered one
        parent = client.get_run(search_parent(report, ft))
        assert client.get_run(version.run_id).data.tags["mlflow.parentRunId"] == parent.info.run_id

    # A bad conf fails the plan task, before any work, naming the param.
    run = _run("bert_finetune", {"tasks": {"sst-2": ""}, "overrides": {"sst-2": {"epoch": 1}},
                                 "work_dir": str(tmp_path / "bad")})
    assert str(run.state).endswith("failed")
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["plan"].endswith("failed") and not any(s.endswith("success") for s in states.values()), states


def search_parent(report: dict, ft: Path) -> str:
    task = report["name"].removeprefix("bert-")
    return json.loads((ft / f"finetune-{task}" / "search.json").read_text())["parent_run_id"]
