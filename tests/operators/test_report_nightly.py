"""`bert-pipeline report` on a nightly regression's run directory: the night's verdict, figures and history plots
(operators.nightly.compare_and_report's report/, made here on a real MLflow sqlite store), not the training
sections, which said "0 model(s) registered ... This run did not pretrain ... fine-tuned no model"."""

from __future__ import annotations

import json

import pytest

from bert_core.errors import BertPipelineError
from operators import nightly
from operators.report.collect import collect
from operators.report.render import render

SST2 = {"name": "bert-sst-2", "task": "sst-2", "version": "1", "role": "champion", "metrics": {"accuracy": 0.925},
        "data_sha256": {"dev.tsv": "a" * 64}}
RUN = "scheduled__2026-11-29T00:00:00+00:00"


@pytest.fixture()
def home(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    return tmp_path


def _task_record(run_dir, task_id, state, error=None):
    record = {"dag_id": "bert_nightly_regression", "run_id": RUN, "task_id": task_id, "map_index": -1,
              "try_number": 1, "state": state, "started_at": "2026-11-29T00:00:01+00:00",
              "finished_at": "2026-11-29T00:00:03+00:00", "duration_s": 2.0, "hostname": "h", "error": error}
    (run_dir / "tasks").mkdir(parents=True, exist_ok=True)
    (run_dir / "tasks" / f"{task_id}.try1.json").write_text(json.dumps(record))


def test_a_nights_report_shows_its_verdict_figures_and_plots(home):
    nightly.compare_and_report([SST2], {"throughput/bert_6_384_12/infer": 0.82}, str(home / "night1"))
    night = home / "night2"
    candidate = {**SST2, "version": "2", "role": "candidate", "metrics": {"accuracy": 0.425}}
    with pytest.raises(BertPipelineError) as failed:
        nightly.compare_and_report([SST2, candidate], {"throughput/bert_6_384_12/infer": 0.8}, str(night))
    _task_record(night, "compare_and_report", "failed", f"AirflowFailException: {failed.value}")

    records = collect(str(night))
    assert records["nightly"]["status"] == "failed" and len(records["nightly"]["plots"]) == 2
    page = render(records)
    assert '<section id="nightly">' in page and '<section id="timeline">' in page
    for absent in ("models", "data", "pretraining", "finetuning", "serving"):
        assert f'<section id="{absent}">' not in page
    assert "nightly regression failed: 2 model version(s) scored, 1 regression(s)" in page
    assert "0 model(s) registered" not in page
    assert ('<td>candidate/bert-sst-2/accuracy</td><td class="num">0.425</td><td class="num">0.925</td>'
            '<td>-0.5</td><td class="num">0.00925</td><td class="fail">REGRESSED</td>') in page
    assert '<td>throughput/bert_6_384_12/infer</td><td class="num">0.8</td><td class="num">0.82</td>' in page
    assert page.count('<img src="data:image/png;base64,') == 3  # two history plots and the timeline
    assert f"MLflow run <code>{records['nightly']['mlflow_run_id']}</code> (experiment bert-nightly)" in page

    from operators.report.publish import _summary

    assert "- nightly regression failed: candidate/bert-sst-2/accuracy" in _summary(records)
