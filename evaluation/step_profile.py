"""Where a pretraining step's time goes: torch.profiler ranges per part of the model, forward and backward.

Both BERTs compared by evaluation.pretrain_throughput name their modules alike (HF's names), so one table
splits either step into: embeddings, attention (Q/K/V projections, the attention product, the output
projection and its LayerNorm), feed-forward (intermediate + output projection and LayerNorm), the MLM head
(transform + the vocabulary decoder), pooler + NSP, the loss, the optimizer (clipping, AdamW, zeroing) and
the rest (autograd bookkeeping, casts, the code between modules).

A part's forward is the time between its forward pre-hook and forward hook; its backward the time between
its full backward pre-hook (the gradient of its output is ready) and its full backward hook (the gradient of
its input is). The embeddings' backward and the loss are attributed by op name. Times are inclusive CPU
time of the ranges as the profiler records it, per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from torch import nn
from torch.autograd.profiler import record_function

PARTS = ("embeddings", "attention", "feed-forward", "MLM head", "pooler + NSP", "loss", "optimizer")
# Attributed by op name: embedding lookups take integer ids (no input gradient to close a backward range on),
# and the loss is a few functional calls (cross-entropy forward, its two backward nodes), not a module.
# Ours looks the word embeddings up through modeling._TiedLookup (their gradient shared with the decoder's).
EMBEDDING_BACKWARD_OPS = ("autograd::engine::evaluate_function: EmbeddingBackward0",
                          "autograd::engine::evaluate_function: _TiedLookupBackward")
LOSS_OPS = ("aten::cross_entropy_loss", "autograd::engine::evaluate_function: NllLossBackward0",
            "autograd::engine::evaluate_function: LogSoftmaxBackward0")


def part_modules(model: nn.Module) -> dict[str, list[nn.Module]]:
    """The modules of each part of a BertForPreTraining (ours or transformers')."""
    layers = model.bert.encoder.layer
    return {
        "embeddings": [model.bert.embeddings],
        "attention": [layer.attention for layer in layers],
        "feed-forward": [m for layer in layers for m in (layer.intermediate, layer.output)],
        "MLM head": [model.cls.predictions],
        "pooler + NSP": [model.bert.pooler, model.cls.seq_relationship],
    }


@contextlib.contextmanager
def part_ranges(model: nn.Module) -> Iterator[None]:
    """Profiler ranges `fwd/<part>` and `bwd/<part>` around every part's forward and backward."""
    handles = []

    def ranges(label: str, module: nn.Module, backward: bool) -> None:
        open_: list[record_function] = []

        def enter(*_):
            rf = record_function(label)
            rf.__enter__()
            open_.append(rf)

        def leave(*_):
            if open_:
                open_.pop().__exit__(None, None, None)

        if backward:
            handles.append(module.register_full_backward_pre_hook(lambda m, g: enter()))
            handles.append(module.register_full_backward_hook(lambda m, gi, go: leave()))
        else:
            handles.append(module.register_forward_pre_hook(lambda m, a: enter()))
            handles.append(module.register_forward_hook(lambda m, a, o: leave()))

    for part, modules in part_modules(model).items():
        for module in modules:
            ranges(f"fwd/{part}", module, backward=False)
            if part != "embeddings":  # integer inputs: no input gradient to close a range on (see the op names)
                ranges(f"bwd/{part}", module, backward=True)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def profile_steps(model: nn.Module, step: Callable[[int], None], steps: int) -> dict[str, dict[str, float]]:
    """Run `step(i)` for i < steps under the profiler; seconds per step by part: {part: {forward, backward}},
    plus "total" and "other" (the step's time outside the parts). `step` wraps its optimizer work (clipping,
    the update, zeroing) in record_function("optimizer")."""
    from torch.profiler import ProfilerActivity, profile

    with part_ranges(model), profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            with record_function("step"):
                step(i)
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        totals[event.key] = totals.get(event.key, 0.0) + event.cpu_time_total / 1e6
    rows: dict[str, dict[str, float]] = {}
    for part in PARTS:
        if part == "loss":
            rows[part] = {"forward": sum(totals.get(op, 0.0) for op in LOSS_OPS) / steps, "backward": 0.0}
            continue
        if part == "optimizer":
            rows[part] = {"forward": totals.get(part, 0.0) / steps, "backward": 0.0}
            continue
        backward = totals.get(f"bwd/{part}", 0.0)
        if part == "embeddings":
            backward = sum(totals.get(op, 0.0) for op in EMBEDDING_BACKWARD_OPS)
        rows[part] = {"forward": totals.get(f"fwd/{part}", 0.0) / steps, "backward": backward / steps}
    total = totals.get("step", 0.0) / steps
    rows["other"] = {"forward": total - sum(r["forward"] + r["backward"] for r in rows.values()), "backward": 0.0}
    rows["total"] = {"forward": total, "backward": 0.0}
    return rows


def render(tables: dict[str, dict[str, dict[str, float]]]) -> str:
    """A Markdown table: one row per part, forward / backward / share of the step for each system."""
    systems = list(tables)
    head = "| part | " + " | ".join(f"{s} fwd s | {s} bwd s | {s} share" for s in systems) + " |"
    lines = [head, "| --- |" + " --- | --- | --- |" * len(systems)]
    for part in (*PARTS, "other", "total"):
        cells = []
        for s in systems:
            row, total = tables[s][part], tables[s]["total"]["forward"]
            both = row["forward"] + row["backward"]
            if part in ("other", "total", "loss", "optimizer"):
                cells.append(f"{both:.3f} | | {both / total:.0%}")
            else:
                cells.append(f"{row['forward']:.3f} | {row['backward']:.3f} | {both / total:.0%}")
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
