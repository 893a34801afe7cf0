"""The make-shards step: streaming, determinism across backends, idempotence, bad input."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bert_core.data import make_shards as sharding
from bert_core.data import shard_format as shards
from bert_core.data.instances import ShardConfig, is_heldout
from bert_core.errors import BertPipelineError
from bert_core.io import manifest
from bert_pipeline.cli import main
from tests.corpus_text import documents, write_segmented
from tests.paths import FIXTURES

VOCAB = str(FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt")
SMALL = ShardConfig(dupe_factor=2, chunk_documents=40, instances_per_shard=300, shuffle_buffer=500)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    write_segmented(root / "a.txt", documents(130, seed=1))
    write_segmented(root / "b.txt", documents(70, seed=2))
    return root


def digests(out: Path) -> list[str]:
    return [manifest.sha256_file(p) for p in shards.list_shards(out)]


def test_shards_and_manifest(corpus, tmp_path):
    result = sharding.make_shards([str(corpus / "*.txt")], str(tmp_path / "out"), VOCAB, SMALL)
    out = tmp_path / "out"
    assert result == manifest.read(out)
    assert result["step"] == "make-shards" and result["seed"] == SMALL.random_seed
    assert result["config"]["dupe_factor"] == 2 and "workers" not in result["config"]
    assert result["vocab"]["sha256"] == manifest.sha256_file(VOCAB)
    uris = [i["uri"] for i in result["inputs"]]
    assert uris == sorted([str(corpus / "a.txt"), str(corpus / "b.txt"), f"vocab:{VOCAB}"])
    files = shards.list_shards(out)
    assert [s["path"] for s in result["shards"]] == [p.name for p in files] == [f"part-0000{i}.npz" for i in
                                                                               range(len(files))]
    counts = [shards.num_instances(shards.read_shard(p)) for p in files]
    assert [s["instances"] for s in result["shards"]] == counts
    assert all(c == 300 for c in counts[:-1]) and 0 < counts[-1] <= 300
    assert sum(counts) == result["totals"]["instances"]
    assert [s["sha256"] for s in result["shards"]] == digests(out)
    assert result["totals"]["documents"] == 200 and result["totals"]["units"] >= 5
    assert manifest.verify_outputs(out) == []
    assert sorted(p.name for p in out.iterdir()) == sorted([*(p.name for p in files), "manifest.json"])


def test_byte_identical_whatever_the_workers(corpus, tmp_path):
    sharding.make_shards([str(corpus)], str(tmp_path / "w1"), VOCAB, SMALL)
    base = digests(tmp_path / "w1")
    sharding.make_shards([str(corpus)], str(tmp_path / "w2"), VOCAB, SMALL, workers=2)
    sharding.make_shards([str(corpus)], str(tmp_path / "w3"), VOCAB, SMALL, workers=3, backend="process")
    assert digests(tmp_path / "w2") == base == digests(tmp_path / "w3")
    other = ShardConfig(**{**SMALL.__dict__, "random_seed": 7})
    sharding.make_shards([str(corpus)], str(tmp_path / "seed7"), VOCAB, other)
    assert digests(tmp_path / "seed7") != base


WORKERS_OBEY_SIGTERM = """
import multiprocessing, os, signal, sys, time
from pathlib import Path
from bert_core.data import make_shards as sharding
from bert_core.data.instances import ShardConfig

parent = os.getpid()

def ignore_in_children(signum, frame):  # what Airflow's task runner installs (and never removes)
    if os.getpid() != parent:
        return

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, ignore_in_children)
    with sharding.open_executor(Path(sys.argv[1]), ShardConfig(), 2, "process", sharding.RunStats()):
        workers = multiprocessing.active_children()
        assert len(workers) == 2, workers
        os.kill(workers[0].pid, signal.SIGTERM)
        workers[0].join(30)
        # Gone (the fork version lived on: it ignored the signal). Its exit code is not asserted: through
        # forkserver it is -15, or 255 when the server's report of it is lost under load.
        assert not workers[0].is_alive()
    assert multiprocessing.active_children() == []
    print("ok")
