"""Fault injection for training tests: step hooks (bert_core.train.step_spec.StepHook) that fail a run at a
chosen step, as a crash or a killed worker would, record the steps a run takes, or tell the test that a step
was reached (for a node to be drained or killed from outside). They live here, not in the training loop:
tests pass them to `pretrain(..., hooks=[...])` or `run_step(..., hooks=[...])`, which ships them to Ray
workers pickled. Nodes of a multi-node test share no disk: records go to S3 (the tests' moto server)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import ray.cloudpickle

from bert_core.io import storage
from bert_core.train import dist


class FailAtStep:
    """After optimizer step `step` on worker `rank`: raise (mode "raise") or die at once with os._exit(1)
    (mode "exit", as a killed worker). Only in a run that did not resume, i.e. on the first attempt."""

    def __init__(self, step: int, rank: int = 0, mode: str = "raise"):
        self.step, self.rank, self.mode = step, rank, mode

    def __call__(self, step: int, resumed: bool) -> None:
        if resumed or step != self.step or dist.rank() != self.rank:
            return
        if self.mode == "exit":
            os._exit(1)
        raise RuntimeError(f"injected failure at step {step} on rank {self.rank}")


class RecordSteps:
    """Rank 0 writes one object per optimizer step under `prefix` (s3://...): `<step>-<unique>` holding the world
    size, so a test can tell which steps ran, how often, and on how many workers (read with `recorded_steps`)."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def __call__(self, step: int, resumed: bool) -> None:
        if dist.rank() == 0:
            storage.write_text(storage.join(self.prefix, f"{step:05d}-{uuid.uuid4().hex[:8]}"),
                               json.dumps({"world": dist.world_size()}))


def recorded_steps(prefix: str) -> list[tuple[int, int]]:
    """(step, world size) of every step RecordSteps recorded, in step order (a redone step appears twice)."""
    return sorted((int(name.split("-")[0]), json.loads(storage.read_text(storage.join(prefix, name)))["world"])
                  for name in storage.list_files(prefix))


class SignalAtStep:
    """After step `step` on worker `rank` (first attempt only): write {"node_id", "step"} of this worker's Ray node
    to `uri`, for the test to act on that node. `drain_s`: also drain the node as a spot notice does (Ray's GCS
    drain API, reason PREEMPTION, deadline `drain_s` seconds ahead) and wait until Ray Train's preemption
    watcher has had time to see it. `hold`: then stop this worker here (until its node is killed)."""

    def __init__(self, step: int, uri: str, rank: int = 1, drain_s: float | None = None, hold: bool = False,
                 watcher_poll_s: float = 0.5):
        self.step, self.uri, self.rank, self.drain_s, self.hold = step, uri, rank, drain_s, hold
        self.watcher_poll_s = watcher_poll_s

    def __call__(self, step: int, resumed: bool) -> None:
        if resumed or step != self.step or dist.rank() != self.rank:
            return
        node_id = ray.get_runtime_context().get_node_id()
        record = {"node_id": node_id, "step": step}
        if self.drain_s is not None:
            from ray.core.generated import autoscaler_pb2

            deadline_ms = int((time.time() + self.drain_s) * 1000)
            accepted, why = ray._private.worker.global_worker.gcs_client.drain_node(
                node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
                "spot instance reclaimed (test)", deadline_ms)
            assert accepted, why
            record["deadline_ms"] = deadline_ms
        storage.write_text(self.uri, json.dumps(record))
        if self.drain_s is not None:
            time.sleep(3 * self.watcher_poll_s)  # the notice reaches the workers within a poll or two
        while self.hold:
            time.sleep(1.0)


# Ray workers need not be able to import the tests package: the hook travels by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
