"""Where a Ray Train run keeps its state (ray_train.storage_path): every node, and a retry of the run on another
machine (an Airflow task retried on another Celery worker), must see it."""

import os
import socket
import time
from pathlib import Path
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
    from bert_core.launch.ray_train import checkpoint_uri

    s3 = SimpleNamespace(filesystem=SimpleNamespace(type_name="s3"),
                         path="work/pretraining/ray_results/run/checkpoint_000002")
    assert checkpoint_uri(s3) == "s3://work/pretraining/ray_results/run/checkpoint_000002"
    local = SimpleNamespace(filesystem=SimpleNamespace(type_name="local"), path=str(tmp_path / "checkpoint_000002"))
    assert checkpoint_uri(local) == str(tmp_path / "checkpoint_000002")


def test_a_remote_checkpoint_is_copied_only_while_the_step_reads_it(tmp_path, monkeypatch):
    """A worker's local copy of the checkpoint it resumes from is gone once the step has read it (Ray's
    as_directory kept it for the whole run and left it on the disk when the worker was killed); copies of
    processes that are gone are deleted by the next worker; a checkpoint on a shared disk is read in place."""
    import contextlib
    import subprocess

    import pyarrow.fs
    from ray.train import Checkpoint

    from bert_core.launch.ray_train import RESTORE_PREFIX, restore_checkpoint

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    saved = tmp_path / "bucket" / "run" / "step-00000010"
    saved.mkdir(parents=True)
    (saved / "training_state.pt").write_bytes(b"state")
    dead = subprocess.Popen(["true"])
    dead.wait()
    zombie = subprocess.Popen(["true"])  # exited, not yet reaped: what a killed raylet's workers become
    while not Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
        time.sleep(0.01)
    here = f"{RESTORE_PREFIX}{socket.gethostname()}-"
    left_by_dead = tmp_path / "tmp" / f"{here}{dead.pid}-abc"
    left_by_zombie = tmp_path / "tmp" / f"{here}{zombie.pid}-ghi"
    left_by_live = tmp_path / "tmp" / f"{here}{os.getpid()}-def"
    # Another host's copy, beside ours in a /tmp the two share: its pid means nothing here.
    left_on_another_host = tmp_path / "tmp" / f"{RESTORE_PREFIX}another-host-{dead.pid}-jkl"
    for d in (left_by_dead, left_by_zombie, left_by_live, left_on_another_host):
        d.mkdir()

    # Not the local filesystem (as S3 is not): downloaded.
    remote = Checkpoint("run/step-00000010", filesystem=pyarrow.fs.SubTreeFileSystem(
        str(tmp_path / "bucket"), pyarrow.fs.LocalFileSystem()))
    with contextlib.ExitStack() as cleanup:
        local = restore_checkpoint(remote, cleanup)
        assert local.parent == tmp_path / "tmp" and local.name.startswith(f"{here}{os.getpid()}-")
        assert (local / "training_state.pt").read_bytes() == b"state"
        assert not left_by_dead.exists() and not left_by_zombie.exists()
        assert left_by_live.exists() and left_on_another_host.exists()
        cleanup.close()  # what the step calls once it has read the files
        assert not local.exists()
    assert saved.exists()
    zombie.wait()

    shared = Checkpoint.from_directory(str(saved))
    with contextlib.ExitStack() as cleanup:
        assert restore_checkpoint(shared, cleanup) == saved
    assert saved.exists()
