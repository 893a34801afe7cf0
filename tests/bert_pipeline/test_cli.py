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
