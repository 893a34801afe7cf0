"""Training-step and inference throughput of bert_core's BERT against transformers' BertModel.

Same config, same weights, same batches (lengths uniform between 25% and 100% of --max-seq-length, as
real fine-tuning batches are), same AdamW; the two are interleaved step by step so machine noise
hits both alike. Reports real (non-padding) tokens per second and the ratio ours/theirs. Models are
named as in the zoo, bert_LAYERS_HIDDEN_HEADS (bert_6_384_12: MiniLM's size; bert_12_768_12: BERT-base).

    python -m evaluation.model_throughput --out-json bench-results/model_throughput.json

The nightly regression (operators.nightly) calls `measure_throughput` with its own sizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from evaluation.machine import cpu_name
from evaluation.settings import ThroughputRun

MODULE = "evaluation.model_throughput"


def architecture_name(name: str) -> str:
    """argparse type of --configs: a zoo architecture name (bert_LAYERS_HIDDEN_HEADS, or a zoo alias)."""
    from bert_core.errors import BertPipelineError
    from bert_core.model import zoo

    try:
        zoo.architecture_config(name)
    except BertPipelineError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


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

    from bert_core.model.modeling import BertForSequenceClassification
    from bert_core.model.weights import load_state_into
    from bert_core.model.zoo import architecture_config

    cfg = dataclasses.replace(architecture_config(name), num_labels=2)
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


def measure(name: str, mode: str, run: ThroughputRun) -> dict:
    load_before = os.getloadavg()[0]  # the machine may be shared: figures under load are lower
    torch.manual_seed(0)
    ours, theirs, cfg = build_pair(name, run.device, run.dtype)
    batches = make_batches(run.warmup + run.steps, run.batch_size, run.max_seq_length, cfg.vocab_size, 0, run.device)
    real_tokens = [int(b[1].sum()) for b in batches]
    padded = run.batch_size * run.max_seq_length
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
            _sync(run.device)
            t0 = time.perf_counter()
            run_step(models[k], batch, mode == "train", opts[k], run.device, run.dtype)
            _sync(run.device)
            if i >= run.warmup:
                times[k].append(time.perf_counter() - t0)
    tokens = sum(real_tokens[run.warmup:])
    row = {"config": name, "mode": mode, "batch_size": run.batch_size, "max_seq_length": run.max_seq_length,
           "padding_fraction": round(1 - tokens / (padded * run.steps), 3), "dtype": run.dtype,
           "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2)}
    for k in models:
        row[f"{k}_tokens_per_s"] = round(tokens / sum(times[k]), 1)
        row[f"{k}_median_step_s"] = round(statistics.median(times[k]), 4)
    row["ratio_ours_over_transformers"] = round(row["ours_tokens_per_s"] / row["transformers_tokens_per_s"], 3)
    return row


def command_line(run: ThroughputRun) -> list[str]:
    """The command that repeats `run` (recorded in the report as `machine.command`)."""
    argv = ["python", "-m", MODULE, "--configs", *run.configs, "--modes", *run.modes, "--batch-size",
            str(run.batch_size), "--max-seq-length", str(run.max_seq_length), "--steps", str(run.steps),
            "--warmup", str(run.warmup), "--dtype", run.dtype]
    if run.device:
        argv += ["--device", run.device]
    if run.threads:
        argv += ["--threads", str(run.threads)]
    return argv


def measure_throughput(run: ThroughputRun, log=print) -> dict:
    """Measure every config and mode of `run`; returns {"machine", "args", "rows"} (a row per config and mode,
    with `ratio_ours_over_transformers`). `log` gets the Markdown table, a line at a time."""
    import transformers

    from bert_core.model.zoo import architecture_config

    for name in run.configs:
        architecture_config(name)  # every name checked (BertPipelineError) before the first measurement
    run = dataclasses.replace(run, device=run.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    threads_before = torch.get_num_threads()
    if run.threads:
        torch.set_num_threads(run.threads)
    try:
        machine = {"device": torch.cuda.get_device_name() if run.device.startswith("cuda")
                   else cpu_name(), "torch": torch.__version__,
                   "transformers": transformers.__version__, "threads": torch.get_num_threads(),
                   "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "command": shlex.join(command_line(run))}
        rows = []
        log("| config | mode | ours tok/s | transformers tok/s | ratio | padding | load avg before/after |")
        log("| --- | --- | --- | --- | --- | --- | --- |")
        for name in run.configs:
            for mode in run.modes:
                row = measure(name, mode, run)
                rows.append(row)
                log(f"| {name} | {mode} | {row['ours_tokens_per_s']:.0f} | {row['transformers_tokens_per_s']:.0f} "
                    f"| {row['ratio_ours_over_transformers']:.2f}x | {row['padding_fraction']:.0%} "
                    f"| {row['load_average_before']:.1f} / {row['load_average_after']:.1f} |")
    finally:
        # The nightly calls this in its task's process: the thread count it asked for ends with the run.
        torch.set_num_threads(threads_before)
    return {"machine": machine, "args": {k: str(v) for k, v in dataclasses.asdict(run).items()}, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    """Parse `argv` (default: sys.argv[1:]), measure, print the table, write --out-json."""
    defaults = ThroughputRun()
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=list(defaults.configs), type=architecture_name,
                   help="architectures to measure, as zoo names bert_LAYERS_HIDDEN_HEADS (default: %(default)s)")
    p.add_argument("--modes", nargs="+", default=list(defaults.modes), choices=["train", "infer"],
                   help="train: forward+backward+AdamW step; infer: forward under inference_mode")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per batch")
    p.add_argument("--max-seq-length", type=int, default=defaults.max_seq_length,
                   help="padded length; real lengths are uniform in [len/4, len]")
    p.add_argument("--steps", type=int, default=defaults.steps, help="measured steps per model")
    p.add_argument("--warmup", type=int, default=defaults.warmup, help="unmeasured steps first")
    p.add_argument("--device", default=defaults.device, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=defaults.dtype, choices=["float32", "bfloat16", "float16"],
                   help="autocast dtype for both models")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads (0: torch's default)")
    p.add_argument("--out-json", type=Path, help="write the rows and machine info here")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ThroughputRun)}
    run = ThroughputRun(**{**values, "configs": tuple(args.configs), "modes": tuple(args.modes)})
    report = measure_throughput(run, log=lambda line: print(line, flush=True))
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
