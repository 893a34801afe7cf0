"""Numerical parity with transformers' BERT (the reference), and the model's own contracts."""

from __future__ import annotations

import pytest
import torch
import transformers

from bert_core.errors import BertPipelineError
from bert_core.model import modeling
from bert_core.model.config import BertConfig
from bert_core.model.weights import load_state_into

TOL = 1e-5

HEADS = {
    "BertModel": modeling.BertModel,
    "BertForPreTraining": modeling.BertForPreTraining,
    "BertForMaskedLM": modeling.BertForMaskedLM,
    "BertForNextSentencePrediction": modeling.BertForNextSentencePrediction,
    "BertForSequenceClassification": modeling.BertForSequenceClassification,
    "BertForTokenClassification": modeling.BertForTokenClassification,
    "BertForQuestionAnswering": modeling.BertForQuestionAnswering,
}


def hf_config(cfg: BertConfig, **extra) -> transformers.BertConfig:
    return transformers.BertConfig(**{k: v for k, v in cfg.to_hf_dict().items() if k != "do_lower_case"},
                                   attn_implementation="eager", **extra)


def randomize_(model: torch.nn.Module) -> None:
    """Non-trivial values everywhere (HF init leaves biases 0 and LayerNorm 1, which hides mistakes)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))


def pair(cls_name: str, cfg: BertConfig, **hf_extra):
    """(ours, HF) with identical weights, loaded through our strict loader from HF's state dict."""
    hf = getattr(transformers, cls_name)(hf_config(cfg, **hf_extra)).eval()
    randomize_(hf)
    ours = HEADS[cls_name](cfg).eval()
    report = load_state_into(ours, hf.state_dict(), f"hf:{cls_name}")
    assert report.newly_initialized == []
    return ours, hf


