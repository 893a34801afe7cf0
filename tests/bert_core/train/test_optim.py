"""Optimizers against hand-computed steps, weight-decay exclusion, schedule values, clipping."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from bert_core.errors import BertPipelineError
from bert_core.model.config import BertConfig
from bert_core.model.modeling import BertForPreTraining
from bert_core.train.optim import (
    BertAdam,
    Lamb,
    build_optimizer,
    build_scheduler,
    clip_grad_norm,
    folds_clipping,
    parameter_groups,
    trust_ratio,
)

W0 = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
GRADS = [torch.tensor([[0.1, -0.2], [0.3, 0.05]], dtype=torch.float64),
         torch.tensor([[-0.4, 0.1], [0.2, 0.6]], dtype=torch.float64)]


def _run(opt_cls, **kwargs) -> torch.Tensor:
    w = nn.Parameter(W0.clone())
    opt = opt_cls([w], **kwargs)
    for g in GRADS:
        w.grad = g.clone()
        opt.step()
    return w.detach()


def test_bertadam_matches_hand_computed_steps():
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-6, 0.01
    w, m, v = W0.clone(), torch.zeros_like(W0), torch.zeros_like(W0)
    for g in GRADS:
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (v.sqrt() + eps) + wd * w)  # no bias correction: Google's optimizer
    got = _run(BertAdam, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    torch.testing.assert_close(got, w, rtol=0, atol=1e-12)
    # First step without bias correction is 10x smaller than Adam's (m = 0.1 g, sqrt(v) ~ 0.0316 |g|).
    first = _run(BertAdam, lr=lr, betas=(b1, b2), eps=eps)
    assert not torch.allclose(first, _run(torch.optim.Adam, lr=lr, betas=(b1, b2), eps=eps))


def test_lamb_trust_ratio():
    lr, b1, b2, eps, wd = 0.05, 0.9, 0.999, 1e-6, 0.01
    w, m, v = W0.clone(), torch.zeros_like(W0), torch.zeros_like(W0)
    for t, g in enumerate(GRADS, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        update = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps) + wd * w
        ratio = w.norm() / update.norm()
        w = w - lr * ratio * update
    torch.testing.assert_close(_run(Lamb, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd), w, rtol=0, atol=1e-12)
    # The step length is lr * ||w||, whatever the gradient's scale.
    p = nn.Parameter(W0.clone())
    opt = Lamb([p], lr=lr)
    p.grad = GRADS[0] * 1e-3
    opt.step()
    assert math.isclose(float((p.detach() - W0).norm()), lr * float(W0.norm()), rel_tol=1e-4)
    assert trust_ratio(torch.zeros(3), torch.ones(3)) == 1.0
    assert trust_ratio(torch.ones(4), torch.zeros(4)) == 1.0


def test_weight_decay_excludes_bias_and_layernorm():
    model = BertForPreTraining(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=32))
    decay, rest = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and rest["weight_decay"] == 0.0
    assert all(n.endswith("bias") or "LayerNorm" in n for n in (names[id(p)] for p in rest["params"]))
    assert all(not n.endswith("bias") and "LayerNorm" not in n for n in (names[id(p)] for p in decay["params"]))
    assert "bert.embeddings.word_embeddings.weight" in {names[id(p)] for p in decay["params"]}
    # Every parameter once: the tied MLM decoder is the word embedding, not a second tensor.
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))
    for name in ("adamw", "bertadam", "lamb"):
        opt = build_optimizer(model, name, lr=1e-3, weight_decay=0.01)
        assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    with pytest.raises(BertPipelineError, match="unknown optimizer 'sgd'"):
        build_optimizer(model, "sgd", lr=1e-3)


def test_no_decay_params_are_not_decayed():
    """A zero gradient leaves bias/LayerNorm untouched under bertadam, while weights shrink."""
    model = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    opt = build_optimizer(model, "bertadam", lr=0.1, weight_decay=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = dict(model.named_parameters())
    assert torch.equal(after["0.bias"], before["0.bias"]) and torch.equal(after["1.weight"], before["1.weight"])
    torch.testing.assert_close(after["0.weight"].detach(), before["0.weight"] * (1 - 0.1 * 0.5))


def test_schedule_values():
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=2.0)
    sched = build_scheduler(opt, total_steps=10, warmup_ratio=0.2)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [1.0, 2.0] + [2.0 * (10 - s) / 8 for s in range(2, 10)]
    assert lrs == pytest.approx(expected)
    assert lrs[2] == 2.0 and lrs[-1] == pytest.approx(0.25)
    no_warmup = build_scheduler(torch.optim.SGD([p], lr=1.0), total_steps=4, warmup_ratio=0.0)
    assert no_warmup.get_last_lr() == [1.0]
    with pytest.raises(BertPipelineError, match="warmup-ratio"):
        build_scheduler(opt, 10, 1.5)


def test_global_norm_clipping():
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert float(clip_grad_norm([a, b], 1.0)) == pytest.approx(5.0)
    assert float(torch.cat([a.grad, b.grad]).norm()) == pytest.approx(1.0, rel=1e-5)
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert float(clip_grad_norm([a, b], 0.0)) == pytest.approx(5.0)  # measure only
    assert a.grad.tolist() == [3.0, 0.0]


# CUDA's fused AdamW takes grad_scale as GradScaler hands it over. CI has no GPU and runs the CPU case only; the
# CUDA case exists where a GPU does: evaluation/gpu_benchmarks.sh runs it with `pytest --noconftest` on a lent
# machine (passed on an H100, docs/benchmarks-pretrain.md).
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad_size", [10.0, 0.01])  # clipped, and below the threshold (factor 1)
def test_clipping_folded_into_fused_adamw_equals_clipping_first(grad_size, device):
    from bert_core.train.loop import optimizer_step
    from bert_core.train.precision import Precision

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 3)).to(device)
    ref = copy.deepcopy(net)
    grads = [torch.randn_like(p) * grad_size for p in net.parameters()]
    opt, ref_opt = (build_optimizer(m, "adamw", 1e-2) for m in (net, ref))
    assert folds_clipping(opt) and opt.defaults["fused"]
    for step in range(3):
        for model in (net, ref):
            for p, g in zip(model.parameters(), grads):
                p.grad = g * (step + 1)
        ref_norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0))
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
        sched = build_scheduler(opt, total_steps=10, warmup_ratio=0.0)
        result = optimizer_step(net, opt, sched, Precision("float32", device), 1.0, step)
        assert result.grad_norm == pytest.approx(ref_norm, rel=1e-6)
        assert not hasattr(opt, "grad_scale")  # the factor holds for one step only
        for p, q in zip(net.parameters(), ref.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)


def test_folded_clipping_is_released_when_the_step_raises():
    from bert_core.train.loop import NonFiniteLossError, optimizer_step
    from bert_core.train.precision import Precision

    net = nn.Linear(2, 2)
    opt = build_optimizer(net, "adamw", 1e-2)
    for p in net.parameters():
        p.grad = torch.full_like(p, float("nan"))
    with pytest.raises(NonFiniteLossError, match="step 4"):
        optimizer_step(net, opt, build_scheduler(opt, 10, 0.0), Precision("float32", "cpu"), 1.0, 4)
    assert not hasattr(opt, "grad_scale")


def test_folding_clipping_into_an_optimizer_that_ignores_it_is_refused():
    net = nn.Linear(2, 2)
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    for opt in (build_optimizer(net, "lamb", 1e-2), torch.optim.AdamW(net.parameters(), lr=1e-2, foreach=True)):
        with pytest.raises(BertPipelineError, match="does not apply a grad_scale"):
            clip_grad_norm(net.parameters(), 1.0, into=opt)
        assert not hasattr(opt, "grad_scale")
