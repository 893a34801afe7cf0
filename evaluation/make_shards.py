"""Throughput and peak memory of `bert-pipeline make-shards`, against Google's create_pretraining_data.py.

    python -m evaluation.make_shards --vocab ../shared/data/bert/vocab/uncased_L-12_H-768_A-12.vocab.txt \
        --corpus-mb 10 --scales 1,10 --workers 2 \
        --reference-script /path/to/create_pretraining_data.py \
        --out-json bench-results/make_shards.json --out-md docs/benchmarks-make-shards.md

The corpus is synthetic English-like text made here (words from the vocab's whole-word entries with
a Zipf distribution, some derived forms that WordPiece splits, one sentence per line, a blank line
between documents), or --corpus FILE. Both tools run on the same file with the same flags (seq 128,
20 predictions, masked LM 0.15, short seq 0.1, dupe 5, seed 12345), in the same run, alternating
when --repeat > 1. Peak memory is the largest sum of RSS (and, in the memory runs, PSS) over the
process and all its children, sampled every 100 ms. --scales runs ours on corpora N times larger
(different documents, same statistics) to show that memory does not grow with the corpus.

With --check-exact, ours also runs with one unit holding the whole corpus (--chunk-documents and
--chunk-chars larger than it), in which case Google's random stream is ours exactly: the instances
of both are compared one by one (as sorted lists, since the shard writer's shuffle reorders them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import random
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from evaluation.machine import cpu_name

FLAGS = dict(max_seq_length=128, max_predictions_per_seq=20, masked_lm_prob=0.15, short_seq_prob=0.1,
             dupe_factor=5, random_seed=12345)


# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------

SUFFIXES = ["ly", "ness", "ing", "ed", "ment", "ful", "less", "ity", "ish", "ward"]


def word_list(vocab: Path) -> list[str]:
    words = []
    for line in vocab.read_text(encoding="utf-8").split("\n"):
        if line.isascii() and line.isalpha() and len(line) > 1:
            words.append(line)
    return words[:25000]


def generate_corpus(path: Path, vocab: Path, megabytes: float, seed: int) -> Path:
    """Synthetic English-like text: ~4.8 characters per WordPiece token, as real English text has."""
    rng = random.Random(seed)
    words = word_list(vocab)
    cum_weights = list(itertools.accumulate(1.0 / (rank + 8) for rank in range(len(words))))
    target = int(megabytes * 1_000_000)
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            sentences = []
            for _ in range(max(1, int(rng.lognormvariate(2.8, 0.8)))):
                chosen = rng.choices(words, cum_weights=cum_weights, k=rng.randint(6, 32))
                for i in range(len(chosen)):
                    roll = rng.random()
                    if roll < 0.04:
                        chosen[i] += rng.choice(SUFFIXES)
                    elif roll < 0.06:
                        chosen[i] = str(rng.randint(2, 2025))
                    elif roll < 0.11:
                        chosen[i] += ","
                chosen[0] = chosen[0].capitalize()
                sentences.append(" ".join(chosen).rstrip(",") + rng.choice(".....?!"))
            block = "\n".join(sentences) + "\n\n"
            out.write(block)
            written += len(block.encode())
    return path


def glue_corpus(path: Path, glue_dir: Path, seed: int = 0) -> Path:
    """Real English text: the sentences of GLUE MRPC (train, test, dev: both of each pair) then SST-2
    train, cut into documents of 5 to 40 consecutive sentences. Not the genre of a pretraining corpus
    (news and review snippets, many short), but real words, names and a few non-ASCII characters."""
    rng = random.Random(seed)
    sentences = []
    for name in ("train.tsv", "test.tsv", "dev.tsv"):
        rows = (glue_dir / "MRPC" / name).read_text(encoding="utf-8-sig").split("\n")[1:]
        for row in filter(None, rows):
            sentences += row.split("\t")[-2:]
    sst = (glue_dir / "SST-2" / "train.tsv").read_text(encoding="utf-8").split("\n")[1:]
    with open(path, "w", encoding="utf-8") as out:
        for pool in (sentences, [row.split("\t")[0] for row in sst if row]):
            i = 0
            while i < len(pool):
                n = rng.randint(5, 40)
                out.write("\n".join(t.strip() for t in pool[i:i + n] if t.strip()) + "\n\n")
                i += n
    return path


# --------------------------------------------------------------------------------------------
# Measuring a command
# --------------------------------------------------------------------------------------------


def run_measured(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None,
                 pss: bool = False) -> dict:
    """Wall time, CPU time (children included) and peak memory of a command and all its children.

    Memory is sampled every 100 ms as the sum over the process tree of RSS and, with `pss`, of PSS
    (proportional set size: a page shared by k processes, e.g. after fork, counts 1/k in each), so
    PSS is the physical memory the tree uses, while summed RSS counts shared pages once per process.
    Reading PSS walks the process's memory map under its lock and slows a process that is
    allocating, so timed runs sample RSS only and memory runs are separate.
    """
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with open(log or os.devnull, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env)
        peak = {"rss": 0, "pss": 0}
        done = threading.Event()

        def sample() -> None:
            try:
                root = psutil.Process(proc.pid)
            except psutil.NoSuchProcess:
                return
            while not done.is_set():
                rss_sum = pss_sum = 0
                try:
                    tree = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    break
                for p in tree:
                    try:
                        info = p.memory_full_info() if pss else p.memory_info()
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        continue
                    rss_sum += info.rss
                    pss_sum += getattr(info, "pss", info.rss)
                peak["rss"] = max(peak["rss"], rss_sum)
                peak["pss"] = max(peak["pss"], pss_sum)
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        done.set()
        sampler.join()
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        tail = log.read_text()[-3000:] if log else ""
        raise SystemExit(f"command failed ({code}): {' '.join(cmd)}\n{tail}")
    return {"seconds": wall,
            "cpu_seconds": (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime),
            "peak_rss_mb": peak["rss"] / 2**20, "peak_pss_mb": peak["pss"] / 2**20 if pss else None,
            "load_average_before": load_before}


def run_ours(corpus: Path, vocab: Path, out: Path, workers: int, extra: list[str] | None = None,
             pss: bool = False) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    # What is measured is the command users run, in a process tree of its own (wall time, CPU and peak memory
    # of it and its workers): a child process is the point, not a way around an import.
    cmd = [sys.executable, "-m", "bert_pipeline.cli", "make-shards", str(corpus), "--output", str(out),
           "--vocab", str(vocab), "--workers", str(workers), "--no-progress", "--overwrite",
           *[f"--{k.replace('_', '-')}={v}" for k, v in FLAGS.items()], *(extra or [])]
    result = run_measured(cmd, log=out.with_suffix(".log"), pss=pss)
    recorded = json.loads((out / "manifest.json").read_text())
    totals = recorded["totals"]
    result.update(tokens=totals["tokens"], shards=len(recorded["shards"]), instances=totals["instances"], documents=totals["documents"],
                  random_next=totals["random_next"] / totals["instances"],
                  predictions_per_instance=totals["masked"] / totals["instances"])
    return result


def run_reference(script: Path, corpus: Path, vocab: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "evaluation.tf1_compat_run", str(script), f"--input_file={corpus}",
           f"--output_file={out}", f"--vocab_file={vocab}", "--do_lower_case=True",
           *[f"--{k}={v}" for k, v in FLAGS.items()]]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    result = run_measured(cmd, env=env, log=out.with_suffix(".log"))
    result["instances"] = count_tfrecords(out)
    return result


def count_tfrecords(path: Path) -> int:
    """Records in a TFRecord file (8-byte length, 4-byte CRC, data, 4-byte CRC each), without TensorFlow."""
    count = 0
    with open(path, "rb") as f:
        while header := f.read(12):
            length = int.from_bytes(header[:8], "little")
            f.seek(length + 4, os.SEEK_CUR)
            count += 1
    return count


def reference_instances(tfrecord: Path) -> dict[str, np.ndarray]:
    try:
        import tensorflow as tf
    except ImportError:
        raise SystemExit("--check-exact reads the reference's TFRecords with TensorFlow: install the `tf` extra "
                         "(pip install 'bert-pipeline[tf]')") from None

    keys = {"input_ids": 128, "segment_ids": 128, "masked_lm_positions": 20, "masked_lm_ids": 20,
            "masked_lm_weights": 20, "next_sentence_labels": 1, "input_mask": 128}
    rows: dict[str, list] = {k: [] for k in keys}
    for record in tf.data.TFRecordDataset(str(tfrecord)).as_numpy_iterator():
        example = tf.train.Example.FromString(record)
        for key in keys:
            feature = example.features.feature[key]
            rows[key].append(list(feature.float_list.value if key == "masked_lm_weights"
                                  else feature.int64_list.value))
    return {k: np.asarray(v) for k, v in rows.items()}


def sorted_rows(arrays: dict[str, np.ndarray]) -> list[tuple]:
    n = len(arrays["input_ids"])
    rows = []
    for i in range(n):
        rows.append((tuple(arrays["input_ids"][i].tolist()), tuple(arrays["segment_ids"][i].tolist()),
                     tuple(arrays["masked_lm_positions"][i].tolist()), tuple(arrays["masked_lm_ids"][i].tolist()),
                     tuple(np.asarray(arrays["masked_lm_weights"][i], dtype=np.float32).tolist()),
                     int(np.ravel(arrays["next_sentence_labels"][i])[0])))
    return sorted(rows)


def check_exact(script: Path, corpus: Path, vocab: Path, work: Path) -> dict:
    from bert_core.data.shard_format import list_shards, read_shard

    ours = work / "exact-ours"
    run_ours(corpus, vocab, ours, 1, ["--chunk-documents=1000000000", "--chunk-chars=1000000000000",
                                      "--google-random-stream"])
    reference = work / "exact-reference.tfrecord"
    run_reference(script, corpus, vocab, reference)
    parts = [read_shard(p) for p in list_shards(ours)]
    merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    ref = reference_instances(reference)
    valid = ref["input_mask"].sum(axis=1)
    a, b = sorted_rows(merged), sorted_rows(ref)
    return {"instances_ours": len(a), "instances_reference": len(b), "identical": a == b,
            "reference_mean_length": float(valid.mean())}


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        "# make-shards throughput and memory",
        "",
        f"Measured {report['date']} on {m['cpus']} CPU cores ({m['processor'] or m['machine']}), "
        f"{m['memory_gb']:.0f} GB RAM, Python {m['python']}, {m['platform']}.",
        "",
        "Command:",
        "",
        "```",
        report["command"],
        "```",
        "",
        f"Corpus: {report.get('corpus_description') or 'synthetic English-like text generated by the benchmark'} "
        f"({report['corpus_mb']:.1f} MB, "
        f"{report['ours'][0]['tokens']:,} WordPiece tokens, {report['ours'][0]['documents']:,} documents); "
        "flags: max_seq_length 128, max_predictions_per_seq 20, masked_lm_prob 0.15, short_seq_prob 0.1, "
        "dupe_factor 5, random_seed 12345, uncased BERT vocab.",
        "",
        "| run | tool | processes | wall s | tokens/s | CPU s | peak RSS MB (summed) | instances | load avg before |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    tokens = report["ours"][0]["tokens"]
    runs = [("bert-pipeline make-shards", f"1 + {report['workers']} workers", r) for r in report["ours"]]
    runs += [(f"Google create_pretraining_data.py (TF {report.get('tf_version', '?')})", "1", r)
             for r in report.get("reference", [])]
    for tool, procs, run in sorted(runs, key=lambda item: item[2]["started"]):
        lines.append(f"| {run['index'] + 1} | {tool} | {procs} | {run['seconds']:.1f} | {tokens / run['seconds']:,.0f} | "
                     f"{run['cpu_seconds']:.1f} | {run['peak_rss_mb']:.0f} | "
                     f"{run['instances']:,} | {run['load_average_before']:.1f} |")
    if report.get("speedup"):
        reference_mb = max(r["peak_rss_mb"] for r in report["reference"])
        memory = (f"Peak memory: ours {report['scaling'][0]['peak_pss_mb']:.0f} MB (PSS, see below), Google's "
                  f"{reference_mb:.0f} MB (one process)." if report.get("scaling") else
                  f"Peak memory: ours {max(r['peak_rss_mb'] for r in report['ours']):.0f} MB (RSS summed over "
                  f"the processes), Google's {reference_mb:.0f} MB (one process).")
        lines += ["", f"Speed-up, best wall time of each tool (the run least disturbed by other load): "
                  f"**{report['best_speedup']:.1f}x** ({min(r['seconds'] for r in report['ours']):.1f} s vs "
                  f"{min(r['seconds'] for r in report['reference']):.1f} s).",
                  f"Speed-up, median wall time over the runs above: **{report['speedup']:.1f}x**; in CPU time: "
                  f"**{report['cpu_speedup']:.1f}x**. {memory}"]
    if report.get("tf_import_seconds") is not None:
        lines.append(f"The reference's wall time includes importing TensorFlow ({report['tf_import_seconds']:.1f} s "
                     "on this machine).")
    if report.get("scaling"):
        lines += ["", "Memory as the corpus grows (ours, same flags):", "",
                  "| corpus | tokens | instances | shards | wall s | tokens/s | peak PSS MB | peak RSS MB (summed) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in report["scaling"]:
            lines.append(f"| {row['scale']}x ({row['corpus_mb']:.0f} MB) | {row['tokens']:,} | {row['instances']:,} | "
                         f"{row['shards']} | {row['seconds']:.1f} | {row['tokens'] / row['seconds']:,.0f} | "
                         f"{row['peak_pss_mb']:.0f} | {row['peak_rss_mb']:.0f} |")
    if report.get("exact"):
        e = report["exact"]
        lines += ["", f"Exactness: on a {e['corpus_mb']:.1f} MB corpus run as a single unit, our instances and "
                  f"Google's are {'identical' if e['identical'] else 'DIFFERENT'} "
                  f"({e['instances_ours']:,} vs {e['instances_reference']:,} instances, compared sorted)."]
    lines += [
        "",
        "How to read this: both tools run the same algorithm on the same file with the same flags; "
        "instance counts differ slightly because ours draws the random next sentence from a unit of "
        "documents rather than the whole corpus and, by default, draws its random numbers differently "
        "(same distributions). Wall time and tokens/s are end to end (start-up, reading, writing). CPU s "
        "sums all processes. Peak PSS is the physical memory of the whole process tree (pages shared "
        "by forked workers counted once); summed RSS counts them once per process. The machine is "
        "shared: 'load avg before' is the 1-minute load average when each run started, and runs under "
        "load (above ~1) are slower, ours (two busy workers) more than the single-threaded reference.",
    ]
    if report.get("reference_script"):
        lines += ["", f"Reference script: `{report['reference_script']}`."]
    lines += ["", "Raw figures: " + report.get("json_path", "(json)"), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m evaluation.make_shards", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=Path, required=True, help="uncased BERT vocab.txt")
    parser.add_argument("--corpus", type=Path, help="use this segmented corpus instead of generating one")
    parser.add_argument("--corpus-note", help="how to describe --corpus in the report (default: its path)")
    parser.add_argument("--glue-corpus", type=Path, metavar="GLUE_DIR",
                        help="use real English text instead: the sentences of GLUE_DIR/MRPC/*.tsv and "
                        "GLUE_DIR/SST-2/train.tsv, in documents of 5-40 sentences")
    parser.add_argument("--corpus-mb", type=float, default=10.0, help="size of the generated corpus (default 10)")
    parser.add_argument("--scales", default="1", help="comma-separated corpus multiples for the memory table, "
                        "e.g. 1,10 (default 1)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="--workers for ours")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of each tool, alternating")
    parser.add_argument("--reference-script", type=Path, help="Google's create_pretraining_data.py")
    parser.add_argument("--reference-note", help="how to describe the reference script in the report "
                        "(default: its path)")
    parser.add_argument("--check-exact", type=float, metavar="MB", default=0.0,
                        help="with --reference-script: compare instances one by one on a corpus of this size")
    parser.add_argument("--work-dir", type=Path, help="where corpora and outputs go (default: a temp dir)")
    parser.add_argument("--out-json", type=Path, default=Path("bench-results") / "make_shards.json")
    parser.add_argument("--out-md", type=Path)
    args = parser.parse_args()

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-make-shards-"))
    work.mkdir(parents=True, exist_ok=True)
    vocab = args.vocab.resolve()
    if args.glue_corpus:
        args.corpus = glue_corpus(work / "corpus-glue.txt", args.glue_corpus)
        args.corpus_note = args.corpus_note or ("real English sentences: GLUE MRPC (train, test, dev) and SST-2 "
                                                "train, in documents of 5-40 consecutive sentences")
    corpus = args.corpus or generate_corpus(work / "corpus-1x.txt", vocab, args.corpus_mb, seed=1)
    report: dict = {
        "date": dt.date.today().isoformat(),
        "command": "python " + shlex.join(["-m", "evaluation.make_shards", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "processor": cpu_name(), "machine": platform.machine(),
                    "memory_gb": psutil.virtual_memory().total / 1e9, "python": platform.python_version(),
                    "platform": platform.platform()},
        "corpus_mb": corpus.stat().st_size / 1e6, "workers": args.workers, "ours": [], "reference": [],
        "corpus_description": (args.corpus_note or f"`{args.corpus}`") if args.corpus else None,
        "reference_script": args.reference_note or (str(args.reference_script) if args.reference_script else None),
    }
    for i in range(args.repeat):
        # Alternating, reference first on odd rounds, so that drifting machine load hits both alike.
        order = ["ours", "reference"] if i % 2 == 0 else ["reference", "ours"]
        for tool in order:
            if tool == "reference" and not args.reference_script:
                continue
            started = time.time()
            if tool == "ours":
                run = run_ours(corpus, vocab, work / "ours", args.workers)
            else:
                run = run_reference(args.reference_script, corpus, vocab, work / f"ref-{i}.tfrecord")
                (work / f"ref-{i}.tfrecord").unlink()
            run.update(started=started, index=i)
            report[tool].append(run)
            print(tool, run, flush=True)
    if args.reference_script:
        ours_s = float(np.median([r["seconds"] for r in report["ours"]]))
        ref_s = float(np.median([r["seconds"] for r in report["reference"]]))
        report["speedup"] = ref_s / ours_s
        report["best_speedup"] = min(r["seconds"] for r in report["reference"]) / min(r["seconds"] for r in report["ours"])
        report["cpu_speedup"] = (float(np.median([r["cpu_seconds"] for r in report["reference"]]))
                                 / float(np.median([r["cpu_seconds"] for r in report["ours"]])))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import tensorflow.compat.v1"], check=True,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        report["tf_import_seconds"] = time.perf_counter() - start
        report["tf_version"] = subprocess.run([sys.executable, "-c", "import tensorflow as t; print(t.__version__)"],
                                              capture_output=True, text=True,
                                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout.strip()
    scales = [int(s) for s in args.scales.split(",") if s]
    if scales != [1]:
        report["scaling"] = []
        for scale in scales:
            if scale == 1:
                big = corpus
            else:
                big = work / f"corpus-{scale}x.txt"
                if args.corpus:
                    with open(big, "wb") as out:
                        for _ in range(scale):
                            out.write(corpus.read_bytes())
                else:
                    generate_corpus(big, vocab, args.corpus_mb * scale, seed=scale)
            run = run_ours(big, vocab, work / f"ours-{scale}x", args.workers, pss=True)
            shutil.rmtree(work / f"ours-{scale}x", ignore_errors=True)
            report["scaling"].append({"scale": scale, "corpus_mb": big.stat().st_size / 1e6, **run})
            print("scale", scale, report["scaling"][-1], flush=True)
    if args.check_exact and args.reference_script:
        small = generate_corpus(work / "corpus-exact.txt", vocab, args.check_exact, seed=7)
        report["exact"] = {"corpus_mb": small.stat().st_size / 1e6,
                           **check_exact(args.reference_script, small, vocab, work)}
        print("exact", report["exact"], flush=True)
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    report["json_path"] = os.path.relpath(args.out_json)
    args.out_json.write_text(json.dumps(report, indent=2) + "\n")
    if args.out_md:
        args.out_md.parent.mkdir(parents=True, exist_ok=True)
        args.out_md.write_text(markdown(report))
    print(markdown(report))
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
