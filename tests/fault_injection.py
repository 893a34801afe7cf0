"""Fault injection for training tests: a step hook (bert_core.train.step_spec.StepHook) that fails a run at a
chosen step, as a crash or a killed worker would. It lives here, not in the training loop: tests pass it to
`pretrain(..., hooks=[...])` or `run_step(..., hooks=[...])`, which ships it to Ray workers pickled."""

from __future__ import annotations

import os
import sys

import ray.cloudpickle

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


# Ray workers need not be able to import the tests package: the hook travels by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
