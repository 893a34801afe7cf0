"""Training-step and inference throughput of bert_core's BERT against transformers' BertModel.

Same config, same weights, same batches (lengths uniform between 25% and 100% of --seq-len, as
real fine-tuning batches are), same AdamW; the two are interleaved step by step so machine noise
hits both alike. Reports real (non-padding) tokens per second and the ratio ours/theirs.

    python bench/model_throughput.py --out-json bench-results/model_throughput.json

From an installed package (no checkout; how the nightly regression runs it):

    python -m bert_pipeline.bench.model_throughput --out-json model_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

CONFIGS = {
    "minilm_L6_H384": dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536),
    "bert_base_L12_H768": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "bert_large_L24_H1024": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                                 intermediate_size=4096),
}


def make_batches(n: int, batch: int, seq: int, vocab: int, seed: int, device: str):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(seq // 4, seq + 1, (batch,), generator=g)
        ids = torch.randint(5, vocab, (batch, seq), generator=g)
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        ids = ids * mask
        labels = torch.randint(0, 2, (batch,), generator=g)
        out.append(tuple(t.to(device) for t in (ids, mask, labels)))
    return out


def build_pair(name: str, device: str, dtype: str):
    import transformers

    from bert_core.model.config import BertConfig
    from bert_core.model.modeling import BertForSequenceClassification
    from bert_core.model.weights import load_state_into

    cfg = BertConfig(**CONFIGS[name], num_labels=2)
    hf_cfg = transformers.BertConfig(**{k: v for k, v in cfg.to_hf_dict().items() if k != "do_lower_case"})
    theirs = transformers.BertForSequenceClassification(hf_cfg)
    ours = BertForSequenceClassification(cfg)
    load_state_into(ours, theirs.state_dict(), "transformers")  # strict: every weight identical
    return ours.to(device), theirs.to(device), cfg


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _autocast(device: str, dtype: str):
    if dtype == "float32":
        return torch.autocast(device.split(":")[0], enabled=False)
    return torch.autocast(device.split(":")[0], dtype=getattr(torch, dtype))


def run_step(model, batch, train: bool, opt, device: str, dtype: str) -> None:
    ids, mask, labels = batch
    kwargs = dict(input_ids=ids, attention_mask=mask, labels=labels if train else None)
    if train:
        with _autocast(device, dtype):
            out = model(**kwargs)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    else:
        with torch.inference_mode(), _autocast(device, dtype):
            model(**kwargs)


def measure(name: str, mode: str, args) -> dict:
    load_before = os.getloadavg()[0]  # the machine may be shared: figures under load are lower
    torch.manual_seed(0)
    ours, theirs, cfg = build_pair(name, args.device, args.dtype)
    batches = make_batches(args.warmup + args.steps, args.batch_size, args.seq_len, cfg.vocab_size, 0, args.device)
    real_tokens = [int(b[1].sum()) for b in batches]
    padded = args.batch_size * args.seq_len
    models = {"ours": ours, "transformers": theirs}
    opts = {}
    for k, m in models.items():
        m.train(mode == "train")
        opts[k] = torch.optim.AdamW(m.parameters(), lr=1e-5) if mode == "train" else None
    times = {k: [] for k in models}
    for i, batch in enumerate(batches):
        # Alternate who goes first so neither always runs on a warmer cache.
        order = list(models) if i % 2 == 0 else list(reversed(models))
        for k in order:
            _sync(args.device)
            t0 = time.perf_counter()
            run_step(models[k], batch, mode == "train", opts[k], args.device, args.dtype)
            _sync(args.device)
            if i >= args.warmup:
                times[k].append(time.perf_counter() - t0)
    tokens = sum(real_tokens[args.warmup:])
    row = {"config": name, "mode": mode, "batch_size": args.batch_size, "seq_len": args.seq_len,
           "padding_fraction": round(1 - tokens / (padded * args.steps), 3), "dtype": args.dtype,
           "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2)}
    for k in models:
        row[f"{k}_tokens_per_s"] = round(tokens / sum(times[k]), 1)
        row[f"{k}_median_step_s"] = round(statistics.median(times[k]), 4)
    row["ratio_ours_over_transformers"] = round(row["ours_tokens_per_s"] / row["transformers_tokens_per_s"], 3)
    return row


MODULE = "bert_pipeline.bench.model_throughput"


def main(argv: list[str] | None = None, command: str = f"-m {MODULE}") -> None:
    """Parse `argv` (default: sys.argv[1:]), measure, print the table, write --out-json.

    `command` is how this run was started (recorded as `machine.command`, to re-run it): this module by
    default, `bench/model_throughput.py` from the checkout's wrapper.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=["minilm_L6_H384", "bert_base_L12_H768"], choices=list(CONFIGS),
                   help="model sizes to measure")
    p.add_argument("--modes", nargs="+", default=["train", "infer"], choices=["train", "infer"],
                   help="train: forward+backward+AdamW step; infer: forward under inference_mode")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per batch")
    p.add_argument("--seq-len", type=int, default=128, help="padded length; real lengths are uniform in [len/4, len]")
    p.add_argument("--steps", type=int, default=6, help="measured steps per model")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured steps first")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="autocast dtype for both models")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--out-json", type=Path, help="write the rows and machine info here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    machine = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor()
               or platform.machine(), "torch": torch.__version__, "transformers": transformers.__version__,
               "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
               "command": "python " + shlex.join([*command.split(), *argv])}
    rows = []
    print("| config | mode | ours tok/s | transformers tok/s | ratio | padding | load avg before/after |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.configs:
        for mode in args.modes:
            row = measure(name, mode, args)
            rows.append(row)
            print(f"| {name} | {mode} | {row['ours_tokens_per_s']:.0f} | {row['transformers_tokens_per_s']:.0f} "
                  f"| {row['ratio_ours_over_transformers']:.2f}x | {row['padding_fraction']:.0%} "
                  f"| {row['load_average_before']:.1f} / {row['load_average_after']:.1f} |", flush=True)
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps({"machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
                                             "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
