"""`bert-pipeline run DAG_ID`: a real bert_pretraining run (dag.test() on an embedded home) whose `plan` passes and
whose `segment` fails on an input that is not UTF-8 text, as the command line shows it: the task lines, the failed task's log
tail and the log file's path, the report of how far it got, exit status 1; and the flags' errors, before any run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bert_pipeline.cli import main

pytestmark = pytest.mark.slow


def test_a_failing_task_shows_its_log_tail_and_the_log_path(tmp_path):
    binary = tmp_path / "corpus" / "binary.txt"
    binary.parent.mkdir()
    binary.write_bytes(b"A first line of text.\n\xff\xfe and then bytes that are not UTF-8.\n")
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"inputs": [str(binary)]}))
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BERT_PIPELINE_HOME", "RAY_ADDRESS"))}
    done = subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "run", "bert_pretraining", "--conf-file",
                           str(conf), "--home", str(home)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == ""  # everything the components said is in the log
    out = done.stdout
    lines = out.splitlines()
    assert lines[0].startswith("bert_pretraining: log ") and lines[1].startswith("bert_pretraining: run manual__")
    log_path = Path(lines[0].split()[2])
    assert any(line.startswith(" ✓ plan ") and "outputs under" in line for line in lines)
    assert any(line.startswith(" ✗ segment ") and "failed" in line for line in lines)
    assert any(line.startswith(" - pretrain ") and "upstream failed" in line for line in lines)
    tail = out.split("segment failed. The end of its log:\n", 1)[1]
    assert f"| bert_core.errors.BertPipelineError: {binary}: not UTF-8 text: invalid byte 0xff" in tail
    assert f"Full log: {log_path}" in tail
    assert "Traceback (most recent call last)" in log_path.read_text()  # the whole traceback stays there

    # The run's files sit in the work dir the DAG would have chosen (HOME/pretraining/<stamp>), beside its outputs.
    run_dir = log_path.parent
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "failed" and record["conf"] == {"inputs": [str(binary)], "work_dir": str(run_dir)}
    assert record["run_id"] in lines[1] and run_dir == home / "pretraining" / run_dir.name
    # A failed run has its report too: the timeline shows how far it got.
    assert f"Report (open it in a browser): {run_dir / 'report.html'}" in lines
    assert "segment" in (run_dir / "report.html").read_text()
    states = {t["task_id"]: t["state"] for t in record["tasks"]}
    assert states["plan"] == "success" and states["segment"] == "failed" and states["pretrain"] == "upstream_failed"


def test_flag_errors_come_before_any_run(tmp_path, capsys):
    bad = tmp_path / "conf.json"
    bad.write_text('{"num_steps": 10,\n "lr": }\n')
    assert main(["run", "bert_pretraining", "--conf-file", str(bad), "--home", str(tmp_path)]) == 2
    assert f"--conf-file {bad}: not JSON: line 2 column 8" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "bert_pretrainin", "--home", str(tmp_path)])
    assert "invalid choice: 'bert_pretrainin'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_an_ill_typed_param_is_named_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BERT_PIPELINE_HOME", "RAY_ADDRESS"))}
    done = subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "run", "bert_finetune", "--conf",
                           '{"epochs": "three"}', "--home", str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr.strip()
    assert said == ("bert-pipeline run: error: bert_finetune: the run did not start: ParamValidationError: conf: "
                    "Invalid input for param epochs: 'three' is not of type 'integer'")  # not jsonschema's report
    assert not list((tmp_path / "finetune").glob("*"))  # no run dir, log or record of a run that was not made
    assert done.stdout == ""  # nor a log path or task lines

    # A misspelt key is refused before a run starts, as the DAG's plan task would refuse it seconds in: no run dir,
    # record or report is left behind. A former name of a Param (max_len, recipe) is not refused.
    done = subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "run", "bert_finetune", "--conf",
                           '{"epoch": 3, "max_len": 64}', "--home", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("bert-pipeline run: error: bert_finetune conf: unknown param(s) epoch (did you mean "
                                  "epochs?); the DAG's params are ")
    assert not list((tmp_path / "finetune").glob("*")) and done.stdout == ""


def test_a_failed_fine_tuning_task_leaves_the_others_to_be_evaluated_and_registered(tmp_path):
    """bert_finetune maps each task's chain as one group: sst-2's bad training file fails its fine-tuning, and
    sts-b is still evaluated and registered (mapping evaluate over all of fine-tuning's outputs made every
    evaluate upstream_failed when one task failed). The run fails, and its report, built after every task, says
    which task failed and shows sts-b."""
    from tests.tiny_bert import write_tiny_bert
    from tests.toy_tasks import write_sst2, write_stsb

    broken = write_sst2(tmp_path / "sst2")
    with (broken / "train.tsv").open("a") as f:
        f.write("the film was fine .\tmaybe\n")
    conf = {"tasks": {"sst-2": str(broken), "sts-b": str(write_stsb(tmp_path / "stsb"))},
            "model": str(write_tiny_bert(tmp_path / "tiny")), "epochs": 1, "batch_size": 16, "max_seq_length": 32}
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BERT_PIPELINE_HOME", "RAY_ADDRESS",
                                                                    "MLFLOW"))}
    done = subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "run", "bert_finetune", "--conf",
                           json.dumps(conf), "--home", str(home)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "is not a SST-2 label" in done.stdout or "not a sst-2 label" in done.stdout.lower(), done.stdout[-3000:]
    run_dir = Path(done.stdout.splitlines()[0].split()[2]).parent
    decisions = [json.loads(p.read_text()) for p in (run_dir / "registry").glob("bert-*-v*.json")]
    assert [d["name"] for d in decisions] == ["bert-sts-b"], decisions
    records = [json.loads(p.read_text()) for p in (run_dir / "tasks").iterdir()]
    states = {(r["task_id"], r["map_index"]): r["state"] for r in records}
    assert {k: v for k, v in states.items() if v == "failed"} == {("finetune", 0): "failed"}, states
    assert states[("evaluate", 1)] == states[("register_and_promote", 1)] == "success", states
    # The report was built once everything had ended: it names the failure and shows sts-b's fine-tuning.
    assert f"Report (open it in a browser): {run_dir / 'report.html'}" in done.stdout
    html = (run_dir / "report.html").read_text()
    assert "This run failed" in html and "sts-b" in html


def test_a_fine_tuning_run_of_one_task_ends_with_its_summary(tmp_path):
    """Airflow 3.2+ hands a mapped group's output, when the group expanded once, as the bare value rather than a
    one-item list (apache/airflow#69036): bert_finetune's summary of a one-task run failed on it."""
    from tests.tiny_bert import write_tiny_bert
    from tests.toy_tasks import write_sst2

    conf = {"tasks": {"sst-2": str(write_sst2(tmp_path / "sst2"))}, "model": str(write_tiny_bert(tmp_path / "tiny")),
            "epochs": 1, "batch_size": 16, "max_seq_length": 32}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BERT_PIPELINE_HOME", "RAY_ADDRESS",
                                                                    "MLFLOW"))}
    done = subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "run", "bert_finetune", "--conf",
                           json.dumps(conf), "--home", str(tmp_path / "home")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = Path(done.stdout.splitlines()[0].split()[2]).parent
    summary = json.loads((run_dir / "registry" / "summary.json").read_text())
    assert [m["name"] for m in summary["models"]] == ["bert-sst-2"]


