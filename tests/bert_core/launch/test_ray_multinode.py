"""Pretraining on a real multi-node Ray cluster on loopback (ARCHITECTURE §9): a head that runs no training and
two worker nodes, each its own raylet with one CPU, so the two training workers land one on each node. Nodes
share no disk: shards, Ray Train's checkpoints (--storage), the output model and the tests' step records are
s3:// URIs on the moto server. One cluster serves both tests: a node the first one loses is started again
before the second (a new raylet with the same resources).

- A drain notice with a deadline (Ray's GCS drain API, reason PREEMPTION: what `ray drain-node` and a cloud's
  spot notice send) at step k: the workers checkpoint at once and hold (a 10 s notice leaves no room to train
  on: bert_core.launch.ray_train.DRAIN_MARGIN_S); the node goes before its deadline; Ray Train restarts the
  elastic group (--num-workers 1:2) on the remaining node from that checkpoint: every step runs exactly once.
- The raylet of a worker node SIGKILLed at step k, and the node started again later: the group shrinks to the
  remaining node instead of waiting for the lost one, redoes only the steps since the last checkpoint, grows
  back to two workers when the node returns (Ray Train's elastic resize, again from the latest checkpoint), and
  ends with the weights of a fixed-size uninterrupted run; MLflow holds the world size by step and both resizes.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from bert_core.io import storage
from bert_core.launch.run import run_step
from bert_core.model.weights import read_state_dict
from bert_core.pretrain.step import PRETRAIN, PretrainConfig, pretrain
from evaluation.step_timeline import RecordSteps, recorded_steps, recorded_timeline
from tests import multinode_cluster
from tests.fault_injection import SignalAtStep
from tests.synthetic_shards import tiny_model_config, write_shards

STEPS = 24
BUCKET = "multinode"
WATCHER_POLL_S = 0.5
WORKERS = ("node_a", "node_b")
RESIZE_S = 5.0  # --resize-interval of the run that grows back


@pytest.fixture(scope="module")
def s3_env():
    """moto on loopback and the environment every node gets; shards uploaded to S3; the reference: the same run
    in this process on one worker, never interrupted."""
    with tempfile.TemporaryDirectory() as tmp, multinode_cluster.moto_s3(
            {"RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S": str(WATCHER_POLL_S)}):
        storage.s3_client().create_bucket(Bucket=BUCKET)
        root = Path(tmp)
        local = write_shards(root / "shards", num_shards=2, per_shard=32, max_seq_length=32)
        storage.upload_dir(local, f"s3://{BUCKET}/shards")
        model = tiny_model_config(root / "tiny.json")  # dropout off

        def make(name: str, **overrides) -> PretrainConfig:
            base = dict(data=f"s3://{BUCKET}/shards", output=f"s3://{BUCKET}/{name}/model", model=str(model),
                        batch_size=8, num_steps=STEPS, lr=1e-3, optimizer="adamw", log_interval=5, ckpt_interval=5,
                        progress=False, tracking=False, storage=f"s3://{BUCKET}/ray", num_workers="1:2",
                        max_failures=1, eval_max_batches=2, placement_timeout=120.0,
                        dtype="float32")  # weights compared across world sizes: float32, on any CPU
            return PretrainConfig(**{**base, **overrides})

        pretrain(make("reference", output=str(root / "reference"), num_workers=1, ckpt_interval=0, storage=None))
        yield make, read_state_dict(root / "reference" / "model.safetensors")


@pytest.fixture(scope="module")
def nodes(s3_env):
    """The cluster (a head with 0 CPUs: no training there, two 1-CPU worker nodes) that the driver, this process,
    joins."""
    with multinode_cluster.joined_cluster(WORKERS) as nodes:
        yield nodes


@pytest.fixture
def cluster(nodes):
    """The cluster with both worker nodes up: one an earlier test lost joins again."""
    for name in WORKERS:
        if not nodes.alive(name):
            nodes.restart_worker(name)
    # And both nodes taking work: an earlier test's workers may still hold a CPU, a node that just joined may not
    # start workers yet, and an elastic 1:2 run started then begins with one worker (seen under load), which is
    # not the run these tests describe.
    for name in WORKERS:
        nodes.ready(name)
    return nodes


def _weights(uri: str) -> dict[str, torch.Tensor]:
    with tempfile.TemporaryDirectory() as tmp:
        storage.download_file(storage.join(uri, "model.safetensors"), Path(tmp) / "model.safetensors")
        return read_state_dict(Path(tmp) / "model.safetensors")


def _assert_same_weights(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert got.keys() == expected.keys()
    for name in got:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def _when_signalled(uri: str, act, timeout: float = 240.0) -> threading.Thread:
    """Run act(record) in a thread once a SignalAtStep record appears at `uri`."""
    def wait() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if storage.exists(uri):
                act(json.loads(storage.read_text(uri)))
                return
            time.sleep(0.2)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def _checkpoint_copies() -> set[str]:
    """Local copies of restored checkpoints on this machine (every node of the loopback cluster): ours, and the
    ones Checkpoint.as_directory makes."""
    from bert_core.launch.ray_train import RESTORE_PREFIX

    root = Path(tempfile.gettempdir())
    return {p.name for pattern in (f"{RESTORE_PREFIX}*", "checkpoint_tmp_*") for p in root.glob(pattern) if p.is_dir()}


def _whose(copy: str) -> str:
    """The process a checkpoint copy's name gives, as /proc sees it now (for a failure's message)."""
    import socket

    from bert_core.launch.ray_train import RESTORE_PREFIX

    pid = copy.removeprefix(f"{RESTORE_PREFIX}{socket.gethostname()}-").split("-")[0]
    if not pid.isdigit():
        return "a copy Checkpoint.as_directory made"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return f"pid {pid}: state {stat.rsplit(')', 1)[1].split()[0]}, {stat[stat.index('('):stat.rindex(')') + 1]}"
    except (OSError, ValueError):
        return f"pid {pid}: gone"


def test_drain_notice_loses_no_step(cluster, s3_env):
    make, reference = s3_env
    name = "drained"
    records, signal_uri = f"s3://{BUCKET}/{name}/steps", f"s3://{BUCKET}/{name}/signal.json"
    config = make(name, ckpt_interval=1000, run_name=name)  # no periodic checkpoint: the only one is the just-in-time one
    drain_s = 10.0

    def node_goes(record: dict) -> None:  # the cloud takes the node shortly before the deadline
        time.sleep(max(0.0, record["deadline_ms"] / 1000 - time.time() - 3.0))
        cluster.kill_raylet(cluster.name_of(record["node_id"]))

    watcher = _when_signalled(signal_uri, node_goes)
    result = run_step(PRETRAIN, config, hooks=[RecordSteps(records),
                                                SignalAtStep(6, signal_uri, drain_s=drain_s, watcher_poll_s=WATCHER_POLL_S)])
    watcher.join(timeout=30)
    steps = recorded_steps(records)
    assert [s for s, _ in steps] == list(range(1, STEPS + 1))  # no gap, nothing redone
    noticed = next(s for s, w in steps if w == 1) - 1  # the step the just-in-time checkpoint holds
    assert 6 <= noticed < 12 and {w for s, w in steps if s <= noticed} == {2}
    assert result["training"]["world_size"] == 1 and result["training"]["resumed_from"] is not None
    saved = storage.list_files(f"s3://{BUCKET}/ray")
    assert any(f"step-{noticed:08d}/" in name for name in saved), saved[:20]
    _assert_same_weights(_weights(config.output), reference)


def test_node_lost_without_notice_shrinks_the_group_which_grows_back_when_it_returns(cluster, s3_env, tmp_path,
                                                                                    monkeypatch):
    make, reference = s3_env
    name = "killed"
    records = f"s3://{BUCKET}/{name}/steps"
    lost_uri, shrunk_uri = f"s3://{BUCKET}/{name}/lost.json", f"s3://{BUCKET}/{name}/shrunk.json"
    # MLflow on a local SQLite file: one machine here; a real cluster uses a tracking server.
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    config = make(name, run_name=name, tracking=True, resize_interval=RESIZE_S)
    lost: list[str] = []

    def machine_vanishes(record: dict) -> None:
        lost.append(cluster.name_of(record["node_id"]))
        cluster.kill_raylet(lost[0])

    def machine_returns(record: dict) -> None:
        cluster.restart_worker(lost[0])

    watchers = [_when_signalled(lost_uri, machine_vanishes), _when_signalled(shrunk_uri, machine_returns)]
    copies_before = _checkpoint_copies()
    # Step 12: rank 1's node is killed (the last checkpoint is step 10's). Step 17 of the shrunk group: the node
    # comes back, and the one worker waits there, inside a hook, for Ray Train's resize: so it reaches no step
    # boundary to take the checkpoint a group that can grow takes (tested in process in test_pretrain.py), and the
    # grow resumes from the periodic checkpoint of step 15, which keeps the redone steps exact here.
    result = run_step(PRETRAIN, config, hooks=[RecordSteps(records), SignalAtStep(12, lost_uri, hold=True),
                                                SignalAtStep(17, shrunk_uri, rank=0, world=1, hold=True)])
    for watcher in watchers:
        watcher.join(timeout=30)
    timeline = recorded_timeline(records)
    assert sorted({r["step"] for r in timeline}) == list(range(1, STEPS + 1))  # no gap
    # One attempt per worker group, in order: (world size, first step, last step). Redone: steps 11-12 (since
    # the checkpoint of step 10) after the loss, 16-17 (since step 15's) when the group grew; nothing else.
    attempts: dict[str, list[dict]] = {}
    for record in timeline:
        attempts.setdefault(record["attempt"], []).append(record)
    ranges = [(steps[0]["world"], steps[0]["step"], steps[-1]["step"]) for steps in attempts.values()]
    assert ranges == [(2, 1, 12), (1, 11, 17), (2, 16, STEPS)], ranges
    for steps in attempts.values():
        assert [r["step"] for r in steps] == list(range(steps[0]["step"], steps[-1]["step"] + 1))
        assert {r["world"] for r in steps} == {steps[0]["world"]}
    assert result["training"]["world_size"] == 2
    _assert_same_weights(_weights(config.output), reference)
    # The shrunk group's worker, killed by the resize, had read its local copy of step 10's checkpoint: deleted
    # then, it is not left on the node's disk (Ray's as_directory left one per killed worker).
    left = _checkpoint_copies() - copies_before
    assert not left, {name: _whose(name) for name in left}
    # Both resizes are in the run's MLflow record: the world size by step and one readable line each.
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}")
    history = client.get_metric_history(result["mlflow_run_id"], "world_size")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.timestamp)] == [(0, 2.0), (10, 1.0), (15, 2.0)]
    tags = client.get_run(result["mlflow_run_id"]).data.tags
    assert tags["resize.1"].startswith("pretrain step 10: world size 2 -> 1 (worker rank 1 failed: "), tags
    assert tags["resize.2"] == "pretrain step 15: world size 1 -> 2 (resources for 2 workers are available)", tags
