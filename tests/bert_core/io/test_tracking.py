"""MLflow tracking of a pretraining run in the embedded sqlite store: params, metrics over steps, artifacts, tags,
and a logged model that the registry can register."""

from __future__ import annotations

import pytest

from bert_core.deploy.mlflow_model import pyfunc_spec
from bert_core.errors import BertPipelineError
from bert_core.io import tracking
from bert_core.pretrain.step import PretrainConfig, pretrain
from tests.synthetic_shards import tiny_model_config, write_shards


def test_default_uri_and_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    assert tracking.default_tracking_uri() == f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert tracking.default_tracking_uri() == "http://mlflow:5000"
    assert isinstance(tracking.build_tracker(False), tracking.NullTracker)
    assert tracking.flatten_params({"a": 1, "b": {"c": None}}) == {"a": "1", "b.c": "None"}


def test_pretrain_run_in_sqlite_store(tmp_path, monkeypatch):
    import mlflow

    home = tmp_path / "home"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # unset; and restored after mlflow exports it
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(home))
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026-01-01")
    monkeypatch.setenv("GIT_SHA", "0123abcd")
    data = write_shards(tmp_path / "shards", num_shards=1, per_shard=32)
    config = PretrainConfig(data=str(data), output=str(tmp_path / "model"), model=str(tiny_model_config(
        tmp_path / "tiny.json")), batch_size=8, num_steps=4, log_interval=2, ckpt_interval=0, progress=False)

    tracker = tracking.build_tracker(True, run_name="test-run", pyfunc=pyfunc_spec)
    try:
        result = pretrain(config, tracker)
    finally:
        tracker.end()

    client = mlflow.MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "bert-pretrain"
    assert client.get_experiment(run.info.experiment_id).artifact_location == (home / "mlartifacts").as_uri()
    params = run.data.params
    assert params["batch_size"] == "8" and params["optimizer"] == "adamw" and params["total_steps"] == "4"
    assert params["model_config.hidden_size"] == "32" and params["data"] == str(data)
    tags = run.data.tags
    assert tags["git_sha"] == "0123abcd" and tags["pipeline_run_id"] == "manual__2026-01-01"
    assert len(tags["data_sha256"]) == 64
    loss = client.get_metric_history(tracker.run_id, "loss")
    assert [m.step for m in loss] == [1, 2, 4]  # 1: the learning watch's first check point (25% of 4 steps)
    for key in ("mlm_accuracy", "nsp_accuracy", "learning_rate", "loss_scale", "grad_norm", "tokens_per_s",
                "eval_mlm_accuracy", "eval_nsp_accuracy"):
        assert client.get_metric_history(tracker.run_id, key), key
    assert run.data.metrics["eval_mlm_accuracy"] == pytest.approx(result["metrics"]["mlm_accuracy"])
    artifacts = {a.path for a in client.list_artifacts(tracker.run_id)}
    assert {"manifest.json", "data"} <= artifacts
    assert [a.path for a in client.list_artifacts(tracker.run_id, "data")] == ["data/manifest.json"]
    assert result["mlflow_run_id"] == tracker.run_id

    # The final model is a logged model: registrable, and it loads as a pyfunc.
    models = mlflow.search_logged_models(experiment_ids=[run.info.experiment_id], output_format="list")
    assert len(models) == 1 and models[0].source_run_id == tracker.run_id
    mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
    version = mlflow.register_model(f"models:/{models[0].model_id}", "bert-pretrained-test")
    assert int(version.version) == 1
    # Trained without a vocabulary, it cannot read text: logged all the same, and loading it says why.
    with pytest.raises(Exception, match="has no vocab.txt"):
        mlflow.pyfunc.load_model(f"models:/{models[0].model_id}")


def test_a_tracker_without_a_pyfunc_cannot_log_a_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker = tracking.build_tracker(True, experiment="bert-test")
    with pytest.raises(BertPipelineError, match="built without `pyfunc`"):
        tracker.log_model_dir(tmp_path)
    tracker.end()


def test_every_experiment_of_a_process_keeps_artifacts_in_the_embedded_home(tmp_path, monkeypatch):
    """mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI: the second experiment created in the same process
    must still be recognised as embedded (artifacts under <home>/mlartifacts, not ./mlruns)."""
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for experiment in ("bert-finetune/sst-2", "bert-finetune/squad"):
        tracker = tracking.MlflowTracker(experiment)
        tracker.log_artifact(tmp_path / "home" / "mlflow.db", "copy")
        tracker.end()
        location = mlflow.get_experiment(tracker.experiment_id).artifact_location
        assert location == (tmp_path / "home" / "mlartifacts").as_uri(), experiment
    assert not (tmp_path / "mlruns").exists()
    # Another sqlite store: its artifacts go beside its own database, not to ./mlruns.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other' / 'other.db'}")
    (tmp_path / "other").mkdir()
    assert tracking.ensure_experiment("x")
    assert mlflow.get_experiment_by_name("x").artifact_location == (tmp_path / "other" / "mlartifacts").as_uri()


