"""Pretraining-step throughput: bert_core's MLM+NSP step against transformers' BertForPreTraining.

Same config, same initial weights, same batches, AdamW with global-norm clipping at 1.0, interleaved step
by step so machine noise hits both alike, each in its best precision on the device (--dtype, default auto:
bfloat16 autocast where the device computes it natively, as bert_core.train.precision resolves it; a
transformers user gets the same autocast from its Trainer's `bf16=True`). Ours is the step `pretrain`
runs (bert_core.pretrain.step.train_step: the decoder only at the masked positions, the encoder only on
real tokens; bert_core.train.optim's AdamW); transformers runs as its Trainer does by default (torch's
fused AdamW, SDPA attention) and gets the same batch as `labels` (-100 except at the masked positions)
and `next_sentence_label`. Batches follow create_pretraining_data's length mix: 90% of sequences
fill --max-seq-length, 10% are shorter (short_seq_prob), with --max-predictions masked positions each.

Reports real (non-padding) tokens per second and the ratio ours/theirs, and the matmul FLOPs of each step
(`step_flops`: what the arithmetic allows the ratio to be); with --profile N, where the time of each step
goes (evaluation.step_profile: attention, feed-forward, MLM head, optimizer, ...). On GPU also MFU: encoder
matmul FLOPs (bert_core.model.modeling.encoder_flops_per_token, x3 for forward + backward) per second over
the GPU's peak dense FLOPs for the dtype: the model's FLOPs, the same count for both systems, so ours is credited
with the last layer's work at unmasked positions, which it skips (`step_flops` counts what each computes). Models are named as in the zoo, bert_LAYERS_HIDDEN_HEADS
(bert_6_384_12: MiniLM's size; bert_12_768_12: BERT-base; bert_24_1024_16: BERT-large).

    python -m evaluation.pretrain_throughput --configs bert_4_256_4 bert_6_384_12 --out-json bench-results/pt.json

With --repeat N each config runs N times (a fresh pair of models each time) and a last line gives the spread and
median of the runs' ratios (the JSON's `summary`): on a shared CPU one run's ratio can differ from the next's by
20% (docs/benchmarks-pretrain.md), so the BERT-base figures there are medians of several runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch.autograd.profiler import record_function

from evaluation.machine import cpu_name
from evaluation.model_throughput import architecture_name
from evaluation.settings import PretrainThroughputRun

# Peak dense tensor-core TFLOP/s by GPU name fragment and dtype (vendor datasheets, no sparsity).
PEAK_TFLOPS = {
    "H200": {"bfloat16": 989.0, "float16": 989.0, "float32": 494.5},  # fp32 via TF32
    "H100": {"bfloat16": 989.0, "float16": 989.0, "float32": 494.5},
    "A100": {"bfloat16": 312.0, "float16": 312.0, "float32": 156.0},
    "L4": {"bfloat16": 121.0, "float16": 121.0, "float32": 60.0},
    "A10": {"bfloat16": 125.0, "float16": 125.0, "float32": 62.5},
}


def make_batches(n: int, batch: int, seq: int, preds: int, vocab: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Shard-format batches (as bert_core.pretrain.stream.make_batch returns them), already trimmed."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        short = torch.rand(batch, generator=g) < 0.1
        lengths = torch.where(short, torch.randint(16, seq + 1, (batch,), generator=g), torch.full((batch,), seq))
        t = int(lengths.max())
        ids = torch.randint(5, vocab, (batch, t), generator=g)
        mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
        ids = ids * mask
        ids[:, 0] = 2
        types = ((torch.arange(t)[None, :] >= (lengths[:, None] // 2)) & mask.bool()).long()
        # Google's count: 15% of the tokens, at most `preds`; unused slots are padding (weight 0).
        positions = torch.zeros(batch, preds, dtype=torch.long)
        weights = torch.zeros(batch, preds)
        for row, length in enumerate(lengths.tolist()):
            n_pred = min(preds, max(1, round(0.15 * length)))
            positions[row, :n_pred] = torch.randperm(length - 2, generator=g)[:n_pred].sort().values + 1
            weights[row, :n_pred] = 1.0
        labels_ids = torch.gather(ids, 1, positions) * weights.long()
        masked = ids.clone()
        for row in range(batch):
            real = positions[row][weights[row] > 0]
            masked[row, real] = 4  # [MASK]
        out.append({
            "input_ids": masked, "token_type_ids": types, "attention_mask": mask,
            "masked_lm_positions": positions, "masked_lm_ids": labels_ids, "masked_lm_weights": weights,
            "next_sentence_labels": torch.randint(0, 2, (batch,), generator=g),
        })
    return out


def hf_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    labels = torch.full_like(batch["input_ids"], -100)
    for row in range(len(labels)):
        real = batch["masked_lm_weights"][row] > 0
        labels[row, batch["masked_lm_positions"][row][real]] = batch["masked_lm_ids"][row][real]
    return {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"],
            "attention_mask": batch["attention_mask"], "labels": labels,
            "next_sentence_label": batch["next_sentence_labels"]}


def build_pair(name: str, attn_implementation: str | None = None):
    """(ours, transformers', config): BertForPreTraining of zoo size `name`, dropout 0.1, every weight identical;
    transformers' attention its default (sdpa) unless `attn_implementation` names another."""
    import transformers

    from bert_core.model.modeling import BertForPreTraining
    from bert_core.model.weights import load_state_into
    from bert_core.model.zoo import architecture_config

    cfg = dataclasses.replace(architecture_config(name), hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    hf_cfg = transformers.BertConfig(**{k: v for k, v in cfg.to_hf_dict().items() if k != "do_lower_case"}, **extra)
    theirs = transformers.BertForPreTraining(hf_cfg)
    ours = BertForPreTraining(cfg)
    load_state_into(ours, theirs.state_dict(), "transformers")  # strict: every weight identical
    return ours, theirs, cfg


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step_flops(cfg, batch: dict[str, torch.Tensor], decoder_rows: int, output_rows: int | None = None) -> float:
    """Matmul FLOPs of one training step (forward x 3 for forward + backward): the encoder over the batch's
    real tokens (attention over its padded length; its last layer at `output_rows` rows only where given), the
    MLM head (transform + vocabulary decoder) over `decoder_rows` positions, pooler and NSP ignored."""
    from bert_core.model.modeling import encoder_flops

    tokens = int(batch["attention_mask"].sum())
    seq = batch["attention_mask"].shape[1]
    head = 2 * cfg.hidden_size * (cfg.hidden_size + cfg.vocab_size)
    return 3.0 * (encoder_flops(cfg, tokens, seq, output_rows) + decoder_rows * head)


def measure(name: str, run: PretrainThroughputRun, device: str, profile: int = 0, peak_tflops: float = 0.0) -> dict:
    """One row: `run`'s batches through both systems' training steps, interleaved step by step."""
    from bert_core.model.modeling import encoder_flops_per_token
    from bert_core.pretrain.step import to_device, train_step
    from bert_core.train.loop import optimizer_step
    from bert_core.train.optim import build_optimizer, build_scheduler
    from bert_core.train.precision import Precision, resolve_precision

    torch.manual_seed(0)
    ours, theirs, cfg = build_pair(name)
    device = torch.device(device)
    models = {"ours": ours.to(device).train(), "transformers": theirs.to(device).train()}
    opts = {"ours": build_optimizer(ours, "adamw", 1e-5),
            # transformers' Trainer: AdamW, fused on torch >= 2.8 (its default `adamw_torch_fused`)
            "transformers": torch.optim.AdamW(theirs.parameters(), lr=1e-5, fused=True)}
    choice = resolve_precision(run.dtype, device)
    precision = {k: Precision(choice.dtype, device) for k in models}
    batches = make_batches(run.warmup + run.steps, run.batch_size, run.max_seq_length, run.max_predictions,
                           cfg.vocab_size, seed=0)
    batches = [to_device(b, device) for b in batches]
    check_same_loss(models, batches[0], device)

    # Ours updates as `pretrain` does (bert_core.train.loop.optimizer_step: the clipping factor folded into the
    # fused AdamW's step); transformers as its Trainer does (clip_grad_norm_, then the optimizer's step).
    schedule = build_scheduler(opts["ours"], 10 ** 9, 0.0)  # a constant learning rate, as the peer's

    def step(kind: str, batch: dict[str, torch.Tensor], i: int) -> None:
        model, opt, prec = models[kind], opts[kind], precision[kind]
        if kind == "ours":
            train_step(model, [batch], prec)
            with record_function("optimizer"):
                optimizer_step(model, opt, schedule, prec, 1.0, i)
            return
        with prec.autocast():
            loss = model(**hf_inputs(batch)).loss
        prec.scale(loss).backward()
        with record_function("optimizer"):
            prec.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            prec.step(opt, 0)
            opt.zero_grad(set_to_none=True)

    times: dict[str, list[float]] = {k: [] for k in models}
    cpu: dict[str, list[float]] = {k: [] for k in models}  # process CPU seconds: what other jobs cannot inflate
    load_before = os.getloadavg()
    for i, batch in enumerate(batches):
        order = list(models) if i % 2 == 0 else list(reversed(models))  # neither always goes first
        for kind in order:
            _sync(device.type)
            t0, c0 = time.perf_counter(), time.process_time()
            step(kind, batch, i)
            _sync(device.type)
            if i >= run.warmup:
                times[kind].append(time.perf_counter() - t0)
                cpu[kind].append(time.process_time() - c0)
    measured = batches[run.warmup:]
    tokens = sum(int(b["attention_mask"].sum()) for b in measured)
    padded = sum(b["attention_mask"].numel() for b in measured)
    row = {"config": name, "batch_size": run.batch_size, "max_seq_length": run.max_seq_length,
           "max_predictions": run.max_predictions, "dtype": choice.dtype, "dtype_reason": choice.reason,
           "padding_fraction": round(1 - tokens / padded, 3)}
    # Ours: the decoder at every masked-position slot, the last layer at those and [CLS].
    flops = {"ours": sum(step_flops(cfg, b, b["masked_lm_positions"].numel(),
                                    b["masked_lm_positions"].numel() + len(b["masked_lm_positions"]))
                         for b in measured),
             "transformers": sum(step_flops(cfg, b, b["input_ids"].numel()) for b in measured)}
    for kind in models:
        row[f"{kind}_step_flops"] = round(flops[kind] / len(measured))
    # The ratio a step of equal efficiency would give: the peer's matmul work over ours.
    row["flop_ratio_transformers_over_ours"] = round(flops["transformers"] / flops["ours"], 3)
    flops_per_token = 3 * encoder_flops_per_token(cfg, run.max_seq_length)
    peak = peak_flops(device.type, choice.dtype, peak_tflops)
    for kind in models:
        tok_s = tokens / sum(times[kind])
        row[f"{kind}_tokens_per_s"] = round(tok_s, 1)
        row[f"{kind}_median_step_s"] = round(statistics.median(times[kind]), 4)
        if peak:
            row[f"{kind}_mfu"] = round(tok_s * flops_per_token / peak, 4)
    row["ratio_ours_over_transformers"] = round(row["ours_tokens_per_s"] / row["transformers_tokens_per_s"], 3)
    # Medians shrug off the odd step slowed by other processes on a shared machine.
    row["ratio_by_median_step"] = round(row["transformers_median_step_s"] / row["ours_median_step_s"], 3)
    for kind in models:
        row[f"{kind}_median_step_cpu_s"] = round(statistics.median(cpu[kind]), 4)
    row["ratio_by_median_step_cpu"] = round(row["transformers_median_step_cpu_s"] / row["ours_median_step_cpu_s"], 3)
    row["load_average"] = [round(x, 2) for x in (*load_before[:1], *os.getloadavg()[:1])]
    for kind in models:
        row[f"{kind}_gflop_per_s"] = round(flops[kind] / sum(times[kind]) / 1e9, 1)
    if profile:
        from evaluation.step_profile import profile_steps

        batches_cycle = batches[:max(1, run.warmup)]
        row["profile"] = {kind: profile_steps(models[kind], lambda i, k=kind: step(
            k, batches_cycle[i % len(batches_cycle)], i), profile) for kind in models}
    return row


@torch.no_grad()
def check_same_loss(models: dict, batch: dict[str, torch.Tensor], device: torch.device) -> None:
    """Both compute the same objective on the same weights (dropout off): else the race is meaningless."""
    from bert_core.pretrain.step import forward_sums, metrics_from
    from bert_core.train.precision import Precision

    for m in models.values():
        m.eval()
    stats = forward_sums(models["ours"], batch, Precision("float32", device))[2]
    ours = metrics_from(stats.tolist())["loss"]
    theirs = float(models["transformers"](**hf_inputs(batch)).loss)
    for m in models.values():
        m.train()
    if abs(ours - theirs) > 1e-3 * max(1.0, abs(theirs)):
        raise SystemExit(f"losses differ before training: ours {ours:.6f} vs transformers {theirs:.6f}")


def peak_flops(device_type: str, dtype: str, given_tflops: float = 0.0) -> float | None:
    if given_tflops:
        return given_tflops * 1e12
    if device_type != "cuda":
        return None
    name = torch.cuda.get_device_name()
    for fragment, table in PEAK_TFLOPS.items():
        if fragment in name:
            return table[dtype] * 1e12
    return None


def measure_pretrain_throughput(run: PretrainThroughputRun, device: str | None = None, profile: int = 0,
                                peak_tflops: float = 0.0, log=print) -> dict:
    """Measure every config of `run`, `run.repeats` times each; returns {"machine", "args", "rows", "summary"}: a
    row per run (`run` 1..repeats, with `ratio_ours_over_transformers`), and per config its runs' ratios and
    their medians (`summarize`). `log` gets the Markdown table (and the profile tables), a line at a time.
    The nightly regression calls it in its task's process: the thread count it sets ends with the call."""
    import transformers

    from bert_core.errors import BertPipelineError
    from bert_core.model.zoo import architecture_config

    for name in run.configs:
        architecture_config(name)  # every name checked (BertPipelineError) before the first measurement
    if run.repeats < 1:
        raise BertPipelineError(f"pretrain_throughput: repeats (--repeat) must be at least 1, got {run.repeats}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads_before = torch.get_num_threads()
    if run.threads:
        torch.set_num_threads(run.threads)
    try:
        machine = {"device": torch.cuda.get_device_name() if device.startswith("cuda")
                   else cpu_name(), "torch": torch.__version__,
                   "transformers": transformers.__version__, "threads": torch.get_num_threads(),
                   "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M")}
        rows = []
        mfu = device.startswith("cuda")
        log("| config | dtype | ours tok/s | transformers tok/s | ratio | ratio (median step) | ratio (median CPU s) | "
            "FLOP ratio | padding | load |" + (" MFU ours | MFU theirs |" if mfu else ""))
        log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if mfu else ""))
        for name in run.configs:
            for repeat in range(1, run.repeats + 1):
                # The profile (its own steps, after the timed ones) once per config, with the last run.
                row = measure(name, run, device, profile if repeat == run.repeats else 0, peak_tflops)
                row["run"] = repeat
                rows.append(row)
                label = name if run.repeats == 1 else f"{name} run {repeat}/{run.repeats}"
                extra = (f" {row.get('ours_mfu', float('nan')):.1%} | {row.get('transformers_mfu', float('nan')):.1%} |"
                         if mfu else "")
                log(f"| {label} | {row['dtype']} | {row['ours_tokens_per_s']:.0f} | "
                    f"{row['transformers_tokens_per_s']:.0f} | "
                    f"{row['ratio_ours_over_transformers']:.2f}x | {row['ratio_by_median_step']:.2f}x | "
                    f"{row['ratio_by_median_step_cpu']:.2f}x | {row['flop_ratio_transformers_over_ours']:.2f}x | "
                    f"{row['padding_fraction']:.0%} | {row['load_average'][0]:.1f}-{row['load_average'][1]:.1f} |{extra}")
                if "profile" in row:
                    from evaluation.step_profile import render

                    for line in render(row["profile"]).splitlines():
                        log(line)
        summary = summarize(rows)
        if run.repeats > 1:
            for entry in summary:
                log(describe_runs(entry))
    finally:
        torch.set_num_threads(threads_before)
    return {"machine": machine, "args": {**{k: str(v) for k, v in dataclasses.asdict(run).items()},
                                         "device": device, "profile": profile}, "rows": rows, "summary": summary}


