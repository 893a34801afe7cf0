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


def test_a_worse_candidate_is_named_as_the_candidate_not_as_the_champion(home):
    import json

    from bert_core.errors import BertPipelineError
    from operators import nightly

    assert nightly.compare_and_report([SST2], {}, str(home / "night1"))["status"] == "passed"
    candidate = {**SST2, "version": "2", "role": "candidate", "metrics": {"accuracy": 0.4}}
    with pytest.raises(BertPipelineError) as failed:
        nightly.compare_and_report([SST2, candidate], {}, str(home / "night2"))
    # The champion's own key (`bert-sst-2/accuracy`, unchanged tonight) is not what regressed.
    assert "candidate/bert-sst-2/accuracy 0.4 vs 0.9" in str(failed.value)
    assert "(candidate v2 against champion v1)" in str(failed.value)
    assert ("; to decide on candidate bert-sst-2 v2: bert-pipeline promote bert-sst-2 2 --reject 'WHY'; report: "
            in str(failed.value))
    results = json.loads((home / "night2" / "report" / "results.json").read_text())
    status = {f["key"]: f["regressed"] for f in results["findings"]}
    assert status == {"bert-sst-2/accuracy": False, "candidate/bert-sst-2/accuracy": True}
    report = (home / "night2" / "report" / "report.md").read_text()
    assert "**FAILED: 1 regression(s)**: candidate/bert-sst-2/accuracy" in report
    # What to do about it: an undecided worse version fails every night until someone acts.
    assert ("bert-sst-2: candidate v2 against champion v1. It was registered without a promotion decision, so it is "
            "judged each night until a newer version is registered or it is decided: `bert-pipeline promote "
            "bert-sst-2 2 --reject 'WHY'` (models:/bert-sst-2/2).") in report


def test_a_candidate_promotion_rejected_is_shown_not_counted(home):
    """A worse candidate that promotion already rejected serves nobody: the night shows its figures against the
    champion and passes, instead of failing every night until a newer version is registered."""
    import json

    from operators import nightly

    assert nightly.compare_and_report([SST2], {}, str(home / "night1"))["status"] == "passed"
    candidate = {**SST2, "version": "2", "role": "candidate", "metrics": {"accuracy": 0.4},
                 "promotion": {"decision": "rejected", "reasons": "accuracy: 0.4 is worse than the champion's 0.9"}}
    assert nightly.compare_and_report([SST2, candidate], {}, str(home / "night2"))["status"] == "passed"
    results = json.loads((home / "night2" / "report" / "results.json").read_text())
    [finding] = [f for f in results["findings"] if f["key"] == "candidate/bert-sst-2/accuracy"]
    assert not finding["regressed"] and "rejected at promotion" in finding["note"]
    report = (home / "night2" / "report" / "report.md").read_text()
    assert ("bert-sst-2: candidate v2 was rejected at promotion (accuracy: 0.4 is worse than the champion's 0.9): "
            "its figures against champion v1 are shown, not counted.") in report


def test_a_champion_left_out_of_a_night_is_compared_with_the_last_night_that_scored_it(home):
    """A night that passed without a model (`models` naming others) was the next night's only reference: the model's
    figure had none there and was not compared, so a champion that fell from 0.9 to 0.4 passed."""
    from bert_core.errors import BertPipelineError
    from operators import nightly

    squad = {"name": "bert-squad", "task": "squad", "version": "1", "role": "champion",
             "metrics": {"f1": 50.0, "exact_match": 50.0}, "data_sha256": {"dev-v1.1.json": "b" * 64}}
    first = nightly.compare_and_report([SST2, squad], {}, str(home / "night1"))
    assert nightly.compare_and_report([squad], {}, str(home / "night2"))["status"] == "passed"
    worse = {**SST2, "version": "3", "metrics": {"accuracy": 0.4}}
    with pytest.raises(BertPipelineError, match=r"bert-sst-2/accuracy 0.4 vs 0.9 .*\(champion v3 against the last "):
        nightly.compare_and_report([worse, squad], {}, str(home / "night3"))
    report = (home / "night3" / "report" / "report.md").read_text()
    assert f"bert-sst-2/accuracy: against MLflow run {first['mlflow_run_id']}" in report
    assert "| bert-squad/f1 | 50 | 50 |" in report