@pytest.mark.parametrize("command", [["run", "bert_finetune"], ["demo"]])
def test_run_and_demo_refuse_a_home_the_production_stack_is_up_on(tmp_path, capsys, command):
    """`run`/`demo` run a DAG in-process on an embedded SQLite Airflow: on a home where the production stack is up,
    the run was in no database the stack's Airflow (PostgreSQL) reads, on none of its workers, and the command
    pointed at the stack's UI. Refused before anything is written; the embedded profile's stack is fine."""
    from bert_pipeline.stack import processes

    home = tmp_path / "home"
    (home / "stack").mkdir(parents=True)
    me = {"pid": os.getpid(), "started": processes.start_time(os.getpid()), "url": "http://127.0.0.1:18080"}
    state = {"profile": "production", "ports": {}, "services": {"airflow-api": me}}
    (home / "stack" / "state.json").write_text(json.dumps(state))
    assert main([*command, "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert "the production stack is up on" in err and "POST http://127.0.0.1:18080/api/v2/dags/" in err, err
    assert sorted(p.name for p in home.iterdir()) == ["stack"]


def test_a_runs_local_ray_checks_the_homes_token_and_a_sigterm_aborts_it_and_stops_the_run(tmp_path):
    """Ray 2.60 binds a local instance's GCS to every interface: `run` (and `demo`) start it with Ray's token
    authentication, the home's token made 0600, unless RAY_AUTH_MODE is the user's to set (conftest sets it for
    the test process: left out here, as on a user's machine).

    SIGTERM (`kill`, a container stopping) during its pretraining: the Ray Train run is aborted, the task fails
    without a retry, no later task starts, and the report still shows how far the run got; the run ends failed,
    exit status 1. Before, Airflow's task runner took SIGTERM in every task (calling a no-op on_kill) and the
    pretraining went on to the end."""
    import signal
    import time

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "BERT_PIPELINE_HOME", "RAY_ADDRESS", "RAY_AUTH", "MLFLOW"))}
    home = tmp_path / "home"
    conf = {"num_steps": 5000, "num_workers": 2, "batch_size": 8, "max_seq_length": 32, "dupe_factor": 1}
    run = subprocess.Popen([sys.executable, "-m", "bert_pipeline.cli", "run", "bert_pretraining", "--conf",
                            json.dumps(conf), "--home", str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while not any("Started training worker group" in log.read_text()
                      for log in home.glob("pretraining/*/run.log")):
            assert time.monotonic() < deadline and run.poll() is None, "pretraining never started"
            time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=120)
    finally:
        run.kill()
    token = home / "stack" / "ray_auth_token"
    assert len(token.read_text()) == 64 and token.stat().st_mode & 0o777 == 0o600
    assert run.returncode == 1, out + err
    lines = out.splitlines()
    assert "SIGTERM: stopping the run (the task running fails, no task starts but the run's report; again to stop " \
           "at once)" in lines, out
    run_dir = Path(lines[0].split()[2]).parent
    record = json.loads((run_dir / "run.json").read_text())
    states = {t["task_id"]: t["state"] for t in record["tasks"]}
    assert record["state"] == "failed" and states["pretrain"] == "failed" and states["report"] == "success", states
    assert record["stopped_by"] == "SIGTERM"
    assert any(line.startswith("bert_pretraining stopped (SIGTERM) in ") for line in lines), out
    # What the user asked for is not dressed as a failure: no log tail of tracebacks, one line that says so.
    assert "The end of its log" not in out
    assert any(line.startswith("Stopped by SIGTERM: the task running failed without a retry, and no task started "
                               "after it but the report. Failed: ") and "pretrain" in line for line in lines), out
    assert states["register_and_promote"] in ("failed", "upstream_failed")
    log = (run_dir / "run.log").read_text()
    assert "Missing authorization header" not in log and "Ray Train: 2 worker(s)" in log
    assert "SIGTERM: aborting the Ray Train run" in log and "stopped (SIGTERM) while this task ran: not retried" in log
    assert f"Report (open it in a browser): {run_dir / 'report.html'}" in lines
