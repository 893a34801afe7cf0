"""BERT encoder and task heads.

Parameter names follow HF's `modeling_bert.py` so HF-format checkpoints load directly; the maths
follows Google's `modeling.py`. One design choice differs from both: when enough of a batch is padding,
every per-token layer (embeddings, projections, feed-forward, LayerNorm) runs only on the real
tokens, packed into one [num_tokens, hidden] matrix, and the tokens are laid out [batch, seq] only
for the attention product itself. With realistic fine-tuning length mixes ~40% of tokens are padding, so
this skips ~40% of the matmul work. Hidden states at padded positions are then zero (HF returns the values its
wasted computation produced there; no loss or metric reads them). Where packing would cost more than it saves
(`packs`: on CPU below 5% padding, on a GPU below half), the batch runs padded, with the mask, as HF's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bert_core.errors import BertPipelineError
from bert_core.model.config import BertConfig

_ACT = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}


# --------------------------------------------------------------------------- outputs


@dataclass
class BertModelOutput:
    sequence_output: Tensor  # [B, T, H], or [B, P, H] when `positions` are given
    pooled_output: Tensor | None  # [B, H]; None for heads built without a pooler
    all_encoder_layers: list[Tensor] | None = None  # one [B, T, H] per layer, when asked

    # The names HF users know.
    @property
    def last_hidden_state(self) -> Tensor:
        return self.sequence_output

    @property
    def pooler_output(self) -> Tensor | None:
        return self.pooled_output


@dataclass
class PreTrainingOutput:
    prediction_logits: Tensor  # [B, T, V], or [B, P, V] when masked_lm_positions are given
    seq_relationship_logits: Tensor  # [B, 2]
    loss: Tensor | None = None
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None
    all_encoder_layers: list[Tensor] | None = None


@dataclass
class LogitsOutput:
    logits: Tensor
    loss: Tensor | None = None
    all_encoder_layers: list[Tensor] | None = None


@dataclass
class QuestionAnsweringOutput:
    start_logits: Tensor  # [B, T]
    end_logits: Tensor  # [B, T]
    loss: Tensor | None = None
    all_encoder_layers: list[Tensor] | None = None


# --------------------------------------------------------------------------- dropout

DROPOUT_RESOLUTION = 2 ** 16  # on CPU the drop probability is a multiple of 1/DROPOUT_RESOLUTION (see dropout)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """F.dropout, with a cheaper random mask on CPU.

    torch's CPU dropout draws one Bernoulli variate per element, about 5 ns each on one core: 12% of a BERT-base
    bfloat16 training step, most of it on the attention probabilities. Here each random 64-bit integer gives four
    16-bit draws (random_int16), and an element is dropped when its draw falls below p's quantile, so the drop
    probability is p rounded to a multiple of 2^-16 (0.1 -> 0.100006); the kept values are scaled by 1/(1 - that),
    in x's dtype as torch's CPU dropout scales them. Forward and backward together are 3.4-3.6x faster than
    F.dropout's at BERT-base shapes (docs/benchmarks-pretrain.md). Seeded by torch.manual_seed like F.dropout;
    other devices, and torch.compile (whose generated kernels draw their own), use F.dropout."""
    if not training or p == 0.0:
        return x
    drops = round(p * DROPOUT_RESOLUTION)
    if x.device.type != "cpu" or not 0 < drops < DROPOUT_RESOLUTION or torch.compiler.is_compiling():
        return F.dropout(x, p, True)
    n = x.numel()
    keep = random_int16(n).view(x.shape) >= drops - DROPOUT_RESOLUTION // 2
    # Through uint8: torch converts bool to a float type one element at a time, uint8 with vector instructions (6x).
    return x * keep.view(torch.uint8).to(x.dtype).mul_(DROPOUT_RESOLUTION / (DROPOUT_RESOLUTION - drops))


def random_int16(n: int) -> Tensor:
    """n uniform 16-bit integers on CPU, four from each 64-bit output of numpy's SFC64 generator, seeded from torch's
    default generator (one draw per call), so torch.manual_seed and torch's saved RNG state decide them as they
    decide torch's own draws. SFC64 (a small chaotic counter generator; passes PractRand and BigCrush) gives 64 bits
    in about half the time of torch's full-range int64 random_ (Mersenne Twister, 0.7 ns per 16-bit draw), whose
    draws for the dropout masks were 3% of a BERT-base bfloat16 training step on one core: dropout forward and
    backward 1.13-1.34x faster with it (docs/benchmarks-pretrain.md)."""
    seed = torch.empty(1, dtype=torch.int64).random_().numpy()[0]  # a CPU tensor's memory: no device to wait for
    bits = np.random.SFC64(seed).random_raw((n + 3) // 4)
    return torch.from_numpy(bits.view(np.int16)[:n])


class Dropout(nn.Dropout):
    """nn.Dropout (same attribute, same repr, same eval switch) through `dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


# --------------------------------------------------------------------------- packing

# Packing runs the encoder on the real tokens only: it saves the padding's arithmetic and adds index kernels, and
# below these padding fractions it costs more than it saves (BERT-base bfloat16 pretraining steps, alternated,
# docs/benchmarks-pretrain.md). A CPU step is bound by arithmetic: packing was 1-2% faster at 6.6-7.8% padding and
# even at 4.1%. An H200 step is bound by launching kernels from Python: the dense step (the padded batch and the
# mask) was 2-15% faster at every padding measured, 5% to 37%; from half the batch padded, the saved arithmetic is
# assumed to win (not measured).
MIN_PADDING_TO_PACK = {"cpu": 0.05}
MIN_PADDING_TO_PACK_ELSEWHERE = 0.5


def packs(device: torch.device, real_tokens: int, positions: int) -> bool:
    """Whether a batch of `positions` (batch x seq) with `real_tokens` of them real runs packed on `device`."""
    minimum = MIN_PADDING_TO_PACK.get(device.type, MIN_PADDING_TO_PACK_ELSEWHERE)
    return real_tokens <= (1 - minimum) * positions


@dataclass
class _Layout:
    """Where the real tokens of a [B, T] batch sit; `indices` is None when nothing is padded."""

    batch: int
    seq: int
    indices: Tensor | None
    key_mask: Tensor | None  # [B, 1, 1, T] bool, True = may be attended to

    def pad(self, packed: Tensor) -> Tensor:
        """[N, D] (N real tokens, or B*T) -> [B, T, D]; zeros at padded positions."""
        if self.indices is None:
            return packed.view(self.batch, self.seq, -1)
        full = packed.new_zeros(self.batch * self.seq, packed.shape[-1])
        return full.index_copy(0, self.indices, packed).view(self.batch, self.seq, -1)

    def pack(self, padded: Tensor) -> Tensor:
        flat = padded.reshape(self.batch * self.seq, -1)
        return flat if self.indices is None else flat.index_select(0, self.indices)

    def rows(self, positions: Tensor) -> Tensor:
        """[B, P] positions -> [B * P] indices of their rows in the [N, D] packed (or flat) tokens. A position at a
        padded token has no row; it gets the sequence's first token's, as its output has no meaning either way."""
        offsets = torch.arange(self.batch, device=positions.device).unsqueeze(1) * self.seq
        flat = (positions.long() + offsets).reshape(-1)
        if self.indices is None:
            return flat
        row_of = torch.zeros(self.batch * self.seq, dtype=torch.long, device=positions.device)
        row_of[self.indices] = torch.arange(self.indices.numel(), device=positions.device)
        return row_of[flat]


# --------------------------------------------------------------------------- tied word embeddings


class TiedGradient:
    """The gradient of the word embeddings that the MLM decoder shares, built once for both uses. autograd gives
    each use its own [vocab, hidden] gradient (the lookup's a zeroed matrix with its rows added) and sums them:
    two passes over a freshly allocated vocabulary-sized matrix per step, about 60 ms of a 3 s BERT-base bfloat16
    step on CPU, where each fresh 94 MB matrix is page faults (docs/benchmarks-pretrain.md). Here the decoder's
    backward, which runs first (its input comes from the lookup's output), leaves its gradient in this holder, and
    the lookup's backward adds its rows into it in place and hands autograd the sum as the weight's one gradient.
    The same products and additions, the looked-up rows added to the decoder's gradient one by one rather than
    summed first: the same gradients up to float32 rounding (test_modeling). One holder per forward pass."""

    def __init__(self) -> None:
        self.grad: Tensor | None = None

    @staticmethod
    def for_forward(embeddings: nn.Embedding, decoder: nn.Linear) -> TiedGradient | None:
        """A holder where a backward will follow (grad mode, a weight that learns) and the weight is shared."""
        weight = embeddings.weight
        if torch.is_grad_enabled() and weight.requires_grad and decoder.weight is weight:
            return TiedGradient()
        return None


class _TiedLookup(torch.autograd.Function):
    """F.embedding(ids, weight); its backward adds the looked-up rows' gradients to the decoder's."""

    @staticmethod
    def forward(ctx, weight: Tensor, ids: Tensor, tied: TiedGradient) -> Tensor:
        ctx.save_for_backward(ids)
        ctx.tied, ctx.weight_meta = tied, (weight.shape, weight.dtype, weight.device)
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (ids,) = ctx.saved_tensors
        shape, dtype, device = ctx.weight_meta
        weight_grad, ctx.tied.grad = ctx.tied.grad, None
        if weight_grad is None:  # the decoder's output had no gradient (a loss that did not use it)
            weight_grad = torch.zeros(shape, dtype=dtype, device=device)
        # Rows added in an order that does not change from run to run, so that a run is reproducible (and a resumed
        # one equals the uninterrupted one) bit for bit: on CUDA index_put_ with accumulate sorts the ids (index_add_
        # adds with atomics there); on CPU it is index_put_ that adds with atomics across threads (two threads gave
        # other gradients from one call to the next), and index_add_ adds in the ids' order, as fast.
        rows = grad.reshape(-1, shape[1]).to(dtype)
        if weight_grad.is_cuda:
            weight_grad.index_put_((ids.reshape(-1),), rows, accumulate=True)
        else:
            weight_grad.index_add_(0, ids.reshape(-1), rows)
        return weight_grad, None, None


class _TiedDecoder(torch.autograd.Function):
    """F.linear(x, weight, bias) as autocast runs it (all three in the autocast dtype when it is on); its backward
    leaves the weight's gradient, widened to the weight's dtype, with the lookup (which returns it)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, tied: TiedGradient) -> Tensor:
        device = x.device.type
        ctx.tied, ctx.weight_dtype = tied, weight.dtype
        if torch.is_autocast_enabled(device):
            low = torch.get_autocast_dtype(device)
            x, weight, bias = x.to(low), weight.to(low), bias.to(low)
        ctx.save_for_backward(x, weight)
        with torch.autocast(device, enabled=False):
            return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, Tensor, None]:
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])
        # As autograd's addmm backward computes them: grad @ W, grad.T @ x, the rows' sum.
        weight_grad = (rows.t() @ x.reshape(-1, x.shape[-1])).to(ctx.weight_dtype)
        tied = ctx.tied
        tied.grad = weight_grad if tied.grad is None else tied.grad.add_(weight_grad)
        return grad @ weight, None, rows.sum(0), None


# --------------------------------------------------------------------------- encoder


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, layout: _Layout,
                tied: TiedGradient | None = None) -> Tensor:
        positions = torch.arange(layout.seq, device=input_ids.device).expand(layout.batch, -1)
        ids, types, pos = (layout.pack(t.unsqueeze(-1)).squeeze(-1) for t in (input_ids, token_type_ids, positions))
        words = self.word_embeddings(ids) if tied is None else _TiedLookup.apply(self.word_embeddings.weight, ids, tied)
        x = words + self.token_type_embeddings(types) + self.position_embeddings(pos)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, layout: _Layout, queries: Tensor | None = None) -> Tensor:
        """x: [N, D] tokens; `queries`: [B * P, D], the P tokens per sequence whose output is wanted (all of x
        when None). Every token is attended to either way."""
        # Three module calls, not one matmul over concatenated weights: measured no slower on CPU (the
        # concatenation is a copy of the weights every call), and module-level transforms (dynamic
        # quantisation, hooks, adapters) see each projection.
        def heads(projected: Tensor) -> Tensor:  # [B, heads, T or P, head_dim]
            return projected.view(layout.batch, -1, self.num_heads, self.head_dim).transpose(1, 2)

        if torch.is_autocast_enabled(x.device.type) and x.dtype == torch.float32:
            # Autocast would cast the (float32 residual) input once per projection; once is enough.
            low = torch.get_autocast_dtype(x.device.type)
            x, queries = x.to(low), None if queries is None else queries.to(low)

        q = heads(layout.pad(self.query(x)) if queries is None else self.query(queries))
        k, v = heads(layout.pad(self.key(x))), heads(layout.pad(self.value(x)))
        dropout_p = self.dropout_p if self.training else 0.0
        if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
            context = _explicit_attention(q, k, v, layout.key_mask, dropout_p)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=layout.key_mask, dropout_p=dropout_p)
        context = context.transpose(1, 2)  # [B, T or P, heads, head_dim]
        return layout.pack(context) if queries is None else context.reshape(queries.shape)


def _explicit_attention(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None, dropout_p: float) -> Tensor:
    """softmax(q k^T / sqrt(d)) v with dropout on the probabilities, as three plain ops, for reduced-precision
    inputs on CPU. torch's CPU SDPA kernels are slow there: with dropout it falls back to its math path, which
    upcasts q, k, v to float32, and its flash kernel is no faster; these ops run the two products as
    bfloat16 matmuls (float32 accumulation) and are 1.7x faster with dropout, 2.7-3.4x without (BERT-base and
    small-BERT shapes, docs/benchmarks-pretrain.md). The softmax runs in float32, forward and backward, and its
    probabilities are rounded to bfloat16 for the dropout and the second product, as in flash attention. The
    backward of a softmax, p * (g - sum(g * p)), cancels badly where p is rounded to bfloat16 and the attention is
    peaked over value rows that are alike, as in deep layers: with a bfloat16 softmax, BERT-base's key-weight
    gradients were 0.099 off float32's (norm of the difference over the norm; one draw of random weights in
    python -m evaluation.model_parity), 3.0x transformers' own bfloat16 error (0.033), against 0.034 now; on such
    inputs alone twice the error (test_modeling). About 3 ms more per layer and step (docs/benchmarks-pretrain.md)."""
    scores = torch.matmul(q * (q.shape[-1] ** -0.5), k.transpose(-1, -2))
    if key_mask is not None:
        # Added as 0 / -inf: the same scores as masked_fill gives, but the gradient passes the addition untouched
        # where masked_fill's backward masks it again (20% faster attention forward + backward at BERT-base).
        scores = scores + torch.zeros(key_mask.shape, dtype=scores.dtype, device=scores.device).masked_fill_(
            ~key_mask, float("-inf"))
    probs = scores.softmax(-1, dtype=torch.float32).to(q.dtype)
    if dropout_p > 0:
        probs = dropout(probs, dropout_p, True)
    return torch.matmul(probs, v)


class _NarrowOutputLinear(torch.autograd.Function):
    """x @ weight.T + bias for a reduced-precision Linear on CPU that narrows (out < in: the feed-forward's 3072 ->
    768), whose weight gradient transposes the narrow operand first. autograd computes grad.T @ x with the
    transposed view as the first operand, which oneDNN multiplies at about half its rate; copying the
    [N, out] gradient transposed first (the cheap side of the product) and multiplying contiguous operands is
    about 5 ms faster per layer at BERT-base (one core, bfloat16: 13-14 ms against 19; docs/benchmarks-pretrain.md).
    The same products, in another order of memory only: the gradients equal autograd's (test_modeling)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        ctx.save_for_backward(x, weight)
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t().contiguous() @ x, grad.sum(0)


class _WideningLinear(torch.autograd.Function):
    """x @ weight.T + bias for a reduced-precision Linear on CPU that widens (out > in: the feed-forward's 768 ->
    3072). Its weight gradient grad.T @ x has the wide [N, out] gradient as oneDNN's transposed first operand (half
    rate), and copying that operand transposed costs more than it saves (torch's bfloat16 transposing copy, 13x a
    plain copy). So the product is turned around: x.T @ grad, the narrow x copied transposed first (1 ms), is the
    weight gradient transposed, [in, out], at full rate; the float32 widening that the weight's gradient gets
    anyway is made a transposing copy into the weight's layout (a few ms in float32). Hence the float32 weight and
    bias come in and are cast here, as autocast would, and their gradients leave in float32. At BERT-base (one
    core) the product takes 11.9 ms instead of 18.1, the copies 4.9 instead of 0.6: the intermediate's forward +
    backward 82 ms against 105 where the machine's memory is contended, level (58-64 against 58-60) where it is not
    (docs/benchmarks-pretrain.md). The same products: the gradients equal autograd's up to the order of float32
    accumulation (test_modeling)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, low: torch.dtype) -> Tensor:
        x, low_weight = x.to(low), weight.to(low)
        ctx.save_for_backward(x, low_weight)
        ctx.dtypes = (weight.dtype, bias.dtype)
        return torch.addmm(bias.to(low), x, low_weight.t())

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        x, weight = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.dtypes
        weight_grad = torch.empty(weight.shape, dtype=weight_dtype).copy_((x.t().contiguous() @ grad).t())
        return grad @ weight, weight_grad, grad.sum(0).to(bias_dtype), None


def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    """layer(x), through _NarrowOutputLinear or _WideningLinear where they pay: on CPU under reduced-precision
    autocast, a plain nn.Linear (not one a module transform replaced) that narrows or widens, on [N, in] rows."""
    if (x.device.type == "cpu" and torch.is_autocast_enabled("cpu") and type(layer) is nn.Linear and x.dim() == 2
            and layer.bias is not None and layer.out_features != layer.in_features and torch.is_grad_enabled()):
        low = torch.get_autocast_dtype("cpu")
        with torch.autocast("cpu", enabled=False):
            if layer.out_features > layer.in_features:
                return _WideningLinear.apply(x, layer.weight, layer.bias, low)
            return _NarrowOutputLinear.apply(x.to(low), layer.weight.to(low), layer.bias.to(low))
    return layer(x)


class BertResidualOutput(nn.Module):
    """Projection back to the hidden size, dropout, residual, LayerNorm: HF's BertSelfOutput (after
    attention, `attention.output.*`) and BertOutput (after the feed-forward, `output.*`)."""

    def __init__(self, config: BertConfig, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, hidden: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(_linear(self.dense, hidden)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertResidualOutput(config, config.hidden_size)

    def forward(self, x: Tensor, layout: _Layout, queries: Tensor | None = None) -> Tensor:
        return self.output(self.self(x, layout, queries), x if queries is None else queries)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = _ACT[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.act(_linear(self.dense, x))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidualOutput(config, config.intermediate_size)

    def forward(self, x: Tensor, layout: _Layout, queries: Tensor | None = None) -> Tensor:
        """[N, D] -> [N, D]; with `queries` (rows of x), their outputs only, [len(queries), D]."""
        attended = self.attention(x, layout, queries)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output: Tensor) -> Tensor:
        return torch.tanh(self.dense(sequence_output[:, 0]))


# --------------------------------------------------------------------------- base class


class BertPreTrainedModel(nn.Module):
    """Initialisation, loading and saving shared by the encoder and every head."""

    # Keys under these prefixes may be absent from a checkpoint: they are this class's new head.
    new_head_prefixes: tuple[str, ...] = ()

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config

    def init_weights(self) -> None:
        """BERT's initialisation: truncated-free normal(0, initializer_range), zero biases, unit LayerNorm."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=std)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share parameters that BERT shares (the MLM decoder and the word embeddings)."""

    @classmethod
    def from_pretrained(cls, name_or_path: str, **config_overrides: Any):
        """Load a model dir (HF `config.json` or Google `bert_config.json` + safetensors/bin), an
        s3:// URI of one, or a model zoo name resolved under BERT_MODEL_STORE."""
        from bert_core.model.weights import load_pretrained

        return load_pretrained(cls, name_or_path, **config_overrides)

    def save_pretrained(self, out_dir: str, vocab_file: str | None = None) -> None:
        from bert_core.model.weights import save_pretrained

        save_pretrained(self, out_dir, vocab_file=vocab_file)


class BertModel(BertPreTrainedModel):
    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        # Export to static graphs (ONNX, torch.export) sets this: no packing (its shapes depend on the
        # data) and no value checks, only the dense path with the mask; outputs then equal HF's everywhere.
        self.static_graph = False
        self.init_weights()

    def _check_inputs(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor | None,
                      positions: Tensor | None = None) -> int | None:
        """Raise on inputs the model cannot take; the number of real tokens when the batch has padding, else None
        (always None under static_graph)."""
        cfg = self.config
        if input_ids.dim() != 2:
            raise BertPipelineError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] > cfg.max_position_embeddings:
            raise BertPipelineError(
                f"sequence length {input_ids.shape[1]} exceeds max_position_embeddings "
                f"({cfg.max_position_embeddings}); truncate or split the input")
        for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
            if t is not None and t.shape != input_ids.shape:
                raise BertPipelineError(f"{name} shape {tuple(t.shape)} != input_ids shape {tuple(input_ids.shape)}")
        if input_ids.numel() == 0:
            raise BertPipelineError("input_ids is empty")
        if positions is not None and (positions.dim() != 2 or positions.shape[0] != input_ids.shape[0]):
            raise BertPipelineError(f"masked_lm_positions must be [batch, predictions] with batch "
                                    f"{input_ids.shape[0]}, got shape {tuple(positions.shape)}")
        if self.static_graph:
            return None
        # An out-of-range id is a CUDA device assert or an opaque IndexError otherwise. The values come back in one
        # transfer: on a GPU each one is a wait for the device, every step.
        stats = [input_ids.min(), input_ids.max(), token_type_ids.min(), token_type_ids.max()]
        if positions is not None and positions.numel():
            stats += [positions.min(), positions.max()]
        if attention_mask is not None:
            stats.append((attention_mask != 0).sum())
        lo, hi, type_lo, type_hi, *rest = torch.stack([v.to(torch.long) for v in stats]).tolist()
        if positions is not None and positions.numel():
            # Out of range, a position would index another sequence's row (the last layer picks rows of the
            # flattened batch), not fail.
            pos_lo, pos_hi, *rest = rest
            if pos_lo < 0 or pos_hi >= input_ids.shape[1]:
                raise BertPipelineError(f"masked_lm_positions must be in [0, {input_ids.shape[1]}) (the sequence "
                                        f"length), got {pos_lo if pos_lo < 0 else pos_hi}")
        real = rest
        if lo < 0 or hi >= cfg.vocab_size:
            bad = lo if lo < 0 else hi
            raise BertPipelineError(f"token id {bad} is outside the vocabulary (vocab_size={cfg.vocab_size}); "
                                    "was the input encoded with this model's vocab.txt?")
        if type_lo < 0 or type_hi >= cfg.type_vocab_size:
            raise BertPipelineError(f"token_type_ids must be in [0, {cfg.type_vocab_size}), got "
                                    f"{type_lo if type_lo < 0 else type_hi}")
        return real[0] if real and real[0] < input_ids.numel() else None

    def _layout(self, input_ids: Tensor, attention_mask: Tensor | None, real_tokens: int | None) -> _Layout:
        batch, seq = input_ids.shape
        if self.static_graph:
            key_mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
            return _Layout(batch, seq, None, key_mask)
        if attention_mask is None or real_tokens is None:
            return _Layout(batch, seq, None, None)
        key_mask = attention_mask.bool()[:, None, None, :]
        if not packs(input_ids.device, real_tokens, batch * seq):
            return _Layout(batch, seq, None, key_mask)
        # Its size known from the checks' one read, so this asks the device nothing (nonzero would wait for it).
        indices = torch.nonzero_static(attention_mask.reshape(-1), size=real_tokens).squeeze(1)
        return _Layout(batch, seq, indices, key_mask)

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        output_all_encoded_layers: bool = False,
        positions: Tensor | None = None,
        tied: TiedGradient | None = None,
    ) -> BertModelOutput:
        """With `positions` ([B, P]), sequence_output is [B, P, H] at those positions (as gathered from the
        full output), and the last layer computes only them and [CLS]: the only rows a loss over masked
        positions and the pooler read (the keys and values still come from every token). That saves most of
        the last layer's work: 5% of a BERT-base pretraining step, more in shallower models
        (docs/benchmarks-pretrain.md). Not with output_all_encoded_layers, which returns every position.
        `tied`: the holder a model whose MLM decoder shares the word embeddings passes to both (TiedGradient)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        real_tokens = self._check_inputs(input_ids, token_type_ids, attention_mask, positions)
        layout = self._layout(input_ids, attention_mask, real_tokens)
        x = self.embeddings(input_ids, token_type_ids, layout, tied)
        if positions is not None and not output_all_encoded_layers:
            *layers, last = self.encoder.layer
            for layer in layers:
                x = layer(x, layout)
            wanted = torch.cat([torch.zeros_like(positions[:, :1]), positions], dim=1)  # [CLS] first
            x = last(x, layout, x.index_select(0, layout.rows(wanted))).view(layout.batch, wanted.shape[1], -1)
            pooled = self.pooler(x) if self.pooler is not None else None
            return BertModelOutput(x[:, 1:], pooled)
        all_layers = [] if output_all_encoded_layers else None
        for layer in self.encoder.layer:
            x = layer(x, layout)
            if all_layers is not None:
                all_layers.append(layout.pad(x))
        sequence_output = all_layers[-1] if all_layers else layout.pad(x)
        pooled = self.pooler(sequence_output) if self.pooler is not None else None
        if positions is not None:
            sequence_output = _gather_positions(sequence_output, positions)
        return BertModelOutput(sequence_output, pooled, all_layers)


# --------------------------------------------------------------------------- heads


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = _ACT[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        # Under autocast the dense output is bfloat16/float16; the LayerNorm's statistics are taken in the
        # weights' precision, float32 (as every other LayerNorm's here, whose input is the float32 residual
        # stream). A no-op without autocast.
        return self.LayerNorm(self.act(self.dense(x)).to(self.LayerNorm.weight.dtype))


class BertLMPredictionHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)  # tied to word embeddings
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor, tied: TiedGradient | None = None) -> Tensor:
        if tied is None:
            return F.linear(self.transform(x), self.decoder.weight, self.bias)
        return _TiedDecoder.apply(self.transform(x), self.decoder.weight, self.bias, tied)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertOnlyNSPHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def _gather_positions(sequence_output: Tensor, positions: Tensor) -> Tensor:
    """[B, T, H] at [B, P] positions -> [B, P, H] (Google's gather_indexes)."""
    index = positions.long().unsqueeze(-1).expand(-1, -1, sequence_output.shape[-1])
    return sequence_output.gather(1, index)


def _masked_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).long(), ignore_index=-100)


def _weighted_masked_lm_loss(logits: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
    """Google's run_pretraining loss: weighted mean over real predictions (weight 0 = padding slot)."""
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids.reshape(-1).long(),
                                reduction="none")
    w = weights.reshape(-1).to(per_token.dtype)
    return (per_token * w).sum() / (w.sum() + 1e-5)


class _MLMTiedMixin:
    def tie_weights(self) -> None:
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight


class BertForPreTraining(_MLMTiedMixin, BertPreTrainedModel):
    new_head_prefixes = ("cls.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.init_weights()

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        next_sentence_label: Tensor | None = None,
        masked_lm_positions: Tensor | None = None,
        masked_lm_ids: Tensor | None = None,
        masked_lm_weights: Tensor | None = None,
        output_all_encoded_layers: bool = False,
    ) -> PreTrainingOutput:
        tied = TiedGradient.for_forward(self.bert.embeddings.word_embeddings, self.cls.predictions.decoder)
        out = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers, masked_lm_positions,
                        tied)
        logits = self.cls.predictions(out.sequence_output, tied)
        nsp_logits = self.cls.seq_relationship(out.pooled_output)
        mlm_loss = nsp_loss = None
        if labels is not None:
            mlm_loss = _masked_lm_loss(logits, labels)
        elif masked_lm_ids is not None:
            if masked_lm_positions is None:
                raise BertPipelineError("masked_lm_ids needs masked_lm_positions")
            weights = masked_lm_weights if masked_lm_weights is not None else torch.ones_like(masked_lm_ids)
            mlm_loss = _weighted_masked_lm_loss(logits, masked_lm_ids, weights)
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.reshape(-1).long())
        parts = [p for p in (mlm_loss, nsp_loss) if p is not None]
        loss = sum(parts[1:], parts[0]) if parts else None
        return PreTrainingOutput(logits, nsp_logits, loss, mlm_loss, nsp_loss, out.all_encoder_layers)


class BertForMaskedLM(_MLMTiedMixin, BertPreTrainedModel):
    new_head_prefixes = ("cls.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                output_all_encoded_layers: bool = False) -> LogitsOutput:
        tied = TiedGradient.for_forward(self.bert.embeddings.word_embeddings, self.cls.predictions.decoder)
        out = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers, tied=tied)
        logits = self.cls.predictions(out.sequence_output, tied)
        loss = _masked_lm_loss(logits, labels) if labels is not None else None
        return LogitsOutput(logits, loss, out.all_encoder_layers)


class BertForNextSentencePrediction(BertPreTrainedModel):
    new_head_prefixes = ("cls.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertOnlyNSPHead(config)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                output_all_encoded_layers: bool = False) -> LogitsOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers)
        logits = self.cls.seq_relationship(out.pooled_output)
        loss = F.cross_entropy(logits.float(), labels.reshape(-1).long()) if labels is not None else None
        return LogitsOutput(logits, loss, out.all_encoder_layers)


class BertForSequenceClassification(BertPreTrainedModel):
    """Classification; with num_labels=1, regression (MSE), as GLUE's STS-B needs."""

    new_head_prefixes = ("classifier.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        drop = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = Dropout(drop)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                output_all_encoded_layers: bool = False) -> LogitsOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers)
        logits = self.classifier(self.dropout(out.pooled_output))
        loss = self._loss(logits, labels) if labels is not None else None
        return LogitsOutput(logits, loss, out.all_encoder_layers)

    def _loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        problem = self.config.problem_type
        if problem is None:  # HF's inference rule, so HF-trained configs mean the same here.
            if self.config.num_labels == 1:
                problem = "regression"
            elif labels.dtype in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
                problem = "single_label_classification"
            else:
                problem = "multi_label_classification"
        if problem == "regression":
            if self.config.num_labels == 1:
                return F.mse_loss(logits.squeeze(-1).float(), labels.reshape(-1).float())
            return F.mse_loss(logits.float(), labels.float())
        if problem == "single_label_classification":
            return F.cross_entropy(logits.float().view(-1, self.config.num_labels), labels.reshape(-1).long())
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class BertForTokenClassification(BertPreTrainedModel):
    new_head_prefixes = ("classifier.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        drop = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = Dropout(drop)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                output_all_encoded_layers: bool = False) -> LogitsOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers)
        logits = self.classifier(self.dropout(out.sequence_output))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().view(-1, self.config.num_labels), labels.reshape(-1).long(),
                                   ignore_index=-100)
        return LogitsOutput(logits, loss, out.all_encoder_layers)


def qa_loss_logits(logits: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Start/end logits for the QA loss, with padded positions out of the softmax.

    A deliberate difference from HF and Google's run_squad, whose softmax runs over every position,
    padding included: an answer can never start in the padding, and counting it makes the loss depend on
    how far a batch was padded (and, in the packed path where padded hidden states are zero, on the bias).
    The returned logits (and so predictions) are untouched."""
    logits = logits.float()
    if attention_mask is None:
        return logits
    return logits.masked_fill(attention_mask.to(torch.bool).logical_not(), torch.finfo(logits.dtype).min / 2)


class BertForQuestionAnswering(BertPreTrainedModel):
    new_head_prefixes = ("qa_outputs.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, start_positions=None,
                end_positions=None, output_all_encoded_layers: bool = False) -> QuestionAnsweringOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers)
        start_logits, end_logits = self.qa_outputs(out.sequence_output).split(1, dim=-1)
        start_logits, end_logits = start_logits.squeeze(-1).contiguous(), end_logits.squeeze(-1).contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            # Positions outside the window (answer cut off by the doc stride) are ignored, as in HF.
            ignored = start_logits.shape[1]
            start = start_positions.reshape(-1).long().clamp(0, ignored)
            end = end_positions.reshape(-1).long().clamp(0, ignored)
            loss = (F.cross_entropy(qa_loss_logits(start_logits, attention_mask), start, ignore_index=ignored)
                    + F.cross_entropy(qa_loss_logits(end_logits, attention_mask), end, ignore_index=ignored)) / 2
        return QuestionAnsweringOutput(start_logits, end_logits, loss, out.all_encoder_layers)


HEAD_CLASSES: dict[str, type[BertPreTrainedModel]] = {
    cls.__name__: cls
    for cls in (BertModel, BertForPreTraining, BertForMaskedLM, BertForNextSentencePrediction,
                BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering)
}


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def encoder_flops_per_token(config: BertConfig, seq_len: int) -> int:
    """Forward matmul FLOPs per token of the encoder: projections + feed-forward + the two attention products."""
    h, i, n = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return 2 * n * (4 * h * h + 2 * h * i) + 2 * n * 2 * seq_len * h


def encoder_flops(config: BertConfig, tokens: int, seq_len: int, output_rows: int | None = None) -> int:
    """Forward matmul FLOPs of the encoder over `tokens` tokens; with `output_rows` (BertModel's `positions`:
    B x (1 + P) rows, [CLS] included), the last layer projects keys and values for every token and does the rest
    for those rows only."""
    per_layer = encoder_flops_per_token(config, seq_len) // config.num_hidden_layers
    if output_rows is None:
        return tokens * per_layer * config.num_hidden_layers
    keys_values = 2 * 2 * config.hidden_size * config.hidden_size
    return tokens * per_layer * (config.num_hidden_layers - 1) + tokens * keys_values + \
        output_rows * (per_layer - keys_values)
