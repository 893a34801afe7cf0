"""Where a Ray Train run keeps its state (ray_train.storage_path): every node, and a retry of the run on another
machine (an Airflow task retried on another Celery worker), must see it."""

from types import SimpleNamespace

import pytest

from bert_core.launch.ray_train import storage_path


@pytest.mark.parametrize("output, expected", [
    ("s3://runs/pretraining/run1/pretrained", "s3://runs/pretraining/run1/ray_results"),
    ("s3://runs/pretraining/run1/pretrained/", "s3://runs/pretraining/run1/ray_results"),
    ("s3://runs/pretrained/phase2", "s3://runs/pretrained/ray_results"),
    ("s3://runs/model", "s3://runs/ray_results"),
])
def test_a_remote_output_keeps_the_run_state_beside_it(output, expected):
    assert storage_path(SimpleNamespace(storage=None, output=output)) == expected


def test_a_local_output_keeps_it_in_the_pipeline_home(monkeypatch, tmp_path):
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    assert storage_path(SimpleNamespace(storage=None, output=str(tmp_path / "out"))) == str(
        tmp_path / "home" / "ray_results")


def test_storage_given_wins(tmp_path):
    assert storage_path(SimpleNamespace(storage="s3://shared/ray", output="s3://runs/model")) == "s3://shared/ray"
    assert storage_path(SimpleNamespace(storage=str(tmp_path), output="s3://runs/model")) == str(tmp_path)
