"""The nightly's speed reference on a real MLflow sqlite store: the median of the last good nights' ratios, failed
nights and nights beyond the window left out, and what the report and results say of it."""

from __future__ import annotations

import json
import os

import pytest

from operators import nightly

KEY = "throughput/pretrain_step/bert_12_768_12"


@pytest.fixture()
def past_nights(tmp_path, monkeypatch):
    """Seven earlier nights of the `bert-nightly` experiment, oldest first, as compare_and_report logs them."""
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # Named, not taken from the environment: an earlier test in this process may have set mlflow's global URI.
    client = MlflowClient(uri)
    experiment = client.create_experiment(nightly.EXPERIMENT)
    nights = [(2.50, "passed"), (1.90, "passed"), (2.03, "passed"), (1.92, "passed"), (1.00, "failed"),
              (1.96, "passed"), (2.19, "passed")]
    ids = []
    for i, (ratio, status) in enumerate(nights):
        run = client.create_run(experiment, start_time=1_700_000_000_000 + i * 86_400_000,
                                tags={nightly.STATUS_TAG: status})
        client.log_metric(run.info.run_id, KEY, ratio, step=0)
        client.set_terminated(run.info.run_id, "FINISHED" if status == "passed" else "FAILED")
        ids.append(run.info.run_id)
    return ids


def test_speed_is_compared_with_the_median_of_the_last_good_nights(past_nights, tmp_path):
    from bert_core.errors import BertPipelineError

    # Against the last good night alone (2.19x, a lucky one), tonight's 1.73x is a 21% drop: a regression.
    with pytest.raises(BertPipelineError, match=f"{KEY} 1.73 vs 2.19"):
        nightly.compare_and_report([], {KEY: 1.73}, str(tmp_path / "strict"), speed_reference_nights=1)
    strict = json.loads((tmp_path / "strict" / "report" / "results.json").read_text())
    assert strict["speed_reference_runs"] == [past_nights[-1]]

    # The default window: the last five good nights (the failed one and the oldest left out), median 1.96x.
    summary = nightly.compare_and_report([], {KEY: 1.73}, str(tmp_path / "median"))
    assert summary["status"] == "passed"
    results = json.loads((tmp_path / "median" / "report" / "results.json").read_text())
    assert results["speed_reference_runs"] == [past_nights[i] for i in (6, 5, 3, 2, 1)]
    (finding,) = [f for f in results["findings"] if f["key"] == KEY]
    assert finding["reference"] == pytest.approx(1.96) and not finding["regressed"]
    assert "Speed against the last 5 good night(s)" in (tmp_path / "median" / "report" / "report.md").read_text()

    # A window of no night is refused before anything is logged.
    from mlflow import MlflowClient

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name(nightly.EXPERIMENT).experiment_id
    before = len(client.search_runs([experiment]))
    with pytest.raises(BertPipelineError, match="speed_reference_nights: expected at least 1 night, got 0"):
        nightly.compare_and_report([], {KEY: 1.73}, str(tmp_path / "none"), speed_reference_nights=0)
    assert len(client.search_runs([experiment])) == before and not (tmp_path / "none").exists()
