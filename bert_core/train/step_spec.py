"""What a launcher needs to know of a training step to run it in this process or on Ray Train.

Pretraining and fine-tuning each describe themselves with a `StepSpec` (bert_core.pretrain.step.PRETRAIN,
bert_core.finetune.step.FINETUNE); `bert_core.launch.run.run_step` runs either one the same way. The steps
themselves know nothing about Ray: the launcher calls `plan` once, on the driver (checks, input hashes, an
up-to-date output), then `work` on every worker with what that worker was given (`Worker`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from bert_core.io.tracking import Tracker
    from bert_core.train.checkpointing import CheckpointStore

# Called after every optimizer step with (the step just finished, whether this run resumed from a
# checkpoint): progress reporting, and the tests' fault injection (tests/fault_injection.py).
StepHook = Callable[[int, bool], None]


class Preemption(Protocol):
    """How a launcher tells a step what is coming to its worker group.

    A drain notice (a spot/preemption notice) for one of its nodes: the step checkpoints at once (nothing before
    the notice can be lost any more), trains on while the notice's deadline leaves room (`steps_left`),
    checkpoints again and `hold`s; the launcher restarts the group without that node from that last checkpoint,
    so no step is lost or redone and the notice window is not spent idle.

    Room for a larger group (an elastic group below its maximum, `may_grow`, whose nodes came back or joined):
    the step checkpoints at the next step boundary and trains on; the launcher's resize restarts the group from
    the latest checkpoint, so only the steps between that checkpoint and the resize are redone."""

    may_grow: bool  # the group is elastic and below its maximum size; the same on every worker

    def noticed(self, step: int) -> bool:
        """Called by every worker after the same steps; the same answer on all of them (a collective)."""
        ...

    def steps_left(self, step_seconds: float, checkpoint_seconds: float) -> int:
        """After the just-in-time checkpoint: how many more steps (of about `step_seconds` each) may run before
        the last checkpoint (about `checkpoint_seconds`) must start for it to be committed before the node goes.
        0: hold now (no deadline, or too little time). The step takes the least answer of its workers."""
        ...

    def grow_possible(self) -> bool:
        """Whether a larger group could start now: cheap, asked after every step while `may_grow`; True once per
        change. The step acts on rank 0's answer (the others may say False)."""
        ...

    def hold(self, step: int) -> None:
        """After the last checkpoint (at `step`) under a notice: wait until the launcher replaces the group. Never
        returns: raises when the group was not replaced in a bounded time (nothing waits forever for a node)."""
        ...


@dataclass(frozen=True)
class Plan:
    """The driver's decision before any worker starts."""

    inputs: dict[str, str]  # input URI -> sha256, hashed once by the driver
    done: dict[str, Any] | None = None  # the output's manifest when it already holds this exact result


@dataclass
class Worker:
    """What the launcher hands the step on one worker."""

    device: torch.device | None = None  # None: the step picks (cuda with --use-gpu, else cpu)
    store: CheckpointStore | None = None  # None: the step's own (local files)
    resume_dir: Path | None = None  # a checkpoint the launcher restored (Ray Train after a failure)
    # Where that checkpoint lives (its s3:// URI or shared path): resume_dir is a local copy that other
    # machines cannot read, so manifests and tags name this instead.
    resume_source: str | None = None
    # Called once the step has read resume_dir: the launcher deletes its local copy then, not at the end of the
    # run (held for hours, it is one more checkpoint on the node's disk, and it stays there when the worker is
    # killed: a restart kills every worker of the group).
    resume_done: Callable[[], None] | None = None
    hooks: tuple[StepHook, ...] = ()
    preemption: Preemption | None = None  # drain notices (Ray Train); None: none come


@dataclass(frozen=True)
class StepSpec:
    name: str
    config_type: type
    experiment: Callable[[Any], str]  # config -> MLflow experiment name
    plan: Callable[[Any], Plan]  # config -> Plan, on the driver
    work: Callable[[Any, Plan, Tracker, Worker], dict[str, Any]]  # on every worker; returns the output manifest
    path_fields: tuple[str, ...] = ()  # local paths in the config, made absolute for Ray workers
    name_fields: tuple[str, ...] = ()  # paths or names (zoo names): made absolute only when the path exists
    resumable: bool = False  # keeps checkpoints: a stable Ray run name per output, restored after failures
