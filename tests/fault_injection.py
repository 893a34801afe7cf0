"""Fault injection for training tests: step hooks (bert_core.train.step_spec.StepHook) that fail a run at a
chosen step, as a crash or a killed worker would, record the steps a run takes, or tell the test that a step
was reached (for a node to be drained or killed from outside). They live here, not in the training loop:
tests pass them to `pretrain(..., hooks=[...])` or `run_step(..., hooks=[...])`, which ships them to Ray
workers pickled. Nodes of a multi-node test share no disk: records go to S3 (the tests' moto server). The step
records (RecordSteps) live in evaluation.step_timeline, which the elastic-recovery benchmark uses too."""

from __future__ import annotations

import json
import os
import sys
import time

import ray.cloudpickle

from bert_core.io import storage
from bert_core.train import dist
from evaluation.loopback_cluster import drain_node
from evaluation.step_timeline import RecordSteps, recorded_steps

__all__ = ["FailAtStep", "MakeDirAtStep", "RecordSteps", "SignalAtStep", "recorded_steps"]


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


class MakeDirAtStep:
    """After step `step` of a resumed attempt, on rank 0: create the directory `path` (on the worker's machine),
    e.g. a checkpoint copy some killed worker left while this run goes on."""

    def __init__(self, step: int, path: str):
        self.step, self.path = step, path

    def __call__(self, step: int, resumed: bool) -> None:
        if resumed and step == self.step and dist.rank() == 0:
            os.makedirs(self.path, exist_ok=True)


class SignalAtStep:
    """After step `step` on worker `rank`: write {"node_id", "step"} of this worker's Ray node to `uri`, for the test to
    act on that node. On the first attempt only; with `world`, instead on any attempt whose group has that many
    workers (e.g. world=1: once a group has shrunk to one worker). `drain_s`: also drain the node as a spot notice
    does (deadline `drain_s` seconds ahead) and wait until Ray Train's preemption watcher has had time to see it.
    `hold`: then stop this worker here until its node is killed or Ray Train replaces the group; after
    HOLD_LIMIT_S, fail (a test waiting for a replacement that never comes must not wait forever)."""

    HOLD_LIMIT_S = 300.0

    def __init__(self, step: int, uri: str, rank: int = 1, drain_s: float | None = None, hold: bool = False,
                 watcher_poll_s: float = 0.5, world: int | None = None):
        self.step, self.uri, self.rank, self.drain_s, self.hold = step, uri, rank, drain_s, hold
        self.watcher_poll_s, self.world = watcher_poll_s, world

    def __call__(self, step: int, resumed: bool) -> None:
        attempt_ok = not resumed if self.world is None else dist.world_size() == self.world
        if not attempt_ok or step != self.step or dist.rank() != self.rank:
            return
        node_id = ray.get_runtime_context().get_node_id()
        record = {"node_id": node_id, "step": step}
        if self.drain_s is not None:
            record["deadline_ms"] = drain_node(node_id, self.drain_s, "spot instance reclaimed (test)")
        storage.write_text(self.uri, json.dumps(record))
        if self.drain_s is not None:
            time.sleep(3 * self.watcher_poll_s)  # the notice reaches the workers within a poll or two
        limit = time.monotonic() + self.HOLD_LIMIT_S
        while self.hold:
            if time.monotonic() > limit:
                raise RuntimeError(f"step {step}: held {self.HOLD_LIMIT_S:.0f} s and the worker group was not "
                                   "replaced")
            time.sleep(1.0)


# Ray workers need not be able to import the tests package: the hook travels by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
