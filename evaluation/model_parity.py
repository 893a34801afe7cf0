"""Numerical parity with transformers' BertForPreTraining on a device of your choice: forward and backward.

The unit tests check parity on CPU (tests/bert_core/model/test_modeling.py); a GPU runs other kernels (cuBLAS,
SDPA's fused attention, the packing indices by nonzero_static), so this runs the same comparison where a user
trains. For each size in --configs: identical random weights (ours loaded from transformers' state dict through
the strict loader), two batches of six sequences with two segments and 15% of the real tokens as MLM labels, one
half padded and more (ours packs it) and one barely padded (ours runs it padded, with the mask), dropout off;
the two models' MLM logits at the real positions, NSP logits and loss (the largest difference over the
reference's largest magnitude), and every parameter's gradient (the norm of the difference over the reference's
norm, or over a hundredth of the largest gradient's norm where that is more: some gradients are zero in exact
arithmetic, the key bias's, and hold rounding alone).

- float32, with TF32 matmuls off: the same arithmetic up to summation order; the run fails (exit 1) where a
  figure is above --tol.
- bfloat16 autocast (where the device has it): ours against the same float32 reference, beside transformers'
  own bfloat16 run against it: the error bfloat16 brings, in each system. Reported, not bounded by --tol.

    python -m evaluation.model_parity --device cuda --configs bert_12_768_12 --out-json bench-results/parity.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from evaluation.model_throughput import architecture_name

FLOAT32_TOL = 1e-4


def _batch(vocab: int, lengths: list[int], seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    seq = max(lengths)
    ids = torch.randint(5, vocab, (len(lengths), seq), generator=g)
    mask = (torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]).long()
    types = ((torch.arange(seq)[None, :] >= torch.tensor(lengths)[:, None] // 2) & mask.bool()).long()
    labels = torch.where((torch.rand(ids.shape, generator=g) < 0.15) & mask.bool(), ids, -100)
    nsp = torch.randint(0, 2, (len(lengths),), generator=g)
    batch = {"input_ids": ids * mask, "token_type_ids": types, "attention_mask": mask, "labels": labels,
             "next_sentence_label": nsp}
    return {k: v.to(device) for k, v in batch.items()}


def _pair(name: str, device: torch.device, peer_attention: str = "eager"):
    from bert_core.model.weights import load_state_into
    from evaluation.pretrain_throughput import build_pair

    ours, theirs, cfg = build_pair(name, attn_implementation=peer_attention)
    with torch.no_grad():  # non-trivial values everywhere: zero biases and unit LayerNorms hide mistakes
        for pname, p in theirs.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "LayerNorm.weight" in pname else 0.05 * torch.randn_like(p))
    load_state_into(ours, theirs.state_dict(), "transformers")
    return ours.to(device).eval(), theirs.to(device).eval(), cfg  # eval: dropout off


def _relative(a: torch.Tensor, b: torch.Tensor, floor: float = 1e-12) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(floor))


def _outputs(model: torch.nn.Module, batch: dict[str, torch.Tensor], dtype: str) -> dict:
    """A forward and backward: MLM logits at the real positions, NSP logits, loss, each parameter's gradient."""
    model.zero_grad(set_to_none=True)
    with torch.autocast(batch["input_ids"].device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        out = model(**batch)
    out.loss.backward()
    real = batch["attention_mask"].bool()
    return {"mlm_logits": out.prediction_logits[real].detach(), "nsp_logits": out.seq_relationship_logits.detach(),
            "loss": out.loss.detach(), "grads": {n: p.grad for n, p in model.named_parameters()}}


def _errors(got: dict, reference: dict) -> dict:
    # A gradient's error is the norm of its difference over the norm of the reference's, with that norm floored at
    # a hundredth of the largest: some gradients are zero in exact arithmetic (the key bias's: softmax ignores a
    # shift) and hold rounding alone. Norms, not single elements: one outlier element is not a wrong gradient.
    norms = {n: float(g.float().norm()) for n, g in reference["grads"].items()}
    floor = 1e-2 * max(norms.values())
    grads = {n: float((g.float() - reference["grads"][n].float()).norm()) / max(norms[n], floor)
             for n, g in got["grads"].items()}
    worst = max(grads, key=grads.get)
    return {**{k: _relative(got[k], reference[k]) for k in ("mlm_logits", "nsp_logits", "loss")},
            "gradients": grads[worst], "worst_gradient": worst}


# Fractions of each sequence's length that is real: a batch half padded and more (packed on every device) and one
# barely padded (run padded, with the mask, on every device): bert_core.model.modeling.packs decides.
LAYOUTS = {"half padded": (1.0, 0.5, 0.07, 0.23, 0.78, 0.03), "barely padded": (1.0, 1.0, 0.99, 1.0, 0.94, 1.0)}


def compare(name: str, device: torch.device, dtype: str, seed: int = 0, peer_attention: str = "eager",
            layout: str = "half padded") -> dict:
    """One size, one precision, one batch layout: ours against transformers in float32 (the reference), each
    output's relative difference; in bfloat16 also transformers' own bfloat16 run against the same reference."""
    from bert_core.model.modeling import packs

    torch.manual_seed(seed)
    ours, theirs, cfg = _pair(name, device, peer_attention)
    seq = min(128, cfg.max_position_embeddings)
    batch = _batch(cfg.vocab_size, [max(3, round(seq * f)) for f in LAYOUTS[layout]], seed, device)
    real, positions = int(batch["attention_mask"].sum()), batch["attention_mask"].numel()
    reference = _outputs(theirs, batch, "float32")
    row = {"config": name, "device": str(device), "dtype": dtype, "layout": layout, "tokens": real,
           "padding": round(1 - real / positions, 3), "packed": packs(device, real, positions),
           **_errors(_outputs(ours, batch, dtype), reference)}
    if dtype != "float32":
        row["transformers"] = _errors(_outputs(theirs, batch, dtype), reference)
    return row


def _summary(r: dict) -> str:
    return (f"MLM logits {r['mlm_logits']:.2e}, NSP logits {r['nsp_logits']:.2e}, loss {r['loss']:.2e}, "
            f"gradients {r['gradients']:.2e} (largest at {r['worst_gradient']})")


def _bf16_available(device: torch.device) -> bool:
    from bert_core.train.precision import resolve_precision

    return resolve_precision("auto", device).dtype == "bfloat16"


def _device(text: str) -> torch.device:
    """argparse type of --device: a torch device this machine has."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text}: this machine has no CUDA GPU that torch can use")
    return device


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.model_parity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=_device, default="cuda" if torch.cuda.is_available() else "cpu",
                   help="where both models run: cpu, cuda or cuda:N (default: cuda where there is one)")
    p.add_argument("--configs", nargs="+", type=architecture_name, default=["bert_2_128_2", "bert_12_768_12"],
                   help="model sizes, as in the zoo: bert_LAYERS_HIDDEN_HEADS (bert_12_768_12: BERT-base; "
                        "default: %(default)s)")
    p.add_argument("--tol", type=float, default=FLOAT32_TOL,
                   help="the largest relative float32 difference allowed in each figure (%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seeds the weights and the batch (%(default)s)")
    p.add_argument("--peer-attention", choices=("eager", "sdpa"), default="eager",
                   help="transformers' attention: eager (softmax in float32 under autocast: the reference) or sdpa "
                        "(torch's fused kernels, transformers' default; default: %(default)s)")
    p.add_argument("--out-json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    device = args.device
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        rows = []
        for name in args.configs:
            for dtype in ("float32", "bfloat16") if _bf16_available(device) else ("float32",):
                for layout in LAYOUTS:
                    rows.append(compare(name, device, dtype, args.seed, args.peer_attention, layout))
                    r = rows[-1]
                    print(f"{name} {dtype} on {device}, {layout} ({r['padding']:.0%} padding, "
                          f"{'packed' if r['packed'] else 'padded with the mask'}), against transformers float32: "
                          + _summary(r), flush=True)
                    if "transformers" in r:
                        print(f"    transformers' own {dtype} run: " + _summary(r["transformers"]), flush=True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = allow_tf32
    failed = [r for r in rows if r["dtype"] == "float32"
              and max(r["mlm_logits"], r["nsp_logits"], r["loss"], r["gradients"]) > args.tol]
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out_json.with_name(args.out_json.name + ".tmp")
        tmp.write_text(json.dumps({"tol": args.tol, "rows": rows}, indent=2))
        tmp.replace(args.out_json)
    for r in failed:
        print(f"FAILED: {r['config']} float32 on {r['device']}, {r['layout']}, differs from transformers by more "
              f"than --tol {args.tol:g}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