def mixed_batch(cfg: BertConfig, lengths: list[int], seq: int):
    """Padded batch of the given real lengths, with two segments like BERT inputs."""
    batch = len(lengths)
    ids = torch.randint(5, cfg.vocab_size, (batch, seq))
    types = torch.zeros(batch, seq, dtype=torch.long)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        types[i, n // 2:n] = 1
        ids[i, n:] = 0
    return ids, types, mask


def assert_close_where(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    if mask is not None:
        a, b = a[mask.bool()], b[mask.bool()]
    diff = (a - b).abs().max().item()
    assert diff <= TOL, f"max abs difference {diff:.3g} > {TOL}"


SMALL = BertConfig(vocab_size=211, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                   intermediate_size=96, max_position_embeddings=64, num_labels=3)


@pytest.mark.parametrize("static_graph", [False, True])
def test_bert_base_shape_random_weights_match_reference(static_graph):
    cfg = BertConfig()  # BERT-base: 12 layers, hidden 768
    ours, hf = pair("BertModel", cfg)
    ours.static_graph = static_graph
    ids, types, mask = mixed_batch(cfg, [48, 37, 9, 24], seq=48)
    with torch.no_grad():
        out = ours(ids, types, mask, output_all_encoded_layers=True)
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask, output_hidden_states=True)
    # With the packed path, padded positions are zeros by design; real tokens must match exactly.
    where = None if static_graph else mask
    assert_close_where(out.sequence_output, ref.last_hidden_state, where)
    assert_close_where(out.pooled_output, ref.pooler_output)
    assert len(out.all_encoder_layers) == cfg.num_hidden_layers
    for mine, theirs in zip(out.all_encoder_layers, ref.hidden_states[1:]):
        assert_close_where(mine, theirs, where)
    if not static_graph:
        assert out.sequence_output[~mask.bool()].abs().max() == 0


def test_real_pretrained_weights_match_reference(minilm_dir):
    ours = modeling.BertModel.from_pretrained(str(minilm_dir))
    hf = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    ids, types, mask = mixed_batch(ours.config, [32, 17, 5], seq=32)
    with torch.no_grad():
        out = ours(ids, types, mask)
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        unpadded = ours(ids[:1], types[:1])
    assert_close_where(out.sequence_output, ref.last_hidden_state, mask)
    assert_close_where(out.pooled_output, ref.pooler_output)
    # A sequence gives the same vectors alone as inside a padded batch.
    assert_close_where(unpadded.sequence_output[0], out.sequence_output[0])


def _head_inputs(cls_name: str, cfg: BertConfig, ids, mask):
    batch, seq = ids.shape
    if cls_name == "BertForPreTraining":
        labels = torch.where(torch.rand(batch, seq) < 0.3, ids, torch.full_like(ids, -100))
        labels[~mask.bool()] = -100
        return {"labels": labels, "next_sentence_label": torch.randint(0, 2, (batch,))}
    if cls_name in ("BertForMaskedLM", "BertForTokenClassification"):
        high = cfg.vocab_size if cls_name == "BertForMaskedLM" else cfg.num_labels
        labels = torch.randint(0, high, (batch, seq))
        labels[~mask.bool()] = -100
        return {"labels": labels}
    if cls_name == "BertForNextSentencePrediction":
        return {"labels": torch.randint(0, 2, (batch,))}
    if cls_name == "BertForSequenceClassification":
        return {"labels": torch.randint(0, cfg.num_labels, (batch,))}
    if cls_name == "BertForQuestionAnswering":
        # One answer beyond the window, which both implementations must ignore.
        return {"start_positions": torch.tensor([1, 3, seq + 5]), "end_positions": torch.tensor([2, 6, seq + 5])}
    raise AssertionError(cls_name)


LOGIT_FIELDS = {
    "BertForPreTraining": ("prediction_logits", "seq_relationship_logits"),
    "BertForQuestionAnswering": ("start_logits", "end_logits"),
}


@pytest.mark.parametrize("static_graph", [False, True])
@pytest.mark.parametrize("cls_name", [n for n in HEADS if n != "BertModel"])
def test_every_head_logits_and_loss_match_reference(cls_name, static_graph):
    # HF sizes qa_outputs by num_labels; a QA head always has exactly two outputs (start, end).
    cfg = SMALL.replace(num_labels=2) if cls_name == "BertForQuestionAnswering" else SMALL
    ours, hf = pair(cls_name, cfg)
    ours.bert.static_graph = static_graph
    ids, types, mask = mixed_batch(cfg, [20, 13, 7], seq=20)
    kwargs = _head_inputs(cls_name, cfg, ids, mask)
    with torch.no_grad():
        out = ours(ids, types, mask, **kwargs)
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask, **kwargs)
    token_level = cls_name in ("BertForMaskedLM", "BertForTokenClassification", "BertForQuestionAnswering",
                               "BertForPreTraining")
    for field in LOGIT_FIELDS.get(cls_name, ("logits",)):
        ours_t, ref_t = getattr(out, field), getattr(ref, field)
        assert ours_t.shape == ref_t.shape
        per_token = token_level and field != "seq_relationship_logits"
        assert_close_where(ours_t, ref_t, mask if per_token and not static_graph else None)
    if cls_name != "BertForQuestionAnswering":
        assert abs(out.loss.item() - ref.loss.item()) <= TOL
    else:
        # QA's loss leaves padded positions out of the softmax (HF's runs over every position): it equals
        # HF's loss computed on the logits with the padding masked out, in the packed and static paths alike.
        start, end = kwargs["start_positions"], kwargs["end_positions"]
        ignored = ref.start_logits.shape[1]
        pad = ~mask.bool()
        expected = (torch.nn.functional.cross_entropy(ref.start_logits.masked_fill(pad, -1e30),
                                                      start.clamp(0, ignored), ignore_index=ignored)
                    + torch.nn.functional.cross_entropy(ref.end_logits.masked_fill(pad, -1e30),
                                                        end.clamp(0, ignored), ignore_index=ignored)) / 2
        assert abs(out.loss.item() - expected.item()) <= TOL
        if mask.all():
            assert abs(out.loss.item() - ref.loss.item()) <= TOL


def test_regression_head_uses_mse_like_reference():
    cfg = SMALL.replace(num_labels=1)
    ours, hf = pair("BertForSequenceClassification", cfg)
    ids, types, mask = mixed_batch(cfg, [12, 9], seq=12)
    labels = torch.tensor([0.5, 3.75])
    with torch.no_grad():
        out, ref = ours(ids, types, mask, labels=labels), hf(input_ids=ids, token_type_ids=types,
                                                              attention_mask=mask, labels=labels)
    assert out.logits.shape == (2, 1)
    expected = torch.nn.functional.mse_loss(out.logits.squeeze(-1), labels)
    assert out.loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert abs(out.loss.item() - ref.loss.item()) <= TOL


