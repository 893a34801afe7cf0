"""Mixed precision: `--dtype float32|float16|bfloat16`.

Weights, gradients and optimizer state stay float32 in every mode (autocast casts per op; the model
is never `.half()`ed), so updates smaller than a half-precision ulp are not lost.

- float16: autocast + dynamic loss scaling with torch.amp.GradScaler's semantics. A step whose
  gradients overflow is skipped (the weights are untouched, never NaN), the scale is halved, and the
  skip is logged with the step number; after `growth_interval` clean steps the scale doubles.
- bfloat16: autocast only; bfloat16 has float32's exponent range, so no scaling is needed.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch

from bert_core.errors import BertPipelineError
from bert_core.train.config import DTYPES

log = logging.getLogger(__name__)



@dataclass
class StepOutcome:
    applied: bool  # False when the optimizer step was skipped for an fp16 overflow
    loss_scale: float  # the scale after this step's update (1.0 without scaling)


class Precision:
    """Autocast context + loss scaling for one device and dtype."""

    def __init__(self, dtype: str, device: torch.device | str, init_scale: float = 2.0 ** 16,
                 growth_interval: int = 2000):
        if dtype not in DTYPES:
            raise BertPipelineError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        self.dtype = dtype
        self.device_type = torch.device(device).type
        if dtype == "bfloat16" and self.device_type == "cuda" and not torch.cuda.is_bf16_supported():
            raise BertPipelineError("--dtype bfloat16 needs a GPU with bfloat16 support (Ampere or newer); "
                                    "use --dtype float16 on this GPU")
        self.scaler = (torch.amp.GradScaler(self.device_type, init_scale=init_scale,
                                            growth_interval=growth_interval)
                       if dtype == "float16" else None)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype == "float32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=getattr(torch, self.dtype))

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the scale in place (before clipping, so the clip sees true norms)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, step: int) -> StepOutcome:
        """Apply the optimizer step unless the scaled gradients overflowed; update the scale."""
        if self.scaler is None:
            optimizer.step()
            return StepOutcome(True, 1.0)
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        after = self.scaler.get_scale()
        # GradScaler lowers the scale exactly when it found inf/NaN gradients and skipped the step.
        applied = after >= before
        if not applied:
            log.warning("step %d: fp16 gradient overflow, optimizer step skipped; loss scale %g -> %g",
                        step, before, after)
        return StepOutcome(applied, after)

    @property
    def loss_scale(self) -> float:
        return self.scaler.get_scale() if self.scaler is not None else 1.0

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