def test_a_first_night_shows_its_figures_and_a_night_that_measured_nothing_says_so(home):
    """The first night's report.md had no figure in it ("nothing to compare"), and a night on an empty registry with
    the speed benchmarks off read "PASSED: no metric regressed"."""
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri
    from operators import nightly

    nightly.compare_and_report([SST2], {"throughput/bert_6_384_12/infer": 0.82}, str(home / "night1"))
    report = (home / "night1" / "report" / "report.md").read_text()
    assert "## Tonight's figures" in report
    assert "| bert-sst-2/accuracy | 0.9 |" in report and "| throughput/bert_6_384_12/infer | 0.82 |" in report

    MlflowClient(default_tracking_uri()).create_registered_model("bert-mrpc")
    assert nightly.compare_and_report([], {}, str(home / "night2"))["status"] == "passed"
    report = (home / "night2" / "report" / "report.md").read_text()
    assert "**PASSED, but nothing was measured**" in report
    assert "- bert-mrpc: registered, not benchmarked tonight: it has no version with the alias 'champion'." in report
    assert "- No speed benchmark ran tonight" in report


def test_the_error_gives_tonights_figure_as_its_reference_is_given(home):
    """It read "candidate/bert-sst-2/accuracy 0.4358974358974359 vs 0.923077": every digit of one, six of the other."""
    from bert_core.errors import BertPipelineError
    from operators import nightly

    champion = {**SST2, "metrics": {"accuracy": 36 / 39}}
    candidate = {**SST2, "version": "2", "role": "candidate", "metrics": {"accuracy": 17 / 39}}
    with pytest.raises(BertPipelineError, match=r"candidate/bert-sst-2/accuracy 0.435897 vs 0.923077 \(allowed drop"):
        nightly.compare_and_report([champion, candidate], {}, str(home / "night1"))


def test_a_speed_figure_is_compared_only_with_nights_that_measured_it_alike(home):
    """throughput_max_seq_length 128 -> 512 changes the ratio itself: the night after the change failed on a drop
    that was the new setting's, against nights measured at the old one."""
    from bert_core.errors import BertPipelineError
    from operators import nightly

    key = "throughput/bert_6_384_12/train"
    short = {"throughput": {"steps": 6, "batch_size": 16, "max_seq_length": 128}}
    long = {"throughput": {"steps": 6, "batch_size": 16, "max_seq_length": 512}}
    nightly.compare_and_report([SST2], {key: 2.0}, str(home / "night1"), speed_settings=short)
    summary = nightly.compare_and_report([SST2], {key: 1.2}, str(home / "night2"), speed_settings=long)
    assert summary["status"] == "passed"
    report = (home / "night2" / "report" / "report.md").read_text()
    assert f"{key}: 1 of the last 1 good night(s) measured it with other throughput settings; not its reference." in report
    assert _run(summary["mlflow_run_id"]).data.params["speed_settings.throughput"] == (
        '{"batch_size": 16, "max_seq_length": 512, "steps": 6}')
    # Against the nights measured alike it is still judged.
    with pytest.raises(BertPipelineError, match=rf"{key} 0.8 vs 1.2 "):
        nightly.compare_and_report([SST2], {key: 0.8}, str(home / "night3"), speed_settings=long)


def test_the_history_plots_leave_out_nights_scored_on_other_pinned_data(home, monkeypatch):
    """A night on a changed dev file is not compared (its figure measures the data), but its point was drawn in the
    model's history as if it were: 0.5 on other data beside 0.9 read as a collapse."""
    import evaluation.regression
    from operators import nightly

    drawn = []
    real = evaluation.regression.plot_history
    monkeypatch.setattr(evaluation.regression, "plot_history",
                        lambda history, *args: drawn.append(history) or real(history, *args))
    nightly.compare_and_report([SST2], {}, str(home / "night1"))
    other = {**SST2, "metrics": {"accuracy": 0.5}, "data_sha256": {"dev.tsv": "b" * 64}}
    assert nightly.compare_and_report([other], {}, str(home / "night2"))["status"] == "passed"
    nightly.compare_and_report([SST2], {}, str(home / "night3"))
    assert [night["metrics"].get("bert-sst-2/accuracy") for night in drawn[-1]] == [0.9, None, 0.9]
    report = (home / "night3" / "report" / "report.md").read_text()
    assert "The history plots leave out the figures of 1 earlier night(s) scored on other pinned data." in report
