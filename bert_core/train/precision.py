"""Mixed precision: `--dtype auto|float32|float16|bfloat16`.

`auto` (the default) is resolved once per run, for its device, by `resolve_precision`: bfloat16 autocast where
the device computes bfloat16 natively (a CUDA GPU of compute capability >= 8.0; a CPU whose instruction set has
AVX512-BF16 or AMX-BF16, as torch's own CPU feature detection reports it), float16 with loss scaling on CUDA
GPUs with float16 tensor cores but no bfloat16 (compute capability 7.x), float32 otherwise. Elsewhere bfloat16
would be emulated (on an AVX512 CPU without BF16 it runs slower than float32), so auto does not pick it there.
The choice carries its reason, which the run logs (one line) and records in its manifest and MLflow params.

Weights, gradients and optimizer state stay float32 in every mode (autocast casts per op; the model
is never `.half()`ed), so updates smaller than a half-precision ulp are not lost. What else stays float32
under autocast, each checked by a test (tests/bert_core/train/test_precision.py, tests/bert_core/model):
the losses (logits are cast to float32 before the log-softmax), every LayerNorm's statistics and the
residual stream between layers, and the attention softmax's sums (torch's CPU and CUDA kernels accumulate
reduced-precision inputs in float32).

- float16: autocast + dynamic loss scaling with torch.amp.GradScaler's semantics. A step whose
  gradients overflow is skipped (the weights are untouched, never NaN), the scale is halved, and the
  skip is logged with the step number; after `growth_interval` clean steps the scale doubles.
- bfloat16: autocast only; bfloat16 has float32's exponent range, so no scaling is needed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from bert_core.errors import BertPipelineError
from bert_core.train.config import COMPUTE_DTYPES, DTYPES

log = logging.getLogger(__name__)

# x86 instruction-set extensions that compute bfloat16 natively (torch.cpu.get_capabilities() names).
CPU_BF16_FEATURES = ("avx512_bf16", "amx_bf16")
BF16_CUDA_CAPABILITY = (8, 0)  # Ampere: bfloat16 tensor cores
FP16_CUDA_CAPABILITY = (7, 0)  # Volta: float16 tensor cores


@dataclass(frozen=True)
class PrecisionChoice:
    """The compute precision of a run, what was asked for, and why this one."""

    dtype: str  # float32 | float16 | bfloat16
    requested: str  # the --dtype given (auto, or the dtype itself)
    reason: str

    def describe(self) -> str:
        mode = {"float32": "float32", "float16": "float16 autocast with dynamic loss scaling",
                "bfloat16": "bfloat16 autocast"}[self.dtype]
        kept = ("" if self.dtype == "float32" else "; weights, optimizer state, losses, softmax sums and LayerNorm "
                "statistics stay float32")
        return f"precision: {mode} (--dtype {self.requested}: {self.reason}){kept}"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _cpu_capabilities() -> Mapping[str, Any]:
    return torch.cpu.get_capabilities()


def resolve_precision(requested: str, device: torch.device | str, *,
                      cpu_capabilities: Mapping[str, Any] | None = None,
                      cuda_capability: tuple[int, int] | None = None,
                      cuda_name: str | None = None) -> PrecisionChoice:
    """The precision a run of --dtype `requested` computes in on `device`. The hardware facts are detected
    (torch.cpu.get_capabilities(), torch.cuda.get_device_capability()) unless given, as tests give them."""
    if requested not in DTYPES:
        raise BertPipelineError(f"--dtype must be one of {', '.join(DTYPES)}, got {requested!r}")
    device = torch.device(device)
    if requested != "auto":
        return PrecisionChoice(requested, requested, "given")
    if device.type == "cuda":
        if cuda_capability is None:
            cuda_capability = tuple(torch.cuda.get_device_capability(device))
            cuda_name = cuda_name or torch.cuda.get_device_name(device)
        gpu = f"{cuda_name or 'this GPU'} (compute capability {cuda_capability[0]}.{cuda_capability[1]})"
        if tuple(cuda_capability) >= BF16_CUDA_CAPABILITY:
            return PrecisionChoice("bfloat16", requested, f"{gpu} computes bfloat16 natively")
        if tuple(cuda_capability) >= FP16_CUDA_CAPABILITY:
            return PrecisionChoice("float16", requested, f"{gpu} has float16 tensor cores but no bfloat16 "
                                   "(compute capability < 8.0)")
        return PrecisionChoice("float32", requested, f"{gpu} has no float16 tensor cores (compute capability < 7.0)")
    if device.type == "cpu":
        caps = _cpu_capabilities() if cpu_capabilities is None else cpu_capabilities
        found = [name for name in CPU_BF16_FEATURES if caps.get(name)]
        if found:
            return PrecisionChoice("bfloat16", requested, f"this CPU computes bfloat16 natively "
                                   f"({', '.join(found)})")
        arch = caps.get("architecture", "this CPU")
        return PrecisionChoice("float32", requested, f"this CPU ({arch}) has neither AVX512-BF16 nor AMX-BF16, so "
                               "bfloat16 would be emulated, slower than float32")
    return PrecisionChoice("float32", requested, f"no measured mixed precision for {device.type} devices")


def agreed(choices: Sequence[PrecisionChoice]) -> PrecisionChoice:
    """One precision for all workers of a run (each resolved --dtype auto on its own device): theirs when they
    agree; else the widest every one of them computes natively: float16 when all are GPUs (a mix of
    generations), float32 otherwise. An explicit --dtype is the same everywhere already."""
    first = choices[0]
    if all(c.dtype == first.dtype for c in choices):
        return first
    dtypes = sorted({c.dtype for c in choices})
    dtype = "float16" if "float32" not in dtypes else "float32"
    return PrecisionChoice(dtype, first.requested, f"the workers' devices differ ({', '.join(dtypes)} each on its "
                           f"own); {dtype} is what all of them compute well")



@dataclass
class StepOutcome:
    applied: bool  # False when the optimizer step was skipped for an fp16 overflow
    loss_scale: float  # the scale after this step's update (1.0 without scaling)


class Precision:
    """Autocast context + loss scaling for one device and dtype."""

    def __init__(self, dtype: str, device: torch.device | str, init_scale: float = 2.0 ** 16,
                 growth_interval: int = 2000):
        if dtype not in COMPUTE_DTYPES:
            if dtype == "auto":
                raise BertPipelineError("Precision needs a resolved dtype: resolve --dtype auto with "
                                        "resolve_precision(requested, device) first")
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
