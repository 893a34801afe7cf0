"""The dispatcher: every registered command answers --help, errors are one line with exit code 2."""

import subprocess
import sys

import pytest

from bert_pipeline.cli import COMMANDS, main


def test_top_level_help_lists_every_command(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: bert-pipeline {name}")


def test_unknown_command_fails():
    with pytest.raises(SystemExit) as exit_:
        main(["frobnicate"])
    assert exit_.value.code == 2


def test_user_error_is_one_line_with_exit_code_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bert_pipeline.cli", "convert-tf-checkpoint", str(tmp_path / "nope.ckpt"),
         str(tmp_path / "bert_config.json"), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bert-pipeline convert-tf-checkpoint: error:")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_sigusr1_dumps_every_threads_stack_and_the_command_goes_on(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tests.paths import REPO

    code = ("import sys, threading, time; from bert_pipeline.cli import install_stack_dump; install_stack_dump(); "
            "threading.Thread(target=lambda: time.sleep(30), name='side', daemon=True).start(); "
            "print('ready', flush=True); time.sleep(2); print('carried on', flush=True)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGUSR1)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "carried on" in out
    assert "Thread 0x" in err and "Current thread 0x" in err and "in <lambda>" in err, err  # both threads


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_training_commands_log_to_the_homes_stack_mlflow(command, tmp_path, monkeypatch, capsys):
    """pretrain and finetune without --tracking-uri / MLFLOW_TRACKING_URI log where `run`, `demo` and `report` do:
    to the MLflow server of a stack up on the home (what a `ray job submit` job on the stack's head gets: the head
    has BERT_PIPELINE_HOME, not MLFLOW_TRACKING_URI). The server's experiments keep their artifacts at
    mlflow-artifacts:/N, which the home's sqlite file cannot reach: through it, a run trained to the end and then
    failed with a traceback at its first artifact. With the server gone, that is an error before any work."""
    import sqlite3

    from bert_pipeline import embedded_home

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(embedded_home, "_stack_uri_set", None)
    seen = []
    monkeypatch.setattr("bert_core.launch.run.run_step",
                        lambda step, config: seen.append(__import__("os").environ.get("MLFLOW_TRACKING_URI"))
                        or {"metrics": {}, "config": config.result_config()})  # the manifest's config
    args = {"pretrain": ["pretrain", "--data", str(tmp_path / "shards"), "--model", "bert_2_128_2",
                         "--num-steps", "1"],
            "finetune": ["finetune", "mrpc", "--data-dir", str(tmp_path / "mrpc"), "--model", str(tmp_path / "m")]}
    argv = args[command] + ["--output", str(tmp_path / "out")]

    # A stack up on the home: its server.
    monkeypatch.setattr(embedded_home, "stack_tracking_uri", lambda root: "http://127.0.0.1:5999")
    capsys.readouterr()
    assert main(argv) == 0
    assert seen == ["http://127.0.0.1:5999"]
    # The output printed is --output, though finetune's manifest config leaves it out (was: KeyError 'output').
    assert f'"output": "{tmp_path / "out"}"' in capsys.readouterr().out
    # --tracking-uri or --no-tracking: the home's stack is not asked.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(embedded_home, "_stack_uri_set", None)
    assert main(argv + ["--tracking-uri", "sqlite:///x.db"]) == 0
    assert main(argv + ["--no-tracking"]) == 0
    assert seen[1:] == [None, None]
    monkeypatch.undo()

    # No stack any more, and an experiment its server made in the home's store: an error before the step.
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(embedded_home, "_stack_uri_set", None)
    monkeypatch.setattr("bert_core.launch.run.run_step", lambda step, config: pytest.fail("the step ran"))
    with sqlite3.connect(home / "mlflow.db") as db:
        db.execute("CREATE TABLE experiments (experiment_id INTEGER, name TEXT, artifact_location TEXT)")
        db.execute("INSERT INTO experiments VALUES (2, 'bert-finetune/mrpc', 'mlflow-artifacts:/2')")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "experiment 'bert-finetune/mrpc' keeps its artifacts through the MLflow server" in err
    assert "bert-pipeline stack up --home" in err
    assert not (tmp_path / "out").exists()
