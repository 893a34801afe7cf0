"""A fine-tuning search on Ray Tune: one trial per grid point, each an MLflow child run of the search's parent
run with its own logged model; the best trial is picked by the task's main metric."""

from __future__ import annotations

import pytest

from bert_core.errors import BertPipelineError
from bert_core.finetune.config import FinetuneConfig
from bert_core.launch import ray_tune
from tests import toy_tasks
from tests.tiny_bert import write_tiny_bert

pytestmark = pytest.mark.slow


def test_grid_points_and_names():
    points = ray_tune.grid_points({"lr": [5e-5, 3e-5], "seed": [1, 2]})
    assert [ray_tune.trial_name(p) for p in points] == ["lr=5e-05,seed=1", "lr=5e-05,seed=2", "lr=3e-05,seed=1",
                                                         "lr=3e-05,seed=2"]
    trials = [ray_tune.Trial("a", {}, "", {"f1": 0.5}, None), ray_tune.Trial("b", {}, "", {"f1": 0.7}, None),
              ray_tune.Trial("c", {}, "", {}, None, error="boom")]
    assert ray_tune.spread(trials, "f1") == pytest.approx({"min": 0.5, "max": 0.7, "mean": 0.6, "std": 0.1,
                                                           "trials": 2})


def test_search_runs_trials_as_child_runs(tmp_path, monkeypatch):
    import mlflow
    import ray

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    tiny = write_tiny_bert(tmp_path / "tiny")
    data = toy_tasks.write_sst2(tmp_path / "sst2", n_train=48, n_dev=16)
    base = FinetuneConfig(task="sst-2", data_dir=str(data), model=str(tiny), output=str(tmp_path / "unused"),
                          epochs=1, batch_size=16, max_seq_length=16, lr=1e-4)
    with pytest.raises(BertPipelineError, match="one worker each"):
        ray_tune.sweep(FinetuneConfig(**{**base.__dict__, "num_workers": 2}), {"lr": [1e-4]}, str(tmp_path / "s"),
                       "accuracy")

    from bert_core.io.tracking import build_tracker

    # Ray's workers get the raylet's environment, which has no MLFLOW_TRACKING_URI (they would use the home's
    # embedded store), as on a cluster or a Ray head started by `stack up`: the trials must still log to the
    # driver's store, where the parent run is.
    ray.init(address="local", num_cpus=2, include_dashboard=False)  # never a Ray head that another test started
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        # MLflow's tags for every run the driver starts (an Airflow task try's: operators.left_running): the
        # trials, started by Ray's workers, carry them too.
        monkeypatch.setenv("MLFLOW_RUN_CONTEXT", '{"airflow.task_id": "finetune", "airflow.try_number": "2"}')
        parent = build_tracker(True, experiment="bert-finetune/sst-2", run_name="search")
        found = ray_tune.sweep(base, {"lr": [1e-4, 2e-3]}, str(tmp_path / "search"), "accuracy",
                               parent_run_id=parent.run_id)
        # A retried search (e.g. the Airflow task again) finds the trials up to date: same results, and each
        # new trial run records the existing model, so whichever run is registered holds one.
        again = ray_tune.sweep(base, {"lr": [1e-4, 2e-3]}, str(tmp_path / "search"), "accuracy",
                               parent_run_id=parent.run_id)
        parent.end()
    finally:
        ray.shutdown()
    assert [t.metrics for t in again["trials"]] == [t.metrics for t in found["trials"]]
    trials = found["trials"]
    assert [t.name for t in trials] == ["lr=0.0001", "lr=0.002"]
    assert all(t.error is None and 0 <= t.metrics["accuracy"] <= 1 for t in trials)
    best = found["best"]
    assert best.metrics["accuracy"] == max(t.metrics["accuracy"] for t in trials)
    assert (tmp_path / "search" / best.name / "model" / "model.safetensors").is_file()

    client = mlflow.MlflowClient(uri)
    for trial in trials:
        run = client.get_run(trial.mlflow_run_id)
        assert run.data.tags["mlflow.parentRunId"] == parent.run_id
        assert run.data.tags["sweep.lr"] == str(trial.values["lr"])
        assert (run.data.tags["airflow.task_id"], run.data.tags["airflow.try_number"]) == ("finetune", "2")
        assert run.data.params["lr"] == str(trial.values["lr"])
        assert run.data.metrics["best/accuracy"] == pytest.approx(trial.metrics["accuracy"])
    models = mlflow.search_logged_models(experiment_ids=[client.get_run(parent.run_id).info.experiment_id],
                                         output_format="list")
    reruns = client.search_runs([client.get_run(parent.run_id).info.experiment_id],
                                "tags.reused_output != ''")
    assert len(reruns) == 2 and len(models) == 4  # two trials, each logged twice (first run and the retry)
    assert {t.mlflow_run_id for t in trials} <= {m.source_run_id for m in models}