def test_pretraining_with_masked_positions_equals_google_weighted_loss():
    model = modeling.BertForPreTraining(SMALL).eval()
    ids, types, mask = mixed_batch(SMALL, [16, 11], seq=16)
    positions = torch.tensor([[1, 4, 7, 0], [2, 3, 0, 0]])
    weights = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    targets = torch.tensor([[10, 11, 12, 0], [13, 14, 0, 0]])
    nsp = torch.tensor([0, 1])
    with torch.no_grad():
        out = model(ids, types, mask, masked_lm_positions=positions, masked_lm_ids=targets,
                    masked_lm_weights=weights, next_sentence_label=nsp)
        full = model(ids, types, mask)
    assert out.prediction_logits.shape == (2, 4, SMALL.vocab_size)  # decoder ran only at the positions
    # Same logits as the full decoder at those positions.
    gathered = torch.stack([full.prediction_logits[b, positions[b]] for b in range(2)])
    assert_close_where(out.prediction_logits, gathered)
    # Google's loss: sum(w * nll) / (sum(w) + 1e-5), plus the NSP mean.
    logp = torch.log_softmax(gathered, -1)
    nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    mlm = (nll * weights).sum() / (weights.sum() + 1e-5)
    nsp_loss = torch.nn.functional.cross_entropy(out.seq_relationship_logits, nsp)
    assert out.mlm_loss.item() == pytest.approx(mlm.item(), abs=1e-5)
    assert out.loss.item() == pytest.approx((mlm + nsp_loss).item(), abs=1e-5)


@pytest.mark.parametrize("lengths, seq, full_rows", [([16, 11, 7], 16, 34), ([32, 31, 32], 32, 96)],
                         ids=["packed", "dense-masked"])
def test_last_layer_at_masked_positions_only_gives_the_full_models_loss_and_gradients(lengths, seq, full_rows):
    # The last layer computes [CLS] and the masked positions only; the loss and every gradient must be those of
    # the full model's output gathered at the positions (dropout off, so both see the same function).
    cfg = BertConfig(**{**SMALL.__dict__, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    torch.manual_seed(0)
    model = modeling.BertForPreTraining(cfg).train()
    randomize_(model)
    ids, types, mask = mixed_batch(cfg, lengths, seq=seq)
    positions = torch.tensor([[1, 4, 9, 0], [2, 3, 5, 0], [6, 1, 0, 0]])
    targets = torch.randint(5, cfg.vocab_size, positions.shape)
    weights = (positions > 0).float()
    nsp = torch.tensor([0, 1, 1])
    last_rows = []
    model.bert.encoder.layer[-1].intermediate.dense.register_forward_hook(
        lambda module, args, out: last_rows.append(args[0].shape[0]))

    out = model(ids, types, mask, masked_lm_positions=positions, masked_lm_ids=targets, masked_lm_weights=weights,
                next_sentence_label=nsp)
    out.loss.backward()
    fast = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    full = model(ids, types, mask)
    logits = torch.stack([full.prediction_logits[b, positions[b]] for b in range(len(lengths))])
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1), reduction="none")
    reference = (nll * weights.reshape(-1)).sum() / (weights.sum() + 1e-5) + torch.nn.functional.cross_entropy(
        full.seq_relationship_logits, nsp)
    reference.backward()

    assert last_rows == [3 * (1 + 4), full_rows]  # [CLS] + 4 positions per sequence, then every real token
    assert out.loss.item() == pytest.approx(reference.item(), abs=1e-5)
    assert_close_where(out.prediction_logits, logits)
    for name, p in model.named_parameters():
        assert torch.allclose(fast[name], p.grad, atol=1e-5, rtol=1e-4), name


def test_mlm_decoder_is_tied_to_word_embeddings():
    model = modeling.BertForPreTraining(SMALL)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    ids, types, mask = mixed_batch(SMALL, [8], seq=8)
    model(ids, types, mask, labels=ids).loss.backward()
    # One parameter, one gradient: the optimizer sees it once.
    names = [n for n, _ in model.named_parameters()]
    assert "cls.predictions.decoder.weight" not in names
    assert model.bert.embeddings.word_embeddings.weight.grad is not None


