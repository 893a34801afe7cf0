"""ONNX Runtime's transformer fusions for an exported task model (`bert-pipeline export`, on by default).

ONNX Runtime runs BERT fastest as a handful of fused kernels: `Attention` (the three projections as
one GEMM, scaled scores, mask, softmax, context), `SkipLayerNormalization` (residual add + LayerNorm)
and `BiasGelu` (bias add + GELU). Its transformer optimizer
(`onnxruntime.transformers.optimizer.optimize_model`) finds those subgraphs by matching op patterns, the
patterns of the classic dense BERT graph. Our model's own forward does not produce them: even with
`static_graph` set, the per-token layers run on a flattened [batch * seq, hidden] matrix (so every
projection exports as `Gemm` between reshapes, not `MatMul` + `Add`) and attention is
`scaled_dot_product_attention` with a boolean mask, which the exporter decomposes into
`Where`/`IsNaN` guards. Exported that way, nothing fuses (measured: 0 Attention, 0 SkipLayerNormalization,
with the dynamo and with the TorchScript exporter alike).

So the export traces `FusableGraph`: the same model (its own modules and parameters, nothing copied),
written as the dense computation on [batch, seq, hidden] with the additive mask, which is the same
function (the export's parity check compares it with the PyTorch model). Then `optimize` runs ONNX
Runtime's optimizer, checks that every layer fused, and returns the fused operator counts for
export.json.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bert_core.errors import BertPipelineError
from bert_core.model.config import BertConfig
from bert_core.model.modeling import _ACT, BertForQuestionAnswering, BertPreTrainedModel

log = logging.getLogger(__name__)

# Added to the attention scores at masked keys: the value ONNX Runtime's Attention kernel uses, and
# (exp(-10000) being 0 in float32) the same softmax as the model's boolean mask.
MASK_VALUE = -10000.0

# The fused operators reported in export.json (the optimizer's statistics, zero counts left out).
REPORTED = ("Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
            "LayerNormalization", "BiasGelu", "FastGelu", "Gelu", "GemmFastGelu")


class FusableGraph(nn.Module):
    """The task model as the dense BERT graph ONNX Runtime's fusions recognise.

    Positional int64 inputs [batch, seq] and plain tensor outputs, as `export._Graph`; it calls the
    model's own embedding, projection, LayerNorm and head modules on [batch, seq, hidden] tensors.
    """

    def __init__(self, model: BertPreTrainedModel, task: str):
        super().__init__()
        self.model, self.task = model, task
        config = model.config
        self.heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.act = _ACT[config.hidden_act]

    def encode(self, input_ids, token_type_ids, attention_mask):
        bert = self.model.bert
        batch, seq = input_ids.shape
        emb = bert.embeddings
        positions = torch.arange(seq, device=input_ids.device).unsqueeze(0)
        x = emb.word_embeddings(input_ids) + emb.token_type_embeddings(token_type_ids) \
            + emb.position_embeddings(positions)
        x = emb.LayerNorm(x)
        # [batch, 1, 1, seq]: 0 where a key may be attended to, MASK_VALUE where not.
        additive = (1.0 - attention_mask.unsqueeze(1).unsqueeze(2).to(x.dtype)) * MASK_VALUE
        scale = math.sqrt(self.head_dim)
        for layer in bert.encoder.layer:
            attn = layer.attention.self
            q = attn.query(x).view(batch, seq, self.heads, self.head_dim).permute(0, 2, 1, 3)
            k = attn.key(x).view(batch, seq, self.heads, self.head_dim).permute(0, 2, 3, 1)
            v = attn.value(x).view(batch, seq, self.heads, self.head_dim).permute(0, 2, 1, 3)
            probs = torch.softmax(torch.matmul(q, k) / scale + additive, dim=-1)
            context = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(batch, seq, self.heads * self.head_dim)
            out = layer.attention.output
            x = out.LayerNorm(out.dense(context) + x)
            out = layer.output
            x = out.LayerNorm(out.dense(self.act(layer.intermediate.dense(x))) + x)
        return x

    def forward(self, input_ids, token_type_ids, attention_mask):
        x = self.encode(input_ids, token_type_ids, attention_mask)
        model = self.model
        if self.task == "question_answering":
            assert isinstance(model, BertForQuestionAnswering)
            start, end = model.qa_outputs(x).split(1, dim=-1)
            return start.squeeze(-1), end.squeeze(-1)
        if self.task == "token_classification":
            return model.classifier(x)
        return model.classifier(model.bert.pooler(x))  # (dropout is the identity in eval mode)


def split_unsqueezes(graph) -> int:
    """Rewrite each Unsqueeze over several axes as a chain of single-axis Unsqueezes (the same tensor).

    ONNX Runtime's BERT attention fusion finds the mask through `Mul <- Sub <- Cast <- Unsqueeze <-
    Unsqueeze` (what the TorchScript exporter writes for `mask[:, None, None, :]`); the dynamo exporter's
    graph optimizer merges the two Unsqueezes into one with axes [1, 2], and the fusion then finds no
    mask and fuses no attention. Returns how many nodes were split."""
    from onnx import helper, numpy_helper

    initializers = {i.name: i for i in graph.initializer}
    nodes, replaced, split = [], set(), 0
    for node in graph.node:
        axes_name = node.input[1] if node.op_type == "Unsqueeze" and len(node.input) == 2 else None
        axes = numpy_helper.to_array(initializers[axes_name]).tolist() if axes_name in initializers else []
        if len(axes) < 2 or min(axes) < 0:
            nodes.append(node)
            continue
        current = node.input[0]
        for i, axis in enumerate(sorted(axes)):  # ascending: each axis is where it will be in the result
            name = f"{node.name}_axis{axis}"
            axes_init = numpy_helper.from_array(np.array([axis], dtype=np.int64), f"{name}_axes")
            graph.initializer.append(axes_init)
            output = node.output[0] if i == len(axes) - 1 else f"{name}_output"
            nodes.append(helper.make_node("Unsqueeze", [current, axes_init.name], [output], name=name))
            current = output
        replaced.add(axes_name)
        split += 1
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    for init in [i for i in graph.initializer if i.name in replaced - used]:  # the replaced nodes' axes
        graph.initializer.remove(init)
    return split


def optimize(src: Path, dst: Path, config: BertConfig) -> dict:
    """Fuse `src` (an export of FusableGraph) with ONNX Runtime's transformer optimizer into `dst`.

    The attention mask stays the raw 2D mask (not ORT's default for BERT, sequence lengths taken from
    it, which assumes every row's padding is at its end), so the fused graph equals the model for any
    mask. Returns what export.json records; raises if a layer's attention or LayerNorms did not fuse."""
    import onnx
    import onnxruntime
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    graph = onnx.load(str(src))
    split = split_unsqueezes(graph.graph)
    prepared = dst.with_name(".prepared.onnx")
    onnx.save(graph, str(prepared))
    options = FusionOptions("bert")
    options.use_raw_attention_mask(True)
    # The optimizer logs a line per fusion step through top-level loggers (fusion_base, onnx_model, ...)
    # at INFO: kept out of an export's log; what fused is checked and recorded below.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        fused = optimize_model(str(prepared), model_type="bert", num_heads=config.num_attention_heads,
                               hidden_size=config.hidden_size, optimization_options=options, opt_level=0)
        fused.save_model_to_file(str(dst))
        statistics = fused.get_fused_operator_statistics()
    finally:
        root.setLevel(level)
        prepared.unlink(missing_ok=True)
    counts = {op: int(statistics[op]) for op in REPORTED if statistics.get(op)}
    layers = config.num_hidden_layers
    expected = {"Attention": layers, "SkipLayerNormalization": 2 * layers}
    if config.hidden_act == "gelu":
        expected["BiasGelu"] = layers
    missing = {op: f"{counts.get(op, 0)} of {n}" for op, n in expected.items() if counts.get(op, 0) < n}
    if missing:
        raise BertPipelineError(
            f"ONNX Runtime's transformer optimizer (onnxruntime {onnxruntime.__version__}) did not fuse every "
            f"layer: {missing}. Export without it (--no-optimize) and report the versions of torch, onnxscript "
            "and onnxruntime")
    return {"tool": "onnxruntime.transformers.optimizer.optimize_model", "onnxruntime": onnxruntime.__version__,
            "model_type": "bert", "attention_mask": "raw 2D mask", "fused_operators": counts,
            "expected_at_least": expected, "unsqueezes_split": split}