"""


def test_process_workers_do_not_inherit_the_callers_threads_or_signal_handlers(tmp_path):
    # A make-shards task inside Airflow runs with Airflow's SIGTERM handler installed; forked workers
    # inherited it, ignored the pool's SIGTERM, and the pool's exit hung (CI, after a dag.test).
    script = tmp_path / "obey.py"
    script.write_text(WORKERS_OBEY_SIGTERM)
    proc = subprocess.run([sys.executable, str(script), VOCAB], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[3])
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_backend_is_ray_tasks_when_ray_address_is_set(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert sharding.choose_backend("auto", 1) == "inline"
    assert sharding.choose_backend("auto", 3) == "process"
    monkeypatch.setenv("RAY_ADDRESS", "ray://head.example:10001")
    assert sharding.choose_backend("auto", 1) == "ray" and sharding.choose_backend("auto", 4) == "ray"
    assert sharding.choose_backend("process", 2) == "process"  # an explicit choice wins
    assert sharding.local_backend(2) == "process" and sharding.local_backend(1) == "inline"  # this machine alone
    monkeypatch.setenv("RAY_ADDRESS", "")
    assert sharding.choose_backend("auto", 2) == "process"
    with pytest.raises(BertPipelineError, match="backend must be one of"):
        sharding.choose_backend("threads", 2)


def _shards_in_a_daemon(corpus: str, out: str, report: str) -> None:
    """Runs in a daemonic process, as a Celery prefork worker's task does."""
    backend = sharding.choose_backend("auto", 2)
    assert sharding.local_backend(2) == "inline"
    sharding.make_shards([corpus], out, VOCAB, SMALL, workers=2, progress=False)
    try:
        sharding.make_shards([corpus], out + "-process", VOCAB, SMALL, workers=2, backend="process", progress=False)
        refused = ""
    except BertPipelineError as error:
        refused = str(error)
    Path(report).write_text(json.dumps({"backend": backend, "refused": refused}))


def test_a_daemonic_process_makes_the_same_shards_inline(corpus, tmp_path):
    """Python forbids a daemonic process children: there "auto" runs the units inline, and "process" says why not."""
    import multiprocessing

    sharding.make_shards([str(corpus)], str(tmp_path / "pool"), VOCAB, SMALL, workers=2)
    report = tmp_path / "report.json"
    child = multiprocessing.get_context("spawn").Process(
        target=_shards_in_a_daemon, args=(str(corpus), str(tmp_path / "daemon"), str(report)), daemon=True)
    child.start()
    child.join(120)
    assert child.exitcode == 0
    result = json.loads(report.read_text())
    assert result["backend"] == "inline"
    assert "cannot start worker processes from a daemonic process" in result["refused"]
    assert not (tmp_path / "daemon-process").exists()
    assert digests(tmp_path / "daemon") == digests(tmp_path / "pool")


def test_the_ray_backend_needs_the_launch_layer(corpus, tmp_path):
    """bert_core.data knows nothing of Ray: its make_shards refuses the "ray" backend without an executor."""
    with pytest.raises(BertPipelineError, match="runs through bert_core.launch.ray_shards"):
        sharding.make_shards([str(corpus)], str(tmp_path / "out"), VOCAB, SMALL, backend="ray")
    assert not (tmp_path / "out").exists()


