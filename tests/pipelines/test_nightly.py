"""bert_nightly_regression through Airflow's dag.test(): a night with a champion passes and re-measures exactly
what fine-tuning recorded; a worse newest version fails the next night, with the report and MLflow run saying why."""

from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from bert_core.io import manifest
from tests.airflow_home import migrated_home

pytestmark = pytest.mark.slow

# Speed is reported, never asserted in tests: tolerances of 100% (a ratio can only fall to 0).
CONF = {"throughput_configs": ["bert_6_384_12"], "throughput_steps": 1, "throughput_batch_size": 2,
        "throughput_max_seq_length": 16, "throughput_tolerance": 1.0, "time_to_accuracy_tolerance": 1.0,
        "pretrain_step_configs": ["bert_2_64_2"], "pretrain_step_steps": 1, "pretrain_step_batch_size": 2,
        "pretrain_step_max_seq_length": 16, "pretrain_step_max_predictions": 3,
        "convergence_config": "bert_2_64_2", "convergence_steps": 4, "convergence_batch_size": 4,
        "convergence_max_seq_length": 32, "convergence_max_predictions": 5, "convergence_dupe_factor": 1,
        "convergence_eval_every": 2, "convergence_eval_batches": 2, "convergence_peer_lrs": [3e-3]}


@pytest.fixture()
def nightly_env(monkeypatch, tmp_path):
    home = migrated_home(monkeypatch, tmp_path)
    # A registry of its own (the session's shared home also holds other tests' models), embedded like the
    # default one: sqlite store and artifacts under this home.
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    return home


def _night(conf: dict):
    module = importlib.import_module("pipelines.bert_nightly_regression")
    return module.bert_nightly_regression().test(run_conf=conf)


def _nightly_runs():
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri())
    experiment = client.get_experiment_by_name("bert-nightly")
    return client, client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])


def test_nightly_passes_then_catches_a_worse_candidate(nightly_env, tmp_path, minilm_dir, monkeypatch):
    import torch
    from safetensors.torch import load_file, save_file

    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.io.tracking import MlflowTracker
    from operators import registry
    from operators import tasks as ops
    from operators.locations import demo_data

    trained = ops.finetune("sst-2", demo_data("sst2"), str(minilm_dir), str(tmp_path / "ft"),
                           dict(epochs=1, batch_size=16, lr=1e-4, max_seq_length=32))
    champion = ops.register_and_promote(trained, str(tmp_path / "registry"))
    assert champion["promoted"]

    # The night downloads each registered version it evaluates: into a temporary copy, removed afterwards.
    # Short: the time-to-accuracy runs' make-shards starts a multiprocessing forkserver whose socket lives under
    # TMPDIR, and a Unix socket path may not exceed 107 bytes (pytest's tmp_path alone is ~80).
    # Left in place: the forkserver outlives the test, and later tests of this process fork through its socket.
    scratch = Path(tempfile.mkdtemp(prefix="bn-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    run = _night({**CONF, "work_dir": str(tmp_path / "night1")})
    assert str(run.state).endswith("success")
    assert not list(scratch.rglob("config.json")), "a downloaded model was left behind"
    client, runs = _nightly_runs()
    assert [r.data.tags["nightly.status"] for r in runs] == ["passed"]
    # Re-measured on the pinned data with the model's own settings: exactly what fine-tuning recorded.
    recorded = manifest.read(tmp_path / "ft")["metrics"]
    assert runs[0].data.metrics["bert-sst-2/accuracy"] == pytest.approx(recorded["accuracy"], abs=1e-12)
    assert runs[0].data.metrics["throughput/bert_6_384_12/train"] > 0
    # The pretraining speed figures: the step ratio, and the time-to-accuracy ratio (0 if ours never got there),
    # with their reports.
    assert runs[0].data.metrics["throughput/pretrain_step/bert_2_64_2"] > 0
    assert runs[0].data.metrics["time_to_accuracy/bert_2_64_2"] >= 0
    convergence = json.loads((tmp_path / "night1" / "pretrain_convergence.json").read_text())
    assert convergence["settings"]["steps"] == 4 and [r["lr"] for r in convergence["peer"]] == [3e-3]
    # The step figure is the report's median over its runs (one run by default: that run's ratio).
    step_report = json.loads((tmp_path / "night1" / "pretrain_throughput.json").read_text())
    (entry,) = step_report["summary"]
    assert runs[0].data.metrics["throughput/pretrain_step/bert_2_64_2"] == pytest.approx(
        entry["median_ratio_ours_over_transformers"]) == pytest.approx(
        step_report["rows"][0]["ratio_ours_over_transformers"])
    report = (tmp_path / "night1" / "report" / "report.md").read_text()
    assert "**PASSED**" in report and "first reference" in report
    assert (tmp_path / "night1" / "report" / "plots" / "bert-sst-2.png").stat().st_size > 1000
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id)}
    assert {"report.md", "results.json", "plots"} <= artifacts

    # A newer version that always answers the first label: worse than the champion on the same data.
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "ft" / "model", broken)
    weights = load_file(broken / "model.safetensors")
    weights["classifier.weight"] = torch.zeros_like(weights["classifier.weight"])
    weights["classifier.bias"] = torch.tensor([1.0, 0.0])
    save_file(weights, broken / "model.safetensors")
    tracker = MlflowTracker("bert-finetune/sst-2", pyfunc=pyfunc_spec)
    tracker.log_model_dir(broken)
    tracker.end()
    candidate = registry.register(tracker.run_id, "bert-sst-2", {"accuracy": 0.5})["version"]

    run = _night({**CONF, "work_dir": str(tmp_path / "night2")})
    assert str(run.state).endswith("failed")
    client, runs = _nightly_runs()
    assert [r.data.tags["nightly.status"] for r in runs] == ["passed", "failed"]
    results = json.loads((tmp_path / "night2" / "report" / "results.json").read_text())
    regressed = {f["key"] for f in results["findings"] if f["regressed"]}
    assert regressed == {"candidate/bert-sst-2/accuracy"}  # the champion matched the last good night
    # The speed figures were compared with the last good night's, with their tolerances.
    compared = {f["key"]: f for f in results["findings"]}
    assert compared["time_to_accuracy/bert_2_64_2"]["allowed_drop"] == pytest.approx(
        runs[0].data.metrics["time_to_accuracy/bert_2_64_2"])
    assert compared["throughput/pretrain_step/bert_2_64_2"]["reference"] == pytest.approx(
        runs[0].data.metrics["throughput/pretrain_step/bert_2_64_2"])
    assert results["candidates"]["bert-sst-2"]["version"] == candidate
    assert results["last_good_run"] == runs[0].info.run_id
    assert results["speed_reference_runs"] == [runs[0].info.run_id]  # the one good night so far
    report = (tmp_path / "night2" / "report" / "report.md").read_text()
    assert "**FAILED: 1 regression(s)**: candidate/bert-sst-2/accuracy" in report
    assert "| candidate/bert-sst-2/accuracy |" in report and "| bert-sst-2/accuracy |" in report
    assert runs[1].data.metrics["candidate/bert-sst-2/accuracy"] < runs[1].data.metrics["bert-sst-2/accuracy"]
    # The champion alias did not move.
    assert registry.latest_versions("bert-sst-2")["champion"] == champion["candidate"]
    assert Path(tmp_path / "night2" / "evaluations" / f"bert-sst-2-v{candidate}" / "metrics.json").is_file()
    assert not (tmp_path / "mlruns").exists() and (tmp_path / "home" / "mlartifacts").is_dir()