def test_bert_initialisation():
    cfg = BertConfig(initializer_range=0.02)
    model = modeling.BertForPreTraining(cfg)
    w = model.bert.encoder.layer[3].intermediate.dense.weight
    assert abs(w.std().item() - 0.02) < 1e-3 and abs(w.mean().item()) < 1e-3
    assert model.bert.encoder.layer[3].intermediate.dense.bias.abs().max() == 0
    ln = model.bert.encoder.layer[0].output.LayerNorm
    assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0)
    assert abs(model.bert.embeddings.word_embeddings.weight.std().item() - 0.02) < 1e-3


def test_attention_uses_sdpa(monkeypatch):
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("attn_mask"))
        return real(*args, **kwargs)

    monkeypatch.setattr(modeling.F, "scaled_dot_product_attention", spy)
    model = modeling.BertModel(SMALL).eval()
    ids, types, mask = mixed_batch(SMALL, [10, 4], seq=10)
    model(ids, types, mask)
    assert len(calls) == SMALL.num_hidden_layers and calls[0].shape == (2, 1, 1, 10)


def test_training_mode_dropout_and_backward_through_packed_path():
    model = modeling.BertForSequenceClassification(SMALL).train()
    ids, types, mask = mixed_batch(SMALL, [10, 4, 7], seq=10)
    out1 = model(ids, types, mask, labels=torch.tensor([0, 1, 2]))
    out2 = model(ids, types, mask, labels=torch.tensor([0, 1, 2]))
    assert not torch.equal(out1.logits, out2.logits)  # dropout is active
    out1.loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_dropout_drops_at_its_rate_scales_the_rest_and_follows_the_seed(dtype):
    x = torch.randn(301, 1001, dtype=dtype)  # odd element count: the last 32-bit draw is half used
    torch.manual_seed(7)
    y = modeling.dropout(x, 0.1, training=True)
    dropped = y == 0
    # 301,301 draws at 0.1: the rate's standard error is 5.5e-4
    assert abs(dropped.float().mean().item() - 0.1) < 3e-3
    scale = torch.tensor(1 / (1 - round(0.1 * 2 ** 16) / 2 ** 16), dtype=dtype)  # in x's dtype, as torch's
    assert torch.equal(y[~dropped], x[~dropped] * scale)
    torch.manual_seed(7)
    assert torch.equal(modeling.dropout(x, 0.1, training=True), y)  # the seed decides the mask
    assert not torch.equal(modeling.dropout(x, 0.1, training=True), y)
    assert modeling.dropout(x, 0.1, training=False) is x and modeling.dropout(x, 0.0, training=True) is x
    # rows and columns of the mask are not correlated (each 32-bit draw feeds two neighbouring elements)
    pairs = dropped.flatten()[: dropped.numel() // 2 * 2].view(-1, 2).float()
    assert abs((pairs[:, 0] * pairs[:, 1]).mean().item() - 0.01) < 1.5e-3


def test_cpu_dropout_gradient_is_the_mask_times_the_scale():
    x = torch.randn(64, 33, requires_grad=True)
    y = modeling.dropout(x, 0.25, training=True)
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, (y != 0).float() / 0.75)
    module = modeling.Dropout(0.25)
    assert module.p == 0.25 and repr(module) == repr(torch.nn.Dropout(0.25))
    assert module.eval()(x) is x


def test_bad_inputs_have_clear_errors():
    model = modeling.BertModel(SMALL).eval()
    with pytest.raises(BertPipelineError, match="outside the vocabulary"):
        model(torch.tensor([[1, 2, SMALL.vocab_size]]))
    with pytest.raises(BertPipelineError, match="outside the vocabulary"):
        model(torch.tensor([[1, -3]]))
    with pytest.raises(BertPipelineError, match="exceeds max_position_embeddings"):
        model(torch.ones(1, SMALL.max_position_embeddings + 1, dtype=torch.long))
    with pytest.raises(BertPipelineError, match="token_type_ids"):
        model(torch.ones(1, 4, dtype=torch.long), token_type_ids=torch.full((1, 4), 2))
    with pytest.raises(BertPipelineError, match="attention_mask shape"):
        model(torch.ones(1, 4, dtype=torch.long), attention_mask=torch.ones(1, 5))
    # Out of range, a masked position would pick another sequence's row in the last layer, silently.
    ids = torch.ones(2, 4, dtype=torch.long)
    for bad, named in (([[1, 4], [1, 2]], "got 4"), ([[1, 2], [-1, 2]], "got -1")):
        with pytest.raises(BertPipelineError, match=rf"masked_lm_positions must be in \[0, 4\).*{named}"):
            model(ids, positions=torch.tensor(bad))
    with pytest.raises(BertPipelineError, match="masked_lm_positions must be .batch, predictions."):
        model(ids, positions=torch.tensor([1, 2]))