def test_progress_bar_shows_document_instance_and_token_rates(corpus, tmp_path, capsys):
    result = sharding.make_shards([str(corpus)], str(tmp_path / "out"), VOCAB, SMALL, progress=True)
    err = capsys.readouterr().err
    assert "make-shards" in err
    # The last postfix the bar shows covers the whole run: its rates share one elapsed time, so
    # their ratios are those of the run's totals.
    found = re.findall(r"([\d,]+) doc/s, ([\d,]+) inst/s, ([\d,]+) tok/s", err)
    assert found, err
    docs, instances, tokens = (int(x.replace(",", "")) for x in found[-1])
    totals = result["totals"]
    assert docs > 0 and instances > 0 and tokens > 0
    assert tokens / instances == pytest.approx(totals["tokens"] / totals["instances"], rel=0.01)
    assert instances / docs == pytest.approx(totals["instances"] / totals["documents"], rel=0.01)
    stats = sharding.RunStats(documents=10, instances=250, tokens=12_000)
    assert sharding.rates(stats, 2.0) == "5 doc/s, 125 inst/s, 6,000 tok/s"
    sharding.make_shards([str(corpus)], str(tmp_path / "quiet"), VOCAB, SMALL, progress=False)
    assert "doc/s" not in capsys.readouterr().err


def test_memory_is_bounded_by_the_unit_not_the_corpus(tmp_path):
    write_segmented(tmp_path / "big.txt", documents(1000, seed=5, max_sentences=4))
    config = ShardConfig(dupe_factor=1, chunk_documents=25, instances_per_shard=200, shuffle_buffer=400)
    for workers in (1, 2):
        stats = sharding.RunStats()
        sharding.make_shards([str(tmp_path / "big.txt")], str(tmp_path / f"out{workers}"), VOCAB, config,
                             workers=workers, stats=stats)
        assert stats.documents == 1000 and stats.units == 40
        # Inline: the unit being read plus the one before it (kept to merge a short last unit).
        # Processes: also the workers + 1 units in flight.
        bound = (2 + (workers + 1 if workers > 1 else 0)) * config.chunk_documents
        assert stats.peak_documents_held <= bound
        assert stats.documents_held == 0


def test_short_last_unit_is_merged(tmp_path):
    write_segmented(tmp_path / "c.txt", documents(45, seed=6))
    config = ShardConfig(chunk_documents=20)
    units = list(sharding.iter_units([("c", tmp_path / "c.txt")], config, sharding.RunStats()))
    assert [len(u[2]) for u in units] == [20, 25] and [u[1] for u in units] == [0, 1]


def test_rerun_is_a_no_op_and_other_config_is_refused(corpus, tmp_path):
    out = str(tmp_path / "out")
    first = sharding.make_shards([str(corpus)], out, VOCAB, SMALL)
    again = sharding.make_shards([str(corpus)], out, VOCAB, SMALL, workers=2)
    assert again["finished_at"] == first["finished_at"]
    other = ShardConfig(**{**SMALL.__dict__, "dupe_factor": 3})
    with pytest.raises(BertPipelineError, match=r"different configuration.*dupe_factor: 2 there, 3 now.*--overwrite"):
        sharding.make_shards([str(corpus)], out, VOCAB, other)
    assert manifest.read(out)["config"]["dupe_factor"] == 2
    sharding.make_shards([str(corpus)], out, VOCAB, other, overwrite=True)
    assert manifest.read(out)["config"]["dupe_factor"] == 3


def test_changed_input_is_refused(tmp_path):
    write_segmented(tmp_path / "in.txt", documents(30, seed=1))
    sharding.make_shards([str(tmp_path / "in.txt")], str(tmp_path / "out"), VOCAB, SMALL)
    write_segmented(tmp_path / "in.txt", documents(30, seed=2))
    with pytest.raises(BertPipelineError, match=r"in\.txt differs or is new"):
        sharding.make_shards([str(tmp_path / "in.txt")], str(tmp_path / "out"), VOCAB, SMALL)


def test_gzip_input_gives_the_same_shards(tmp_path):
    write_segmented(tmp_path / "plain.txt", documents(60, seed=3))
    with gzip.open(tmp_path / "packed.txt.gz", "wb") as f:
        f.write((tmp_path / "plain.txt").read_bytes())
    sharding.make_shards([str(tmp_path / "plain.txt")], str(tmp_path / "a"), VOCAB, SMALL)
    sharding.make_shards([str(tmp_path / "packed.txt.gz")], str(tmp_path / "b"), VOCAB, SMALL)
    assert digests(tmp_path / "a") == digests(tmp_path / "b")