def test_artifacts_stay_with_their_store(tmp_path, monkeypatch):
    """Two sqlite stores used from one working directory keep their artifacts beside their own databases;
    nothing is written to the working directory; an explicit artifact root wins."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv(tracking.ARTIFACT_ROOT_ENV, raising=False)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    for store in ("a", "b"):
        uri = f"sqlite:///{tmp_path / store / 'runs.db'}"
        (tmp_path / store).mkdir()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        tracker = tracking.MlflowTracker("bert-finetune/sst-2", tracking_uri=uri)
        tracker.log_artifact(model_dir / "config.json", "cfg")
        tracker.end()
        # Both stores number their experiment 1; their artifacts are apart all the same.
        assert tracker.experiment_id == "1"
        assert [p.name for p in (tmp_path / store / "mlartifacts").glob(f"{tracker.run_id}/artifacts/cfg/*")] == [
            "config.json"]
    assert list(work.iterdir()) == []  # no ./mlruns, no ./mlartifacts
    monkeypatch.setenv(tracking.ARTIFACT_ROOT_ENV, str(tmp_path / "root"))
    assert tracking.artifact_location("bert-pretrain", "sqlite:///x.db") == (tmp_path / "root").as_uri() + "/bert-pretrain"
    monkeypatch.setenv(tracking.ARTIFACT_ROOT_ENV, "s3://bucket/mlflow/")
    assert tracking.artifact_location("e", "http://mlflow:5000") == "s3://bucket/mlflow/e"
    monkeypatch.delenv(tracking.ARTIFACT_ROOT_ENV)
    assert tracking.artifact_location("e", "http://mlflow:5000") is None  # the server's own default


def test_params_logged_again_keep_their_first_value(tmp_path, monkeypatch):
    """A Ray Train worker group restarted without a checkpoint logs its params again into the same run, with
    another world size: MLflow would refuse the change and fail the run; the first value stays."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    first = tracking.build_tracker(True, run_name="restarted")
    first.log_params({"world_size": 2, "batch_size": 8})
    first.end()  # (the first group's process ended; the run goes on)
    again = tracking.MlflowTracker(tracking_uri=first.tracking_uri, run_id=first.run_id)
    again.log_params({"world_size": 1, "batch_size": 8, "lr": 0.001})
    again.end()
    params = mlflow.MlflowClient(first.tracking_uri).get_run(first.run_id).data.params
    assert params == {"world_size": "2", "batch_size": "8", "lr": "0.001"}


def test_a_tracker_attached_to_a_run_names_the_runs_experiment(tmp_path, monkeypatch, caplog):
    """Rank 0 of a fine-tuning run attaches to the driver's run: its log line named the constructor's default
    experiment (bert-pretrain) instead of the run's (bert-finetune/squad)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    driver = tracking.MlflowTracker("bert-finetune/squad", run_name="driver")
    driver.end()  # (rank 0 is another process; the run goes on)
    with caplog.at_level("INFO", logger="bert_core.io.tracking"):
        rank0 = tracking.MlflowTracker(tracking_uri=driver.tracking_uri, run_id=driver.run_id)
    rank0.end()
    assert f"MLflow run {driver.run_id} in experiment 'bert-finetune/squad'" in caplog.text


def test_artifact_progress_bars_are_off_in_commands_unless_the_user_set_them(monkeypatch):
    """Every `bert-pipeline` command runs inside quiet_artifact_transfers (MLflow's download bars were a dozen
    frames before `predict`'s one line, and in `export --register --promote`); a user's own setting wins, and
    nothing is left set afterwards."""
    import os

    from bert_core.io.tracking import PROGRESS_BAR_ENV, quiet_artifact_transfers
    from bert_pipeline import cli

    monkeypatch.delenv(PROGRESS_BAR_ENV, raising=False)
    seen = []
    monkeypatch.setitem(cli.COMMANDS, "probe", ("tests.bert_core.io.test_tracking", "probe"))
    monkeypatch.setattr("tests.bert_core.io.test_tracking.add_arguments", lambda parser: None, raising=False)
    monkeypatch.setattr("tests.bert_core.io.test_tracking.run",
                        lambda args: seen.append(os.environ.get(PROGRESS_BAR_ENV)) or 0, raising=False)
    assert cli.main(["probe"]) == 0 and seen == ["false"] and PROGRESS_BAR_ENV not in os.environ
    monkeypatch.setenv(PROGRESS_BAR_ENV, "true")
    with quiet_artifact_transfers():
        assert os.environ[PROGRESS_BAR_ENV] == "true"
    assert os.environ[PROGRESS_BAR_ENV] == "true"