def test_the_forward_reads_values_from_the_device_once():
    """On a GPU every value read (.item(), int(), nonzero) waits for the device: the input checks and a padded
    batch's number of real tokens come back in one transfer (tolist, not counted below), and where the real tokens
    are is found without a read (nonzero_static, its size known)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Reads(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("_local_scalar_dense", "nonzero", "is_nonzero", "equal"):
                self.seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    model = modeling.BertForPreTraining(SMALL).train()
    ids, types, mask = mixed_batch(SMALL, [12, 5], seq=12)
    for attention_mask in (mask, torch.ones_like(mask), None):
        with Reads() as reads:
            model(ids, types, attention_mask)
        assert reads.seen == [], (attention_mask, reads.seen)


def test_bf16_autocast_runs_and_stays_close():
    model = modeling.BertForSequenceClassification(SMALL).eval()
    ids, types, mask = mixed_batch(SMALL, [12, 5], seq=12)
    with torch.no_grad():
        ref = model(ids, types, mask).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(ids, types, mask).logits
    assert torch.isfinite(low).all()
    assert (low.float() - ref).abs().max() < 0.1


@pytest.mark.parametrize("seq", [16, 128])
def test_encoder_flops_per_token_counts_what_the_model_computes(seq):
    """The MFU figures of evaluation.pretrain_throughput divide by this count: it must equal the matmul FLOPs
    torch's own counter sees in a forward pass (attention on the math kernel, whose products it can see)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    cfg = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=128)
    model = modeling.BertModel(cfg, add_pooling_layer=False).eval()
    ids = torch.randint(0, 100, (2, seq))
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(ids)
    assert counter.get_total_flops() == modeling.encoder_flops_per_token(cfg, seq) * ids.numel()
    # With positions, the last layer computes them and [CLS] only (keys and values still for every token).
    positions = torch.tensor([[1, 3, 5], [2, 4, 6]])
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(ids, positions=positions)
    rows = positions.numel() + len(positions)
    assert counter.get_total_flops() == modeling.encoder_flops(cfg, ids.numel(), seq, output_rows=rows)
    assert modeling.encoder_flops(cfg, ids.numel(), seq) == modeling.encoder_flops_per_token(cfg, seq) * ids.numel()


def test_packing_only_where_it_pays():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert not modeling.packs(cpu, 96, 100) and modeling.packs(cpu, 95, 100)  # 4% padding: dense; 5%: packed
    assert not modeling.packs(gpu, 51, 100) and modeling.packs(gpu, 50, 100)  # a GPU packs from half padded


