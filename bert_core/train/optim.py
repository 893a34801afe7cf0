"""Optimizers (AdamW, BERT's Adam, LAMB), BERT's weight-decay exclusion, and the warmup + linear decay schedule.

- `adamw`: torch's AdamW (decoupled weight decay, bias-corrected moments).
- `bertadam`: Google's `AdamWeightDecayOptimizer` (optimization.py in google-research/bert), which
  GluonNLP calls `bertadam`: decoupled weight decay and no bias correction of the moments.
- `lamb`: LAMB (You et al., "Large Batch Optimization for Deep Learning", as NVIDIA's implementation):
  the Adam direction plus weight decay, scaled per parameter tensor by the trust ratio
  ||w|| / ||update||. Tensors excluded from weight decay are also excluded from the trust ratio
  (as TF-Addons' LAMB does by default): a LayerNorm bias starts at zero, where the ratio is meaningless.

Bias and LayerNorm parameters get no weight decay, as in Google's BERT (`exclude_from_weight_decay`).
No optimizer here has a default learning rate: pretraining's comes from the rule in bert_core/pretrain/recipe.py,
fine-tuning's from FinetuneConfig.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from bert_core.errors import BertPipelineError
from bert_core.train.config import OPTIMIZERS

FUSED_DEVICES = ("cpu", "cuda")  # where torch's fused AdamW kernel runs


def no_decay(name: str) -> bool:
    """Google's rule: no weight decay on biases and LayerNorm parameters."""
    return name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and biases + LayerNorm (no decay, no LAMB adaptation).

    named_parameters() lists a tied tensor (MLM decoder = word embeddings) once, under its first name.
    """
    # By module type as well as by name, so a LayerNorm not named "LayerNorm" is excluded too.
    norm_params = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    decay, rest = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (rest if no_decay(name) or id(param) in norm_params else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay, "adapt": True},
        {"params": rest, "weight_decay": 0.0, "adapt": False},
    ]


class _DecoupledAdam(torch.optim.Optimizer):
    """Adam moments with decoupled weight decay; subclasses choose bias correction and the step's scale."""

    bias_correction = True

    def __init__(self, params: Iterable, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _scale(self, param: torch.Tensor, update: torch.Tensor, group: dict) -> float:
        return 1.0

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] = state.get("step", 0) + 1  # get: BertAdam states saved before it counted
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                if self.bias_correction:
                    m, v = m / (1 - b1 ** state["step"]), v / (1 - b2 ** state["step"])
                update = m / (v.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                p.add_(update, alpha=-group["lr"] * self._scale(p, update, group))
        return loss


class BertAdam(_DecoupledAdam):
    """Google BERT's AdamWeightDecayOptimizer: Adam without bias correction, decoupled weight decay.

        m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  w -= lr (m / (sqrt(v) + eps) + wd w)
    """

    bias_correction = False

    def __init__(self, params: Iterable, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, lr, betas, eps, weight_decay)


class Lamb(_DecoupledAdam):
    """LAMB: per-tensor trust ratio ||w|| / ||adam_update + wd w|| on bias-corrected Adam moments.

    A group with `adapt=False` (biases, LayerNorm) takes the plain Adam-W update (ratio 1); a ratio
    whose numerator or denominator is zero is 1, as in the paper and NVIDIA's kernel.
    """

    def __init__(self, params: Iterable, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, lr, betas, eps, weight_decay)

    def _scale(self, param: torch.Tensor, update: torch.Tensor, group: dict) -> float:
        return trust_ratio(param, update) if group.get("adapt", True) else 1.0


def trust_ratio(weight: torch.Tensor, update: torch.Tensor) -> float:
    w_norm = float(weight.norm())
    u_norm = float(update.norm())
    return w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float = 0.01, eps: float = 1e-6,
                    betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.Optimizer:
    groups = parameter_groups(model, weight_decay)
    if name == "adamw":
        # AdamW does not know the `adapt` key, but keeps unknown group keys harmlessly. torch's fused kernel
        # updates each tensor in one pass: at BERT-base on 2 CPU cores 0.07 s per step against 0.30 s for the
        # per-tensor loop (docs/benchmarks-pretrain.md), and the same maths.
        fused = all(p.device.type in FUSED_DEVICES for group in groups for p in group["params"])
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused or None)
    if name == "bertadam":
        return BertAdam(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    raise BertPipelineError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def warmup_linear(step: int, total_steps: int, warmup_steps: int) -> float:
    """LR multiplier for the update with 0-based index `step`.

    Warmup rises linearly to 1 at update `warmup_steps - 1` ((step + 1) / warmup, so the first update
    does not waste a zero LR); then linear decay (total - step) / (total - warmup), reaching
    1 / (total - warmup) at the last update. This is GluonNLP's pretraining schedule with 0-based steps.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int,
                    warmup_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    if total_steps <= 0:
        raise BertPipelineError(f"the number of training steps must be positive, got {total_steps}")
    if not 0.0 <= warmup_ratio <= 1.0:
        raise BertPipelineError(f"--warmup-ratio must be in [0, 1], got {warmup_ratio}")
    warmup = math.floor(total_steps * warmup_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_linear(s, total_steps, warmup))


def folds_clipping(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer` can take the clipping factor into its own step (see clip_grad_norm): torch's fused
    Adam and AdamW divide each gradient by their `grad_scale` as they read it, the hook GradScaler uses."""
    return isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and bool(optimizer.defaults.get("fused"))


def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float,
                   into: torch.optim.Optimizer | None = None) -> torch.Tensor:
    """Global gradient-norm clipping (Google clips by the global norm, 1.0); returns the norm before
    clipping. max_norm <= 0 only measures. Non-finite norms are returned, not clipped: the caller skips.

    With `into` (an optimizer for which folds_clipping holds, and no loss scaler using the same hook), the
    gradients are not rescaled here: the factor, clip_grad_norm_'s max_norm / (norm + 1e-6) capped at 1, becomes
    the optimizer's `grad_scale` for its next step, which the caller runs and then clears (release_clipping).
    That saves a pass over every gradient: 52 ms of a 3 s BERT-base bfloat16 step on one CPU core (1.7%,
    docs/benchmarks-pretrain.md); the update equals clipping first (test_optim)."""
    if into is not None and not folds_clipping(into):
        # Anything else would ignore the factor: training would run unclipped without a word.
        raise BertPipelineError(f"clip_grad_norm(into=...): {type(into).__name__} does not apply a grad_scale "
                                "(torch's fused Adam or AdamW does); clip the gradients instead (into=None)")
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return torch.zeros(())
    if max_norm > 0 and into is None:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    if max_norm > 0:
        # The kernel divides by grad_scale: the reciprocal of the factor, a float32 tensor on the gradients' device.
        into.grad_scale = ((norm.float() + 1e-6) / max_norm).clamp(min=1.0)
    return norm


def release_clipping(optimizer: torch.optim.Optimizer) -> None:
    """Drop a clipping factor clip_grad_norm(into=optimizer) left for the optimizer's step."""
    vars(optimizer).pop("grad_scale", None)
