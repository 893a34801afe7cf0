"""Mixed precision: fp16 overflow skips exactly that step; fp32 divergence is an error; master weights stay fp32;
`--dtype auto` follows the hardware (detected features given as fake inputs)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from bert_core.errors import BertPipelineError
from bert_core.train.loop import NonFiniteLossError, optimizer_step
from bert_core.train.optim import build_optimizer, build_scheduler
from bert_core.train.precision import Precision, PrecisionChoice, agreed, resolve_precision


def _setup(dtype: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    opt = build_optimizer(model, "adamw", lr=1e-2, weight_decay=0.0)
    sched = build_scheduler(opt, total_steps=10, warmup_ratio=0.0)
    return model, opt, sched, Precision(dtype, "cpu", init_scale=1024.0)


def _backward(model, precision, overflow: bool = False) -> float:
    with precision.autocast():
        loss = model(torch.randn(3, 4)).float().pow(2).mean()
    precision.scale(loss).backward()
    if overflow:
        model[0].weight.grad[0, 0] = float("inf")
    return float(loss.detach())


def test_fp16_overflow_skips_exactly_that_step(caplog):
    model, opt, sched, precision = _setup("float16")
    results, snapshots = [], []
    with caplog.at_level(logging.WARNING, logger="bert_core.train.precision"):
        for step in range(1, 5):
            snapshots.append([p.detach().clone() for p in model.parameters()])
            loss = _backward(model, precision, overflow=step == 3)
            results.append(optimizer_step(model, opt, sched, precision, 1.0, step, loss))
    after = [p.detach().clone() for p in model.parameters()]
    assert [r.applied for r in results] == [True, True, False, True]
    assert [r.loss_scale for r in results] == [1024.0, 1024.0, 512.0, 512.0]
    # Step 3 left every weight as it was; steps 2 and 4 changed them; nothing is NaN.
    assert all(torch.equal(a, b) for a, b in zip(snapshots[2], snapshots[3]))
    assert not all(torch.equal(a, b) for a, b in zip(snapshots[3], after))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "step 3" in messages[0] and "1024 -> 512" in messages[0]
    assert precision.state_dict()["scale"] == 512.0


def test_fp32_non_finite_is_an_error_naming_the_step():
    model, opt, sched, precision = _setup("float32")
    before = [p.detach().clone() for p in model.parameters()]
    loss = _backward(model, precision, overflow=True)
    with pytest.raises(NonFiniteLossError, match=r"step 7: .* gradient norm (inf|nan) in float32"):
        optimizer_step(model, opt, sched, precision, 1.0, 7, loss)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_bf16_autocast_without_scaling():
    model, opt, sched, precision = _setup("bfloat16")
    assert precision.scaler is None and precision.loss_scale == 1.0
    with precision.autocast():
        assert model[0](torch.randn(2, 4)).dtype == torch.bfloat16
    loss = _backward(model, precision)
    result = optimizer_step(model, opt, sched, precision, 1.0, 1, loss)
    assert result.applied and model[0].weight.dtype == torch.float32


def test_unknown_dtype():
    with pytest.raises(BertPipelineError, match="--dtype must be one of"):
        Precision("float8", "cpu")


# --------------------------------------------------------------------------- --dtype auto


XEON_SPR = {"architecture": "x86_64", "avx512_f": True, "avx512_bf16": True, "amx_bf16": True, "amx_tile": True}
EPYC_ZEN4 = {"architecture": "x86_64", "avx512_f": True, "avx512_bf16": True, "amx_bf16": False}
SKYLAKE = {"architecture": "x86_64", "avx512_f": True, "avx512_bf16": False, "amx_bf16": False}
ARM = {"architecture": "aarch64", "neon": True}


@pytest.mark.parametrize("caps, dtype, why", [
    (XEON_SPR, "bfloat16", "natively (avx512_bf16, amx_bf16)"),
    (EPYC_ZEN4, "bfloat16", "natively (avx512_bf16)"),
    ({**SKYLAKE, "amx_bf16": True}, "bfloat16", "natively (amx_bf16)"),
    (SKYLAKE, "float32", "neither AVX512-BF16 nor AMX-BF16"),
    (ARM, "float32", "this CPU (aarch64) has neither"),
    ({}, "float32", "neither"),
])
def test_auto_on_cpu_follows_the_detected_features(caps, dtype, why):
    choice = resolve_precision("auto", "cpu", cpu_capabilities=caps)
    assert (choice.dtype, choice.requested) == (dtype, "auto") and why in choice.reason
    assert f"--dtype auto: {choice.reason}" in choice.describe()


@pytest.mark.parametrize("capability, dtype", [((9, 0), "bfloat16"), ((8, 0), "bfloat16"), ((8, 6), "bfloat16"),
                                               ((7, 5), "float16"), ((7, 0), "float16"), ((6, 1), "float32")])
def test_auto_on_cuda_follows_the_compute_capability(capability, dtype):
    choice = resolve_precision("auto", "cuda", cuda_capability=capability, cuda_name="Some GPU")
    assert choice.dtype == dtype
    assert f"Some GPU (compute capability {capability[0]}.{capability[1]})" in choice.reason


def test_a_given_dtype_is_kept_and_other_devices_get_float32():
    assert resolve_precision("float16", "cpu", cpu_capabilities=XEON_SPR) == PrecisionChoice("float16", "float16",
                                                                                             "given")
    assert resolve_precision("auto", "meta").dtype == "float32"
    with pytest.raises(BertPipelineError, match="--dtype must be one of auto, float32, float16, bfloat16"):
        resolve_precision("half", "cpu")
    with pytest.raises(BertPipelineError, match="resolve --dtype auto"):
        Precision("auto", "cpu")


def test_this_machines_detection_is_torchs_own():
    """No fake input: what auto picks here follows torch's CPU feature detection."""
    caps = torch.cpu.get_capabilities()
    native = bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))
    assert resolve_precision("auto", "cpu").dtype == ("bfloat16" if native else "float32")


def test_workers_agree_on_one_precision():
    bf16, fp16 = (PrecisionChoice(d, "auto", "why") for d in ("bfloat16", "float16"))
    fp32 = PrecisionChoice("float32", "auto", "why")
    assert agreed([bf16, bf16]) is not None and agreed([bf16, bf16]).dtype == "bfloat16"
    assert agreed([bf16, fp16]).dtype == "float16"  # GPUs of two generations
    mixed = agreed([bf16, fp32])
    assert mixed.dtype == "float32" and "the workers' devices differ (bfloat16, float32" in mixed.reason