def test_empty_inputs(tmp_path, caplog):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n\n  \n")
    write_segmented(tmp_path / "full.txt", documents(20, seed=1))
    with caplog.at_level(logging.WARNING):
        result = sharding.make_shards([str(tmp_path / "empty.txt"), str(tmp_path / "full.txt")],
                                      str(tmp_path / "out"), VOCAB, SMALL)
    assert "empty.txt: no documents (empty input)" in caplog.text
    assert result["totals"]["documents"] == 20
    with pytest.raises(BertPipelineError, match="no instances: the inputs .* hold no text"):
        sharding.make_shards([str(tmp_path / "empty.txt"), str(tmp_path / "blank.txt")],
                             str(tmp_path / "none"), VOCAB, SMALL)
    assert not (tmp_path / "none").exists()
    # Either side of a held-out split of inputs with no document says so (the training side said "every
    # document ... was held out; lower --holdout-fraction", the held-out side "selected none of the 0").
    for split in ("train", "heldout"):
        config = dataclasses.replace(SMALL, holdout_fraction=0.2, split=split)
        with pytest.raises(BertPipelineError, match="no instances: the inputs .* hold no text"):
            sharding.make_shards([str(tmp_path / "empty.txt")], str(tmp_path / "none"), VOCAB, config)


def test_bad_vocab_and_bad_text(tmp_path):
    write_segmented(tmp_path / "in.txt", documents(10, seed=1))
    lines = Path(VOCAB).read_text(encoding="utf-8").split("\n")
    (tmp_path / "nomask.txt").write_text("\n".join(t for t in lines if t != "[MASK]"), encoding="utf-8")
    with pytest.raises(BertPipelineError, match=r"--vocab .*nomask\.txt: .*\[MASK\]"):
        sharding.make_shards([str(tmp_path / "in.txt")], str(tmp_path / "out"), str(tmp_path / "nomask.txt"), SMALL)
    (tmp_path / "bad.txt").write_bytes(b"Fine line.\n\nBad \xff byte.\n")
    with pytest.raises(BertPipelineError, match=r"bad\.txt: not UTF-8 text: invalid byte 0xff at byte offset 16"):
        sharding.make_shards([str(tmp_path / "bad.txt")], str(tmp_path / "out"), VOCAB, SMALL)
    assert not (tmp_path / "out").exists()


def test_casing_must_match_the_vocab(tmp_path):
    """--cased with an uncased vocab turned every capitalised word into [UNK] (8% of the tokens of a small
    English corpus), and a cased vocab without --cased never used its capitalised tokens: both made shards
    silently. Each is an error naming the vocab and the flag, before any output; the Chinese vocab (uncased,
    two tokens '<S>' '<T>' in capitals) is uncased, and a matching pair works."""
    write_segmented(tmp_path / "in.txt", documents(10, seed=1))
    inputs = [str(tmp_path / "in.txt")]
    cased_vocab = str(FIXTURES / "vocab" / "cased_L-12_H-768_A-12.vocab.txt")
    chinese_vocab = str(FIXTURES / "vocab" / "chinese_L-12_H-768_A-12.vocab.txt")
    cased = dataclasses.replace(SMALL, do_lower_case=False)
    with pytest.raises(BertPipelineError, match=r"--vocab .*uncased_L-12.* is an uncased vocab .* leave out --cased"):
        sharding.make_shards(inputs, str(tmp_path / "out"), VOCAB, cased)
    with pytest.raises(BertPipelineError, match=r"--vocab .*cased_L-12.* is a cased vocab \(8366 of .*pass --cased"):
        sharding.make_shards(inputs, str(tmp_path / "out"), cased_vocab, SMALL)
    with pytest.raises(BertPipelineError, match=r"chinese_L-12.* is an uncased vocab \(2 of"):
        sharding.make_shards(inputs, str(tmp_path / "out"), chinese_vocab, cased)
    assert not (tmp_path / "out").exists()
    assert sharding.make_shards(inputs, str(tmp_path / "out"), cased_vocab, cased)["totals"]["instances"] > 0


