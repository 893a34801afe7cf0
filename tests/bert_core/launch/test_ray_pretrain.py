"""Pretraining on Ray Train V2 (CPU, gloo): 2 workers x batch B == 1 worker x batch 2B, and a worker
killed mid-run with --max-failures 1 resumes from the last checkpoint and finishes with the same losses."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import mlflow
import pytest
import ray
import torch

from bert_core.errors import BertPipelineError
from bert_core.launch.ray_train import RESTORE_PREFIX
from bert_core.launch.run import run_step
from bert_core.pretrain.step import PRETRAIN, PretrainConfig, pretrain
from tests.fault_injection import FailAtStep, MakeDirAtStep
from tests.recording_tracker import RecordingTracker
from tests.synthetic_shards import tiny_model_config, write_shards

STEPS = 8


@pytest.fixture(scope="module")
def ray_session():
    """Local Ray with an S3-compatible server (moto) on loopback in its environment: Ray Train checkpoints may
    go to s3:// (--storage) like on a real cluster, where every node must see them."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    # The workers' temporary directory is this module's own (short: Ray's sockets live under it): the checkpoint
    # copies a test counts there are this Ray's, not those of another test running beside it (the
    # production-stack test's killed workers leave theirs in /tmp, and a sweep here deletes them).
    workers_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    with pytest.MonkeyPatch.context() as mp:
        # Set before ray.init: the workers inherit the raylet's environment (credentials are not forwarded).
        for key, value in (("AWS_ENDPOINT_URL", f"http://{host}:{port}"), ("AWS_ACCESS_KEY_ID", "testing"),
                           ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
                           ("TMPDIR", str(workers_tmp))):
            mp.setenv(key, value)
        from bert_core.io import storage
        storage.s3_client().create_bucket(Bucket="ray-ckpt")
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
        yield workers_tmp
        ray.shutdown()
    server.stop()
    shutil.rmtree(workers_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    data = write_shards(root / "shards", num_shards=2, per_shard=32, max_seq_length=32)
    model = tiny_model_config(root / "tiny.json")

    def make(name: str, **overrides) -> PretrainConfig:
        base = dict(data=str(data), output=str(root / name), model=str(model), batch_size=16, num_steps=STEPS,
                    lr=1e-3, optimizer="adamw", log_interval=1, ckpt_interval=3, progress=False,
                    storage=str(root / "ray_results"), tracking=False,
                    dtype="float32")  # losses compared across world sizes: float32, on any CPU
        return PretrainConfig(**{**base, **overrides})

    reference = RecordingTracker()
    result = pretrain(make("single", ckpt_dir=str(root / "single-ckpt")), reference)
    return root, make, reference.losses(), result


def _mlflow_losses(home, run_id) -> list[float]:
    client = mlflow.MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    history = client.get_metric_history(run_id, "loss")
    by_step = {m.step: m.value for m in history}  # a restarted worker logs its steps again
    return [by_step[s] for s in sorted(by_step)]


@pytest.fixture
def tracking_home(setup, monkeypatch):
    root = setup[0]
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(root / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    return root / "home"


def test_two_workers_equal_one_worker_with_the_same_batch(ray_session, setup, tracking_home):
    _, make, reference, single = setup
    result = run_step(PRETRAIN, make("two", batch_size=16, num_workers=2, tracking=True))
    assert result["training"]["world_size"] == 2 and result["training"]["steps"] == STEPS
    losses = _mlflow_losses(tracking_home, result["mlflow_run_id"])
    assert len(losses) == STEPS
    torch.testing.assert_close(losses, reference, rtol=1e-4, atol=1e-5)
    for key in ("loss", "mlm_accuracy", "nsp_accuracy"):
        assert result["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-4, abs=1e-5)
    run = mlflow.MlflowClient(f"sqlite:///{tracking_home / 'mlflow.db'}").get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["world_size"] == "2"
    # Re-running the finished command is a no-op; the run's name is taken for new runs without --resume.
    assert run_step(PRETRAIN, make("two", batch_size=16, num_workers=2))["started_at"] == result["started_at"]


def test_killed_worker_resumes_from_the_last_checkpoint(ray_session, setup, tracking_home, monkeypatch):
    """Checkpoints on S3 (--storage s3://...): the restarted worker group resumes from the one in the bucket."""
    from bert_core.io import storage
    from bert_core.launch.ray_train import run_name

    root, make, reference, _ = setup
    killed = make("killed", batch_size=16, num_workers=2, max_failures=1, tracking=True, storage="s3://ray-ckpt/runs")
    # A checkpoint copy of a process that is gone appears while the resumed group trains (a worker of an earlier
    # group, killed before it had read its copy, still alive when this group started): the workers delete it as
    # they finish.
    gone = subprocess.Popen(["true"])
    gone.wait()
    late_copy = ray_session / f"{RESTORE_PREFIX}{socket.gethostname()}-{gone.pid}-late"
    copies = lambda: set(ray_session.glob(f"{RESTORE_PREFIX}*"))  # noqa: E731
    before = copies()
    # rank 1 dies (os._exit) after step 5, first attempt only
    result = run_step(PRETRAIN, killed, hooks=[FailAtStep(5, rank=1, mode="exit"), MakeDirAtStep(7, str(late_copy))])
    assert copies() == before  # the late copy, and the resumed workers' own copies of step 3's checkpoint
    assert result["training"]["resumed_from"] is not None  # restarted from step 3's checkpoint
    saved = storage.list_files(f"s3://ray-ckpt/runs/{run_name(PRETRAIN, killed)}")
    assert any(name.startswith("step-00000003/") for name in saved), saved[:10]
    assert result["training"]["steps"] == STEPS
    assert (root / "killed" / "model.safetensors").is_file()
    torch.testing.assert_close(_mlflow_losses(tracking_home, result["mlflow_run_id"]), reference,
                               rtol=1e-4, atol=1e-5)
    # The run's name is taken: a new run under it needs --resume (or another name).
    with pytest.raises(BertPipelineError, match="already has state under .*pass --resume"):
        run_step(PRETRAIN, make("other", batch_size=16, num_workers=2, storage="s3://ray-ckpt/runs", run_name=run_name(PRETRAIN, killed)))


def test_paths_are_made_absolute_for_the_workers(tmp_path, monkeypatch):
    from bert_core.launch.run import absolutize

    monkeypatch.chdir(tmp_path)
    config = absolutize(PRETRAIN, PretrainConfig(data="shards/*.npz,s3://b/x/*.npz", output="out", model="bert_2_128_2",
                                       resume="latest"))
    assert config.data == f"{tmp_path}/shards/*.npz,s3://b/x/*.npz"
    assert config.output == f"{tmp_path}/out" and config.model == "bert_2_128_2" and config.resume == "latest"


def test_too_few_placeable_workers_fail_with_one_line(ray_session, setup):
    """3 workers of 1 CPU on a 2-CPU Ray: after --placement-timeout the run fails naming what is missing."""
    _, make, _, _ = setup
    started = time.monotonic()
    with pytest.raises(BertPipelineError, match=r"3 worker\(s\) of \{CPU: 1\} wanted, 2 placeable for \d+ s "
                                                r"\(--placement-timeout 8\): add nodes .* lower the minimum"):
        run_step(PRETRAIN, make("unplaceable", num_workers="3:4", placement_timeout=8.0))
    assert time.monotonic() - started < 60
