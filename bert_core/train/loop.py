"""The task-agnostic optimizer step: unscale, clip, non-finite check, step (or fp16 skip), schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bert_core.errors import BertPipelineError
from bert_core.train.optim import clip_grad_norm, folds_clipping, release_clipping
from bert_core.train.precision import Precision

# How often a run without a progress bar (a task log, `ray job submit`, nohup) logs where it is: pretraining's
# steps and fine-tuning's updates, which otherwise go quiet for the whole run or epoch.
PROGRESS_LINE_S = 30.0


class NonFiniteLossError(BertPipelineError):
    """The loss or the gradients became NaN/inf without loss scaling: training diverged."""


@dataclass
class StepResult:
    applied: bool  # False: an fp16 overflow skipped this update
    grad_norm: float  # global norm before clipping (after unscaling)
    loss_scale: float
    lr: float  # the learning rate this update used


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   scheduler: torch.optim.lr_scheduler.LRScheduler, precision: Precision,
                   max_grad_norm: float, step: int, loss: float | None = None) -> StepResult:
    """Finish one update after the backward passes of all micro-batches.

    With fp16 loss scaling an overflow is expected now and then: GradScaler skips the update and
    lowers the scale (Precision.step logs it). Without scaling a non-finite value means divergence:
    raise before the optimizer touches the weights, naming the step.
    """
    lr = optimizer.param_groups[0]["lr"]
    precision.unscale_(optimizer)
    # A loss scaler hands the optimizer its own grad_scale; without one the clipping factor can go there.
    fold = precision.scaler is None and folds_clipping(optimizer)
    try:
        norm = float(clip_grad_norm(model.parameters(), max_grad_norm, into=optimizer if fold else None))
        if precision.scaler is None and not (math.isfinite(norm) and (loss is None or math.isfinite(loss))):
            optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(
                f"step {step}: the loss is {loss} and the gradient norm {norm} in {precision.dtype} "
                "(training diverged); lower --lr, raise --warmup-ratio, or clip with --max-grad-norm")
        outcome = precision.step(optimizer, step)
    finally:
        release_clipping(optimizer)
    # The schedule follows the step count, skipped steps included, so step N always has the same LR.
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(outcome.applied, norm, outcome.loss_scale, lr)