def test_held_out_and_training_outputs_must_not_overlap(tmp_path):
    """A held-out directory inside --output was written first, then the training side refused the non-empty
    --output (with --overwrite it would have replaced it, held-out shards and all). The same directory spelled
    two ways, nested either way round, or the same s3 prefix are errors before anything is written."""
    write_segmented(tmp_path / "in.txt", documents(10, seed=1))
    config = dataclasses.replace(SMALL, holdout_fraction=0.3)
    out = tmp_path / "out"
    for held in (out / "heldout", out / "." / "x" / "..", tmp_path):
        with pytest.raises(BertPipelineError, match=r"--holdout-output .* and --output .* overlap"):
            sharding.make_split_shards([str(tmp_path / "in.txt")], str(out), VOCAB, config, str(held))
    with pytest.raises(BertPipelineError, match="overlap"):
        sharding.make_split_shards([str(tmp_path / "in.txt")], "s3://b/shards/", VOCAB, config, "s3://b/shards/h")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_failure_midway_leaves_no_output(corpus, tmp_path, monkeypatch):
    real_write = sharding.ShardWriter._write
    calls = []

    def failing_write(self, arrays):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        real_write(self, arrays)

    monkeypatch.setattr(sharding.ShardWriter, "_write", failing_write)
    with pytest.raises(RuntimeError, match="disk full"):
        sharding.make_shards([str(corpus)], str(tmp_path / "out"), VOCAB, SMALL)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_killed_run_leaves_no_shard_that_looks_complete(tmp_path):
    write_segmented(tmp_path / "in.txt", documents(3000, seed=9))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bert_pipeline.cli", "make-shards", str(tmp_path / "in.txt"), "--output", str(out),
           "--vocab", VOCAB, "--instances-per-shard", "100", "--shuffle-buffer", "0", "--chunk-documents", "50",
           "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob(".out.tmp-*/part-*.npz")):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(tmp_path.glob(".out.tmp-*/part-*.npz")), "the run ended before writing a shard"
    assert not out.exists()
    assert not list(tmp_path.glob(".out.tmp-*/manifest.json"))