RUN_RATIOS = ("ratio_ours_over_transformers", "ratio_by_median_step")


def summarize(rows: list[dict]) -> list[dict]:
    """Per config, its runs' ratios and their medians (`median_<ratio>`), in the order the configs ran."""
    summary: dict[str, dict] = {}
    for row in rows:
        entry = summary.setdefault(row["config"], {"config": row["config"], "runs": 0,
                                                   **{ratio: [] for ratio in RUN_RATIOS}})
        entry["runs"] += 1
        for ratio in RUN_RATIOS:
            entry[ratio].append(row[ratio])
    for entry in summary.values():
        for ratio in RUN_RATIOS:
            entry[f"median_{ratio}"] = round(statistics.median(entry[ratio]), 3)
    return list(summary.values())


def describe_runs(entry: dict) -> str:
    by_step, by_tokens = entry["ratio_by_median_step"], entry["ratio_ours_over_transformers"]
    return (f"{entry['config']}: {entry['runs']} runs, by median step {min(by_step):.2f}-{max(by_step):.2f}x, "
            f"median {entry['median_ratio_by_median_step']:.2f}x; by tokens/s {min(by_tokens):.2f}-"
            f"{max(by_tokens):.2f}x, median {entry['median_ratio_ours_over_transformers']:.2f}x")