def test_a_barely_padded_batch_runs_dense_and_matches_reference():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    ours, hf = pair("BertModel", SMALL)
    for lengths, packed in (([40, 40, 40, 37], False), ([40, 21, 9, 30], True)):  # 2% and 38% padding
        ids, types, mask = mixed_batch(SMALL, lengths, seq=40)
        with torch.no_grad(), Ops() as ops:
            out = ours(ids, types, mask)
        with torch.no_grad():
            ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        assert ("nonzero_static" in ops.seen) == packed, (lengths, sorted(ops.seen))
        assert_close_where(out.sequence_output, ref.last_hidden_state, mask)
        padded_values = out.sequence_output[~mask.bool()].abs().max()
        assert (padded_values == 0) == packed  # packed: zeros at padded positions; dense: what HF computes there


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cpu_bfloat16_attention_gradients_keep_float32_softmax_accuracy(seed):
    """The key gradient of the CPU bfloat16 attention, against the same bfloat16 inputs in float64, where it is
    hardest: peaked scores and value rows alike (as in deep layers), so the softmax's backward p * (g - sum(g * p))
    cancels. With the softmax in float32 the error is 0.036-0.039 here; with a bfloat16 softmax (before
    2026-11-26) 0.073-0.083."""
    g = torch.Generator().manual_seed(seed)
    batch, heads, seq, dim = 2, 4, 64, 64
    q, k = (3.0 * torch.randn(batch, heads, seq, dim, generator=g) for _ in range(2))
    v = torch.randn(batch, heads, 1, dim, generator=g) + 0.05 * torch.randn(batch, heads, seq, dim, generator=g)
    key_mask = torch.ones(batch, 1, 1, seq, dtype=torch.bool)
    key_mask[1, ..., 50:] = False
    weights = torch.randn(batch, heads, seq, dim, generator=g)

    exact = [t.to(torch.bfloat16).double().requires_grad_() for t in (q, k, v)]
    scores = (exact[0] * dim ** -0.5) @ exact[1].transpose(-1, -2)
    ((scores.masked_fill(~key_mask, float("-inf")).softmax(-1) @ exact[2]) * weights).sum().backward()
    ours = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
    (modeling._explicit_attention(*ours, key_mask, 0.0).float() * weights).sum().backward()
    error = float((ours[1].grad.double() - exact[1].grad).norm() / exact[1].grad.norm())
    assert error < 0.05, error


def test_narrowing_linear_on_cpu_bfloat16_gives_autograds_gradients():
    # The feed-forward output (intermediate -> hidden) computes its weight gradient in another memory order on
    # CPU under bfloat16 autocast; the same products, so every gradient equals autograd's up to the order of
    # float32 accumulation.
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=96,
                     hidden_dropout_prob=0.0)
    out = modeling.BertResidualOutput(cfg, cfg.intermediate_size)
    hidden = torch.randn(40, 96, requires_grad=True)
    residual = torch.randn(40, 32)
    grads = []
    for fast in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = out(hidden, residual) if fast else out.LayerNorm(out.dense(hidden) + residual)
        assert _path_in_graph(y) == fast
        (y.float() * torch.linspace(-1, 1, 32)).sum().backward()
        grads.append([t.grad.clone() for t in (hidden, out.dense.weight, out.dense.bias)])
        for t in (hidden, out.dense.weight, out.dense.bias):
            t.grad = None
    for fast, plain in zip(*grads):
        torch.testing.assert_close(fast, plain, rtol=1e-2, atol=1e-3)
    # Where it does not pay (widening, or no autocast) the layer runs as nn.Linear.
    assert not _path_in_graph(modeling._linear(out.dense, hidden))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        wide = torch.nn.Linear(32, 96)
        assert not _path_in_graph(modeling._linear(wide, residual))


def test_widening_linear_on_cpu_bfloat16_gives_autograds_gradients():
    # The feed-forward's intermediate (hidden -> intermediate) computes its weight gradient as a turned-around
    # product on CPU under bfloat16 autocast, widened to float32 by a transposing copy: every gradient equals
    # autograd's up to float32 accumulation order and bfloat16 rounding, in the weight's own layout.
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=96)
    inter = modeling.BertIntermediate(cfg)
    x = torch.randn(40, 32, requires_grad=True)
    grads, outputs = [], []
    for fast in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = inter(x) if fast else inter.act(inter.dense(x))
        assert y.dtype == torch.bfloat16 and _path_in_graph(y, "_WideningLinear") == fast
        outputs.append(y.detach())
        (y.float() * torch.linspace(-1, 1, 96)).sum().backward()
        grads.append([t.grad.clone() for t in (x, inter.dense.weight, inter.dense.bias)])
        assert inter.dense.weight.grad.dtype == torch.float32 and inter.dense.weight.grad.is_contiguous()
        for t in (x, inter.dense.weight, inter.dense.bias):
            t.grad = None
    assert torch.equal(*outputs)  # the forward is F.linear's own product
    for fast, plain in zip(*grads):
        torch.testing.assert_close(fast, plain, rtol=1e-2, atol=1e-3)
    assert not _path_in_graph(inter(x), "_WideningLinear")  # without autocast it runs as nn.Linear


