"""What stays float32 when the model runs under bfloat16 autocast (the guarantees `--dtype auto` relies on),
and that the bfloat16 attention path computes attention."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bert_core.model import modeling
from bert_core.model.config import BertConfig

CPU_BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


def tiny(**overrides) -> BertConfig:
    return BertConfig(**{**dict(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=64), **overrides})


def padded_batch(batch: int = 3, seq: int = 16):
    torch.manual_seed(0)
    ids = torch.randint(5, 60, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, 10:] = 0  # padding: the packed path
    positions = torch.tensor([[1, 2, 3]] * batch)
    return ids, torch.zeros_like(ids), mask, positions


def test_every_layernorm_and_the_residual_stream_stay_float32_under_autocast():
    model = modeling.BertForPreTraining(tiny()).train()
    seen = []
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.register_forward_hook(lambda m, args, out: seen.append((args[0].dtype, out.dtype)))
    ids, types, mask, positions = padded_batch()
    with torch.autocast(**CPU_BF16):
        out = model(ids, types, mask, masked_lm_positions=positions, output_all_encoded_layers=True)
    assert out.prediction_logits.dtype == torch.bfloat16  # autocast ran the decoder in bfloat16
    # embeddings, 2 per layer, the MLM head's transform: statistics taken on float32 inputs
    assert seen == [(torch.float32, torch.float32)] * (1 + 2 * 2 + 1)
    assert all(layer.dtype == torch.float32 for layer in out.all_encoder_layers)


def test_bfloat16_attention_sums_its_softmax_in_float32():
    """4,096 keys of equal score: each weight is 2^-12. Summed in bfloat16, the total would stall near 2^-4
    (an increment of half an ulp rounds away) and every output would be ~16x too large."""
    cfg = tiny(hidden_size=64, num_attention_heads=1, max_position_embeddings=8)
    attention = modeling.BertSelfAttention(cfg).train()  # attention dropout 0.1 by default: turned off below
    attention.dropout_p = 0.0
    with torch.no_grad():
        for projection in (attention.query, attention.key):
            projection.weight.zero_()
            projection.bias.zero_()
        attention.value.weight.copy_(torch.eye(64))
        attention.value.bias.zero_()
    tokens = torch.rand(4096, 64)
    with torch.autocast(**CPU_BF16):
        out = attention(tokens, modeling._Layout(1, 4096, None, None))
    assert out.dtype == torch.bfloat16  # the reduced-precision (explicit) path ran
    expected = tokens.bfloat16().double().mean(0)  # every query attends uniformly to every token
    assert (out.double() - expected).abs().max() < 4e-3  # bfloat16 rounding of values ~0.5: 2^-9


def test_the_explicit_attention_ignores_masked_keys():
    """The padding mask of the reduced-precision path: masked keys get no weight (their values may be anything),
    and the result is float32 SDPA's with the same mask, to bfloat16 precision."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    key_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    out = modeling._explicit_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), key_mask, 0.0)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
    torch.testing.assert_close(out.float(), reference, rtol=0.03, atol=0.03)
    v_changed = v.clone()
    v_changed[1, :, 4:] = 1e3
    again = modeling._explicit_attention(q.bfloat16(), k.bfloat16(), v_changed.bfloat16(), key_mask, 0.0)
    assert torch.equal(again, out)


@pytest.mark.parametrize("training", [False, True])
def test_the_bfloat16_attention_path_matches_float32_attention(training):
    """Through the whole model, with padding: the explicit bfloat16 path and float32 SDPA agree to bfloat16
    precision (in training with dropout off, so both compute the same function)."""
    cfg = tiny(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    model = modeling.BertModel(cfg).train(training)
    ids, types, mask, _ = padded_batch()
    reference = model(ids, types, mask).sequence_output
    with torch.autocast(**CPU_BF16):
        low = model(ids, types, mask).sequence_output
    real = mask.bool()
    torch.testing.assert_close(low[real].float(), reference[real], rtol=0.05, atol=0.05)
    assert (low[real].float() - reference[real]).abs().mean() < 0.02


def test_task_head_losses_are_float32_under_autocast():
    model = modeling.BertForSequenceClassification(tiny(num_labels=3)).train()
    ids, types, mask, _ = padded_batch()
    labels = torch.tensor([0, 2, 1])
    with torch.autocast(**CPU_BF16):
        out = model(ids, types, mask, labels=labels)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
    expected = torch.nn.functional.cross_entropy(out.logits.double(), labels)
    torch.testing.assert_close(out.loss.double(), expected, rtol=1e-6, atol=1e-6)
