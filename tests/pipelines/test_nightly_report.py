"""operators.nightly.compare_and_report on its own (no Airflow, no models): what a night logs to MLflow."""

from __future__ import annotations

import pytest

SST2 = {"name": "bert-sst-2", "task": "sst-2", "version": "1", "role": "champion", "metrics": {"accuracy": 0.9},
        "data_sha256": {"dev.tsv": "a" * 64}}


@pytest.fixture()
def home(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    return tmp_path


def _run(run_id: str):
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri

    return MlflowClient(default_tracking_uri()).get_run(run_id)


def test_the_speed_reference_nights_param_is_the_setting(home):
    from operators import nightly

    speed = {"throughput/bert_2_64_2/infer": 1.5}
    for night in range(3):
        summary = nightly.compare_and_report([SST2], speed, str(home / f"night{night}"), speed_reference_nights=4)
        assert summary["status"] == "passed"
        # It logged the history plotted (a list of every night's metrics, cut at MLflow's limit) instead.
        assert _run(summary["mlflow_run_id"]).data.params["speed_reference_nights"] == "4"
    assert _run(summary["mlflow_run_id"]).data.params["quality_tolerance"] == "0.01"