def _path_in_graph(y: torch.Tensor, node: str = "_NarrowOutputLinear") -> bool:
    seen, stack = set(), [y.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if node in type(fn).__name__:
            return True
        stack.extend(f for f, _ in fn.next_functions)
    return False


def _tied_grads(model, loss_of, tied: bool, monkeypatch, autocast: bool) -> dict[str, torch.Tensor]:
    with monkeypatch.context() as patch:
        if not tied:
            patch.setattr(modeling.TiedGradient, "for_forward", staticmethod(lambda embeddings, decoder: None))
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_of(model)
        assert _path_in_graph(loss, "_TiedLookup") == tied
        loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("head", ["pretraining", "masked_lm", "nsp_loss_only"])
def test_tied_word_embedding_gradient_is_autograds(head, autocast, monkeypatch):
    # The shared word-embedding weight's one gradient is built in place (TiedGradient): every gradient equals
    # autograd's own, the shared weight's up to the order of its float32 additions (repeated ids' rows are added
    # to the decoder's gradient one by one, not summed first).
    torch.manual_seed(0)
    ids, types, mask = mixed_batch(SMALL, [16, 11, 7], seq=16)
    ids[:, 1] = 7  # a repeated id
    positions, targets = torch.randint(1, 7, (3, 4)), torch.randint(0, SMALL.vocab_size, (3, 4))
    nsp = torch.tensor([0, 1, 0])
    if head == "masked_lm":
        model = modeling.BertForMaskedLM(SMALL)
        labels = torch.where(mask.bool() & (torch.arange(16) % 3 == 0), ids, -100)
        loss_of = lambda m: m(ids, types, mask, labels=labels).loss  # noqa: E731
    else:
        model = modeling.BertForPreTraining(SMALL)
        mlm = {} if head == "nsp_loss_only" else {"masked_lm_positions": positions, "masked_lm_ids": targets}
        loss_of = lambda m: m(ids, types, mask, next_sentence_label=nsp, **mlm).loss  # noqa: E731
    randomize_(model)
    model.eval()  # no dropout: both runs see the same forward
    plain = _tied_grads(model, loss_of, False, monkeypatch, autocast)
    tied = _tied_grads(model, loss_of, True, monkeypatch, autocast)
    assert plain.keys() == tied.keys()
    shared = "bert.embeddings.word_embeddings.weight"
    assert shared in tied
    for name in plain:
        if name == shared:
            torch.testing.assert_close(tied[name], plain[name], rtol=1e-6, atol=1e-7)
        else:
            assert torch.equal(tied[name], plain[name]), name


def test_tied_word_embedding_gradient_is_the_same_from_run_to_run_on_two_threads():
    # A run is reproducible bit for bit, and a resumed run equals the uninterrupted one, only if every gradient is:
    # on CPU index_put_ with accumulate adds repeated ids' rows with atomics across threads (it gave other
    # word-embedding gradients from one call to the next on two threads, and the runs drifted apart).
    cfg = BertConfig(vocab_size=211, hidden_size=256, num_hidden_layers=1, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = modeling.BertForPreTraining(cfg).eval()
    randomize_(model)
    ids = torch.randint(5, 40, (64, 48))  # few distinct ids: every row added many times
    positions, targets = torch.randint(1, 47, (64, 6)), torch.randint(0, cfg.vocab_size, (64, 6))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(8):
            model.zero_grad(set_to_none=True)
            model(ids, masked_lm_positions=positions, masked_lm_ids=targets).loss.backward()
            grads.append(model.bert.embeddings.word_embeddings.weight.grad.clone())
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(grads[0], g) for g in grads[1:])


def test_tied_gradient_only_where_a_backward_follows_through_a_shared_weight():
    model = modeling.BertForPreTraining(SMALL)
    parts = (model.bert.embeddings.word_embeddings, model.cls.predictions.decoder)
    assert isinstance(modeling.TiedGradient.for_forward(*parts), modeling.TiedGradient)
    with torch.no_grad():
        assert modeling.TiedGradient.for_forward(*parts) is None
    untied = torch.nn.Linear(SMALL.hidden_size, SMALL.vocab_size, bias=False)
    assert modeling.TiedGradient.for_forward(parts[0], untied) is None
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    assert modeling.TiedGradient.for_forward(*parts) is None
