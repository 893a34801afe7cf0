"""Fine-tuning on Ray Train (CPU, gloo): 2 workers, each on its share of every batch, give what 1 worker gives
on the same global batch; only rank 0 writes the output and logs to the driver's MLflow run."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pytest
import ray
import torch

from bert_core.finetune.step import FINETUNE, FinetuneConfig, finetune
from bert_core.launch.run import run_step
from bert_core.metrics.scoring import score_predictions
from bert_core.model.weights import read_state_dict
from tests import toy_tasks
from tests.tiny_bert import write_tiny_bert

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_session():
    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()


def _scores(path) -> np.ndarray:
    return np.array([float(line.split("\t")[1]) for line in path.read_text().splitlines()[1:]])


def test_two_workers_equal_one_worker(ray_session, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(home))
    # Set (empty: the embedded store) so that the value MLflow exports when a run starts is undone after.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)  # relative paths: the workers must get them made absolute
    write_tiny_bert(tmp_path / "tiny")  # dropout off: both runs compute the same thing
    # 21 rows in batches of 5: the last batch has 1 row, so one worker has no rows of it.
    toy_tasks.write_stsb(tmp_path / "stsb", n_train=21, n_dev=10)
    base = dict(task="sts-b", data_dir="stsb", model="tiny", epochs=2, batch_size=5, lr=1e-3, max_seq_length=32,
                dtype="float32")  # compared across world sizes: float32, on any CPU
    one = finetune(FinetuneConfig(**base, output="one", tracking=False))
    two = run_step(FINETUNE, FinetuneConfig(**base, output="two", num_workers=2))

    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert two["config"]["data_dir"] == str(tmp_path / "stsb")
    epochs = [json.loads((tmp_path / name / "metrics.json").read_text())["epochs"] for name in ("one", "two")]
    assert [e["train_loss"] for e in epochs[1]] == pytest.approx([e["train_loss"] for e in epochs[0]], rel=1e-5)
    # The dev predictions, not their correlations: a barely trained model's scores vary by ~1e-5, where
    # float rounding (1e-8) already moves pearson in the 4th digit.
    np.testing.assert_allclose(_scores(tmp_path / "two" / "dev_predictions.tsv"),
                               _scores(tmp_path / "one" / "dev_predictions.tsv"), rtol=1e-5, atol=1e-7)
    a, b = (read_state_dict(tmp_path / name / "model" / "model.safetensors") for name in ("one", "two"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6)
    assert two["metrics"] == score_predictions("sts-b", tmp_path / "stsb" / "dev.tsv",
                                               tmp_path / "two" / "dev_predictions.tsv")

    # Rank 0 logged into the driver's run, once per epoch (another rank logging would add entries).
    client = mlflow.MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    run = client.get_run(two["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["world_size"] == "2"
    assert client.get_experiment(run.info.experiment_id).name == "bert-finetune/sts-b"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == [1, 2]
    assert {a.path for a in client.list_artifacts(run.info.run_id, "predictions")} == {
        "predictions/dev_predictions.tsv", "predictions/scored.json"}
    # The same command again is a no-op, decided by the driver before starting any worker.
    assert run_step(FINETUNE, FinetuneConfig(**base, output="two", num_workers=2))["finished_at"] \
        == two["finished_at"]