def main(argv: list[str] | None = None) -> None:
    defaults = PretrainThroughputRun()
    p = argparse.ArgumentParser(prog="python -m evaluation.pretrain_throughput", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=list(defaults.configs), type=architecture_name,
                   help="architectures to measure, as zoo names bert_LAYERS_HIDDEN_HEADS (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per batch (%(default)s)")
    p.add_argument("--max-seq-length", type=int, default=defaults.max_seq_length,
                   help="padded sequence length (90%% of sequences fill it; %(default)s)")
    p.add_argument("--max-predictions", type=int, default=defaults.max_predictions,
                   help="masked positions per sequence (%(default)s)")
    p.add_argument("--steps", type=int, default=defaults.steps, help="measured steps per model (%(default)s)")
    p.add_argument("--warmup", type=int, default=defaults.warmup, help="unmeasured steps first (%(default)s)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=defaults.dtype, choices=["auto", "float32", "bfloat16", "float16"],
                   help="autocast dtype for both models (float16 with loss scaling); auto: the device's, as "
                        "`pretrain --dtype auto` resolves it (%(default)s)")
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="after timing, profile STEPS more steps of each system (torch.profiler) and print where "
                        "the time goes")
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help="peak dense TFLOP/s for MFU (default: looked up from the GPU's name)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads (0: torch's default)")
    p.add_argument("--repeat", type=int, default=defaults.repeats, metavar="N",
                   help="runs of each config, each with a fresh pair of models; with N > 1 a last line gives the "
                        "runs' spread and median (one run's ratio can differ from the next's by 20%% on a shared "
                        "CPU; %(default)s)")
    p.add_argument("--out-json", type=Path, help="write the rows and machine info here")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error(f"--repeat must be at least 1, got {args.repeat}")
    run = PretrainThroughputRun(configs=tuple(args.configs), batch_size=args.batch_size,
                                max_seq_length=args.max_seq_length, max_predictions=args.max_predictions,
                                steps=args.steps, warmup=args.warmup, dtype=args.dtype, threads=args.threads,
                                repeats=args.repeat)
    report = measure_pretrain_throughput(run, args.device, args.profile, args.peak_tflops,
                                         log=lambda line: print(line, flush=True))
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