def test_cli(corpus, tmp_path, capsys):
    argv = ["make-shards", str(corpus / "a.txt"), "--output", str(tmp_path / "out"), "--vocab", VOCAB,
            "--dupe-factor", "1", "--max-seq-length", "64", "--whole-word-mask", "--no-progress"]
    assert main(argv) == 0
    data = manifest.read(tmp_path / "out")
    assert data["config"]["whole_word_mask"] is True and data["config"]["max_seq_length"] == 64
    arrays = shards.read_shard(tmp_path / "out" / "part-00000.npz")
    assert arrays["input_ids"].shape[1] == 64 and np.all(arrays["input_ids"][:, 0] == 101)
    assert main([*argv[:4], "--vocab", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- held-out split


def test_heldout_split_by_document(corpus, tmp_path):
    config = ShardConfig(**{**SMALL.__dict__, "holdout_fraction": 0.2})
    train_out, held_out = tmp_path / "train", tmp_path / "held"
    result = sharding.make_split_shards([str(corpus / "*.txt")], str(train_out), VOCAB, config, str(held_out))
    held = manifest.read(held_out)
    assert result["heldout"] == {"output": str(held_out), "instances": held["totals"]["instances"],
                                 "documents": held["totals"]["documents"]}
    # Every document is on exactly one side; about the asked fraction is held out.
    assert result["totals"]["documents"] + held["totals"]["documents"] == 200
    assert 20 <= held["totals"]["documents"] <= 60
    assert held["config"]["split"] == "heldout" and held["config"]["dupe_factor"] == 1
    assert result["config"]["split"] == "train" and result["config"]["dupe_factor"] == 2
    # No held-out document's text reaches the training shards: compare the token rows' sentences.
    docs = documents(130, seed=1) + documents(70, seed=2)
    held_docs = [d for d in docs if is_heldout(d, 0.2)]
    assert len(held_docs) == held["totals"]["documents"]
    # The split is a property of the text: the same documents in another order and file layout split alike.
    (tmp_path / "shuffled").mkdir()
    write_segmented(tmp_path / "shuffled" / "all.txt", list(reversed(docs)))
    again = sharding.make_split_shards([str(tmp_path / "shuffled" / "all.txt")], str(tmp_path / "t2"), VOCAB,
                                       config, str(tmp_path / "h2"))
    assert again["heldout"]["documents"] == held["totals"]["documents"]
    # Re-running is a no-op on both sides.
    before = digests(train_out) + digests(held_out)
    sharding.make_split_shards([str(corpus / "*.txt")], str(train_out), VOCAB, config, str(held_out))
    assert digests(train_out) + digests(held_out) == before


def test_a_file_with_no_document_on_one_side_is_not_called_empty(corpus, tmp_path, caplog):
    docs = documents(40, seed=3)
    held = [d for d in docs if is_heldout(d, 0.2)]
    assert held and len(held) < len(docs)
    write_segmented(tmp_path / "train_only.txt", [d for d in docs if not is_heldout(d, 0.2)])
    write_segmented(tmp_path / "both.txt", docs)
    config = ShardConfig(**{**SMALL.__dict__, "holdout_fraction": 0.2})
    with caplog.at_level(logging.INFO):
        result = sharding.make_split_shards([str(tmp_path / "train_only.txt"), str(tmp_path / "both.txt")],
                                            str(tmp_path / "train"), VOCAB, config, str(tmp_path / "held"))
    assert result["heldout"]["documents"] == len(held)
    assert "empty input" not in caplog.text
    assert (f"train_only.txt: none of its {len(docs) - len(held)} document(s) is on the heldout side of the "
            "hold-out split") in caplog.text


def test_heldout_cli_and_empty_selection(corpus, tmp_path, capsys):
    out = tmp_path / "shards"
    assert main(["make-shards", str(corpus / "a.txt"), "--output", str(out), "--vocab", VOCAB,
                 "--holdout-fraction", "0.1", "--dupe-factor", "1", "--no-progress"]) == 0
    assert (tmp_path / "shards-heldout" / "manifest.json").is_file() and (out / "manifest.json").is_file()
    one = tmp_path / "one.txt"
    write_segmented(one, documents(1, seed=5, min_sentences=4))
    with pytest.raises(BertPipelineError, match="selected none of the 1 document"):
        sharding.make_split_shards([str(one)], str(tmp_path / "o1"), VOCAB,
                                   ShardConfig(holdout_fraction=0.001), str(tmp_path / "h1"))
    assert not (tmp_path / "o1").exists()  # the held-out side runs first: nothing was written
    assert main(["make-shards", str(one), "--output", str(tmp_path / "o2"), "--vocab", VOCAB,
                 "--holdout-output", str(tmp_path / "h2")]) != 0
    assert "--holdout-output needs --holdout-fraction" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- input hygiene


def test_step_manifests_are_never_corpus_text(corpus, tmp_path):
    seg = tmp_path / "seg"
    seg.mkdir()
    write_segmented(seg / "part.txt", documents(30, seed=3))
    (seg / "manifest.json").write_text('{"step": "segment", "outputs": [{"path": "part.txt"}]}\n')
    expected = sharding.make_shards([str(seg / "part.txt")], str(tmp_path / "ref"), VOCAB, SMALL)
    # `seg/*` as the shell expands it (the manifest named explicitly), as a glob, and as a directory.
    for name, inputs in (("expanded", [str(seg / "manifest.json"), str(seg / "part.txt")]),
                         ("glob", [str(seg / "*")]), ("dir", [str(seg)])):
        result = sharding.make_shards(inputs, str(tmp_path / name), VOCAB, SMALL)
        assert [i["uri"] for i in result["inputs"] if not i["uri"].startswith("vocab:")] == [str(seg / "part.txt")]
        assert result["totals"] == expected["totals"]
    with pytest.raises(BertPipelineError, match="a step's manifest, not text"):
        sharding.make_shards([str(seg / "manifest.json")], str(tmp_path / "only"), VOCAB, SMALL)


def test_json_and_binary_inputs_are_clear_errors(tmp_path):
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"text": "A document."}\n{"text": "Another one."}\n')
    with pytest.raises(BertPipelineError, match=r"corpus.jsonl: line 1 is JSON, not segmented text.*segment"):
        sharding.make_shards([str(jsonl)], str(tmp_path / "o"), VOCAB, SMALL)
    blob = tmp_path / "weights.bin"
    blob.write_bytes(b"\x00\x01\x02binary\x00" * 10)
    # The way out is named where it exists: segment's flag, make-shards has none.
    with pytest.raises(BertPipelineError, match=r"weights.bin: binary data, not text: .*run `segment "
                                                r"--on-decode-error replace` on the raw text to drop such bytes"):
        sharding.make_shards([str(blob)], str(tmp_path / "o2"), VOCAB, SMALL)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_one_side_with_no_document_is_an_empty_output_when_asked(tmp_path):
    """A one-document file whose document is held out: its training side alone is an error (the CLI user's own
    --holdout-fraction); with empty_side_ok (a DAG making one file's training side at a time) it is an output
    with no shard whose manifest records why, a no-op when made again, and validate-shards accepts it."""
    from bert_core.data.validate_shards import validate_shards

    docs = [d for d in documents(100, seed=5, min_sentences=3) if is_heldout(d, 0.1)]
    assert docs
    one = write_segmented(tmp_path / "one.txt", docs[:1])
    config = ShardConfig(**{**SMALL.__dict__, "holdout_fraction": 0.1, "split": "train"})
    with pytest.raises(BertPipelineError, match=r"every document of .*one\.txt was held out; lower --holdout-fraction"):
        sharding.make_split_shards([str(one)], str(tmp_path / "cli"), VOCAB, config, str(tmp_path / "cli-h"))
    assert not (tmp_path / "cli").exists()
    made = sharding.make_shards([str(one)], str(tmp_path / "train"), VOCAB, config, empty_side_ok=True)
    assert made["shards"] == [] and made["outputs"] == [] and shards.list_shards(tmp_path / "train") == []
    assert made["totals"]["instances"] == 0 and made["totals"]["other_side_documents"] == 1
    assert made["empty_side"] == ("none of the 1 document(s) of the inputs is on the train side of the held-out "
                                  "split (holdout_fraction 0.1): no shard")
    assert manifest.read(tmp_path / "train") == made
    again = sharding.make_shards([str(one)], str(tmp_path / "train"), VOCAB, config, empty_side_ok=True)
    assert again == made  # up to date: nothing made again
    checked = validate_shards(str(tmp_path / "train"))
    assert checked["success"] and checked["shards"] == 0 and checked["statistics"] == {"instances": 0}
    assert checked["empty_side"] == made["empty_side"]
    # The held-out side of it is the file's document, as without the option.
    held = sharding.make_shards([str(one)], str(tmp_path / "held"), VOCAB, sharding.heldout_config(config),
                                empty_side_ok=True)
    assert held["totals"]["documents"] == 1 and held["totals"]["instances"] > 0 and "empty_side" not in held
    # Inputs with no document at all are still an error: there is no side to be empty.
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(BertPipelineError, match="no instances: the inputs .* hold no text"):
        sharding.make_shards([str(tmp_path / "empty.txt")], str(tmp_path / "none"), VOCAB, config,
                             empty_side_ok=True)
