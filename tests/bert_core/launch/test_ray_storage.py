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


def test_a_restored_checkpoint_is_named_by_where_it_lives(tmp_path):
    """A resumed run records the checkpoint it continued from; its local copy (a temp dir of one worker) would
    name a path no other machine can read (the production-profile test's handoff check caught it)."""
    from pyarrow import fs

    from bert_core.launch.ray_train import checkpoint_uri

    s3 = SimpleNamespace(filesystem=SimpleNamespace(type_name="s3"),
                         path="work/pretraining/ray_results/run/checkpoint_000002")
    assert checkpoint_uri(s3) == "s3://work/pretraining/ray_results/run/checkpoint_000002"
    local = SimpleNamespace(filesystem=fs.LocalFileSystem(), path=str(tmp_path / "checkpoint_000002"))
    assert checkpoint_uri(local) == str(tmp_path / "checkpoint_000002")
