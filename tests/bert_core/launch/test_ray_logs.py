"""What a step's Ray workers are told about logging. (Ray Train's per-report line being gone from a run's log is
tested with a real Ray Train run under Airflow's supervisor: tests/operators/test_task_log_levels.py.)"""


def test_workers_get_mlflows_artifact_progress_bars_off_unless_the_driver_sets_them(monkeypatch):
    """Walked: rank 0's log_model at the end of `ray job submit ... pretrain` put eight carriage-return frames of
    `Downloading artifacts: 100%|...` into the job's log."""
    from bert_core.launch.ray_cluster import worker_env

    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    assert worker_env()["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")
    assert worker_env()["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "true"
