"""The pretraining step under bfloat16 autocast: its losses are float32 (computed in chunks, the same as in one
piece), and the weights, their gradients and AdamW's state stay float32; and on a GPU it would not wait for the device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bert_core.model.config import BertConfig
from bert_core.model.modeling import BertForPreTraining
from bert_core.pretrain import step as pretrain_step
from bert_core.train.loop import optimizer_step
from bert_core.train.optim import build_optimizer, build_scheduler
from bert_core.train.precision import Precision

VOCAB = 300


def batch(rows: int = 4, seq: int = 12, preds: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(rows, seq, dtype=torch.long)
    mask[0, 8:] = 0
    weights = torch.ones(rows, preds)
    weights[0, -1] = 0.0  # a padding slot of the predictions
    return {"input_ids": torch.randint(5, VOCAB, (rows, seq), generator=g), "token_type_ids": torch.zeros(
        rows, seq, dtype=torch.long), "attention_mask": mask,
        "masked_lm_positions": torch.tensor([[1, 2, 3]] * rows), "masked_lm_ids": torch.randint(
            5, VOCAB, (rows, preds), generator=g), "masked_lm_weights": weights,
        "next_sentence_labels": torch.tensor([0, 1] * (rows // 2))}


def model() -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=64, max_position_embeddings=32))


def test_losses_are_float32_and_chunking_changes_nothing(monkeypatch):
    net, data = model().eval(), batch()
    bf16 = Precision("bfloat16", "cpu")
    mlm, nsp, stats = pretrain_step.forward_sums(net, data, bf16)
    assert mlm.dtype == nsp.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(**{k: data[k] for k in pretrain_step.MODEL_INPUTS})
    logits = out.prediction_logits.reshape(-1, VOCAB)
    assert logits.dtype == torch.bfloat16
    # The reference: the same bfloat16 logits, log-softmax in float64.
    expected = (F.cross_entropy(logits.double(), data["masked_lm_ids"].reshape(-1), reduction="none")
                * data["masked_lm_weights"].reshape(-1)).sum()
    torch.testing.assert_close(mlm.double(), expected, rtol=1e-6, atol=1e-5)
    monkeypatch.setattr(pretrain_step, "LOSS_CHUNK_ELEMENTS", 2 * VOCAB)  # chunks of 2 rows
    chunked = pretrain_step.forward_sums(net, data, bf16)
    torch.testing.assert_close(chunked[0], mlm, rtol=0, atol=0)
    torch.testing.assert_close(chunked[2], stats, rtol=0, atol=0)


def test_weights_gradients_and_adamw_state_stay_float32():
    net, data = model().train(), batch()
    optimizer = build_optimizer(net, "adamw", 1e-3)
    scheduler = build_scheduler(optimizer, 10, 0.1)
    bf16 = Precision("bfloat16", "cpu")
    pretrain_step.train_step(net, [data], bf16)
    assert all(p.grad.dtype == torch.float32 for p in net.parameters() if p.grad is not None)
    result = optimizer_step(net, optimizer, scheduler, bf16, 1.0, 1)
    assert result.applied
    assert all(p.dtype == torch.float32 for p in net.parameters())
    states = [s for s in optimizer.state.values() if s]
    assert states and all(s["exp_avg"].dtype == s["exp_avg_sq"].dtype == torch.float32 for s in states)


def test_the_step_makes_no_tensor_from_python_values_and_reads_nothing_back(monkeypatch):
    """On a GPU a tensor made from Python data (torch.tensor) is a host-to-device copy, and a value read back
    (.item(), nonzero) a wait: either one in the middle of a step makes the host wait for the forward before it
    queues the backward. Forward and backward (train_step) do neither; the model's input checks read their values
    in one transfer (tolist), which is not counted here. Nor are the CPU dropout's random bits, made by numpy on
    the host by design (modeling.random_int16 runs for CPU tensors only; on a GPU dropout is F.dropout)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from bert_core.model import modeling

    host_bits = {"depth": 0}

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not host_bits["depth"]:
                self.seen.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    def random_int16(n, _real=modeling.random_int16):
        host_bits["depth"] += 1
        try:
            return _real(n)
        finally:
            host_bits["depth"] -= 1

    monkeypatch.setattr(modeling, "random_int16", random_int16)
    net, micro_batches = model().train(), [batch(), batch(rows=2)]
    with Ops() as ops:
        pretrain_step.train_step(net, micro_batches, Precision("bfloat16", "cpu"))
    assert host_bits["depth"] == 0 and any(op == "ge" for op in ops.seen)  # dropout ran, its bits were exempt
    assert "mm" in ops.seen or "addmm" in ops.seen  # the mode saw the step
    banned = {"lift_fresh", "_local_scalar_dense", "nonzero", "is_nonzero", "equal"}
    assert [op for op in ops.seen if op in banned] == []
