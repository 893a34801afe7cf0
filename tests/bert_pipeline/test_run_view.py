"""The run view's parts, without a DAG run: where output goes during a run (fd-level writes, print, logging, child
processes: the log; the view: the terminal), the task lines from task-instance rows, the key figures from return
values, the plain and the live rendering, a failed task's log tail, and the conf flags' errors.
(A real run: tests/test_demo.py, the success path; tests/bert_pipeline/test_run_command.py, a failing task.)"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError
from bert_pipeline.dag_run import conf_from, run_dir_for, task_log_tail
from bert_pipeline.run_output import Terminal, output_to_log
from bert_pipeline.run_state import TaskInstanceState
from bert_pipeline.run_view import LiveView, PlainView, task_lines
from bert_pipeline.task_figures import describe, figure

T0 = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)


def row(task_id, state, map_index=-1, seconds=None, try_number=1, value=None):
    end = T0 + dt.timedelta(seconds=seconds) if seconds is not None else None
    return TaskInstanceState(task_id, map_index, state, T0 if state else None, end, try_number, 2, value)


def test_everything_but_the_view_goes_to_the_log(tmp_path, capfd):
    log_path = tmp_path / "run" / "run.log"
    logger = logging.getLogger("test_run_view.before")
    handler = logging.StreamHandler(sys.stderr)  # made before the run, holding the stderr of the time
    logger.addHandler(handler)
    try:
        with output_to_log(log_path) as terminal:
            terminal.stream.write("the view's line\n")
            print("a print")
            logger.warning("a handler made before the run")
            os.write(2, b"a C-level write to fd 2\n")
            subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
            assert os.environ["RAY_COLOR_PREFIX"] == "0"
    finally:
        logger.removeHandler(handler)
    out, err = capfd.readouterr()
    assert out == "the view's line\n" and err == ""
    log = log_path.read_text()
    for line in ("a print", "a handler made before the run", "a C-level write to fd 2", "a child process"):
        assert line in log
    assert "the view's line" not in log
    print("after the run")  # stdout is back
    assert capfd.readouterr().out == "after the run\n"
    assert "RAY_COLOR_PREFIX" not in os.environ or os.environ["RAY_COLOR_PREFIX"] != "0"


def test_verbose_streams_the_log_to_the_terminal_too(tmp_path, capfd):
    log_path = tmp_path / "run.log"
    with output_to_log(log_path, echo=True):
        print("component output")
        os.write(1, b"and a C-level one\n")
    out, _ = capfd.readouterr()
    assert "component output" in out and "and a C-level one" in out
    assert "component output" in log_path.read_text()


def test_task_lines_take_mapped_instances_retries_and_upstream_failures_together():
    rows = [row("plan", "success", seconds=2.5, value={"work_dir": "/w"}),
            row("make_shards", "success", 0, seconds=1), row("make_shards", "running", 1),
            row("train", "up_for_retry", try_number=1), row("register", "upstream_failed", seconds=0)]
    lines = {line.task_id: line for line in task_lines(["plan", "make_shards", "train", "register", "summary"], rows)}
    assert lines["plan"].state == "success" and lines["plan"].figure == "outputs under /w"
    assert lines["plan"].seconds(T0) == 2.5
    assert (lines["make_shards"].state, lines["make_shards"].mapped, lines["make_shards"].done) == ("running", 2, 1)
    assert lines["train"].state == "up_for_retry" and lines["train"].failed_map_index == -1
    assert lines["register"].state == "upstream_failed" and lines["register"].seconds(T0) is None
    assert lines["summary"].state == "waiting"


def _shards(path: Path, instances: int) -> str:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({
        "step": "make-shards", "config": {}, "inputs": {}, "outputs": [], "totals": {"instances": instances},
        "shards": [{"path": "part-00000.npz"}]}))
    return str(path)


def test_key_figures_from_return_values(tmp_path):
    assert describe({"name": "bert-sst-2", "candidate": "3", "promoted": True}) == "bert-sst-2 v3 -> champion"
    assert describe({"name": "bert-pretrained", "candidate": "1", "promoted": False,
                     "reasons": ["mlm_accuracy_over_chance 0.01 is below the floor 0.05"]}) == (
        "bert-pretrained v1 not promoted: mlm_accuracy_over_chance 0.01 is below the floor 0.05")
    assert describe({"output": "o", "steps": 300, "metrics_on": "held-out", "metrics": {
        "mlm_accuracy": 0.2012, "mlm_accuracy_chance": 0.1361, "nsp_accuracy": 0.6667,
        "nsp_accuracy_chance": 0.6667, "loss": 4.9}}) == (
        "300 steps; held-out masked-LM 0.201 (chance 0.136), NSP 0.667 (chance 0.667)")
    assert describe({"task": "squad", "metrics": {"exact_match": 50.0, "f1": 61.25}}) == "squad dev f1 61.2, EM 50"
    # SQuAD 2.0: its gate metric exact, which a not-promoted line names, comes before the HasAns_*/NoAns_* figures.
    assert describe({"task": "squad", "metrics": {"exact": 35.7, "f1": 46.4, "HasAns_exact": 44.4, "HasAns_f1": 61.1,
                                                  "NoAns_exact": 20.0}}) == "squad dev f1 46.4, exact 35.7, HasAns_exact 44.4"
    assert describe({"instances": 340, "validation": "v.json", "shards_dir": "s"}) == (
        "340 instances: all expectations met")
    assert describe({"status": "failed", "regressions": ["bert-sst-2/accuracy"]}) == "failed: bert-sst-2/accuracy"
    # The night's report: `bert-pipeline run` prints no report line for it (the nightly has no `report` task).
    assert describe({"status": "passed", "regressions": [], "report": "/w/report/report.md", "mlflow_run_id": "a"}) == (
        "passed; report: /w/report/report.md")
    assert describe({"status": "failed", "regressions": ["x/f1"], "report": "/w/report/report.md",
                     "mlflow_run_id": "a"}) == "failed: x/f1; report: /w/report/report.md"
    # An empty registry's plan said "0 files"; a skipped speed task nothing.
    assert describe([]) == "nothing to do (an empty list)"
    assert describe({}) == "skipped: nothing to run"
    assert describe([{"name": "", "index": 0, "pretrain": {}, "shards": {}}]) == "1 pretraining phase"
    assert describe(["a.txt", "b.txt"]) == "2 files"
    # The nightly's plan: a champion and its candidate share a task; each version is named once.
    assert describe([{"name": "bert-sst-2", "task": "sst-2", "version": "3", "role": "champion", "data_dir": "d"},
                     {"name": "bert-sst-2", "task": "sst-2", "version": "4", "role": "candidate", "data_dir": "d"}]) == (
        "2 model versions to score: bert-sst-2 v3 (champion), bert-sst-2 v4 (candidate)")
    assert describe([{"task": "sst-2", "data_dir": "d"}, {"task": "mrpc", "data_dir": "e"}]) == "2 tasks: sst-2, mrpc"
    assert describe(_shards(tmp_path / "a", 300)) == "1 shard, 300 instances"
    assert figure([_shards(tmp_path / "b", 20), _shards(tmp_path / "c", 22)]) == "2 shards, 42 instances"
    assert describe("s3://bucket/run/shards") == "s3://bucket/run/shards"  # named, never fetched
    assert describe(object()) == ""
    assert describe({"report": "/w/report.html", "mlflow_run_id": "a" * 32, "mlflow_page": None}) == (
        "report.html, logged to MLflow (bert-runs)")
    assert describe({"report": "/w/report.html", "mlflow_run_id": None, "mlflow_page": None}) == "report.html"
    # The nightly's speed tasks: tokens/s per model and mode, the pretraining step and the time to accuracy.
    assert describe({"throughput/bert_6_384_12/infer": 1.234}) == "ours / transformers: bert_6_384_12/infer 1.23x"
    assert figure([{"throughput/pretrain_step/bert_2_128_2": 8.404, "time_to_accuracy/bert_2_128_2": 29.19}]) == (
        "ours / transformers: pretrain_step/bert_2_128_2 8.4x, time_to_accuracy/bert_2_128_2 29.2x")


def test_plain_view_prints_a_line_as_each_task_ends():
    out = io.StringIO()
    view = PlainView(Terminal(out, False, 100))
    view.start(["plan", "segment"])
    view.update(task_lines(["plan", "segment"], [row("plan", "running")]))
    assert out.getvalue() == ""
    rows = [row("plan", "success", seconds=1, value={"work_dir": "/w"}), row("segment", "failed", seconds=0.5)]
    view.update(task_lines(["plan", "segment"], rows))
    view.stop(task_lines(["plan", "segment"], rows))  # the same states: no line twice
    assert out.getvalue().splitlines() == [
        " ✓ plan     success               1.0 s  outputs under /w",
        " ✗ segment  failed                0.5 s"]


def test_live_view_redraws_the_lines_in_place_within_the_width():
    out = io.StringIO()
    view = LiveView(Terminal(out, True, 60))
    view.start(["plan", "pretrain"])
    view.update(task_lines(["plan", "pretrain"], [row("plan", "running")]))
    view._live.refresh()  # what its refresh thread does twice a second
    view.stop(task_lines(["plan", "pretrain"], [row("plan", "success", seconds=3, value={"work_dir": "/" + "w" * 80}),
                                                row("pretrain", "upstream_failed")]))
    screen = out.getvalue()
    assert "\x1b[1A" in screen or "\x1b[2K" in screen  # cursor moves back over the block to redraw it
    final = screen.rsplit("\x1b[2K", 1)[-1]
    import re

    visible = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line) for line in final.splitlines()]
    assert any("✓ plan" in line and line.endswith("…") for line in visible)
    assert all(len(line) <= 60 for line in visible)


LOG = """\
2026-11-25T16:43:09Z [info     ] [DAG TEST] starting task_id=make_shards map_index=1 [airflow.sdk.definitions.dag]
old try of map index 1
2026-11-25T16:43:09Z [info     ] [DAG TEST] starting task_id=make_shards map_index=10 [airflow.sdk.definitions.dag]
not this task instance
2026-11-25T16:43:09Z [info     ] [DAG TEST] end task task_id=make_shards map_index=10 [airflow.sdk.definitions.dag]
2026-11-25T16:43:09Z [info     ] [DAG TEST] starting task_id=make_shards map_index=1 [airflow.sdk.definitions.dag]
2026-11-25T16:43:09Z [info     ] Task started [airflow.api_fastapi.execution_api.routes.task_instances] ti_id=1
make-shards: 2 input file(s)\rmake-shards: reading 50%\rmake-shards: reading 100%
2026-11-25T16:43:09Z [error    ] XCom not found                 [airflow.sdk.api.client] dag_id=bert_pretraining \
detail={'reason': 'not_found'} key=return_value loc=client.py:677 offset=4 status_code=404 task_id=segment
2026-11-25T16:43:09Z [error    ] Task failed with exception     [task] loc=task_runner.py:1639
Traceback (most recent call last):
  File "/site-packages/airflow/sdk/execution_time/task_runner.py", line 1579, in _run_task_and_map_outcome
    result = _execute_task(context=context, ti=ti, log=log)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/repo/bert_core/data/make_shards.py", line 9, in make_shards
    raise BertPipelineError("vocab.txt: no such file")
bert_core.errors.BertPipelineError: vocab.txt: no such file
2026-11-25T16:43:09Z [info     ] ::endgroup::                   [task] loc=task_runner.py:2379
2026-11-25T16:43:09Z [info     ] [DAG TEST] end task task_id=make_shards map_index=1 [airflow.sdk.definitions.dag]
2026-11-25T16:43:10Z [info     ] [DAG TEST] starting task_id=summary map_index=-1 [airflow.sdk.definitions.dag]
"""


def test_a_failed_tasks_log_tail_is_its_last_try_with_tracebacks_shortened(tmp_path):
    log_path = tmp_path / "run.log"
    log_path.write_text(LOG)
    assert task_log_tail(log_path, "make_shards", 1) == [
        "make-shards: reading 100%",
        "2026-11-25T16:43:09Z [error    ] Task failed with exception     [task] loc=task_runner.py:1639",
        "Traceback: 2 frame(s) (all in the log), the last:",
        '  File "/repo/bert_core/data/make_shards.py", line 9, in make_shards',
        '    raise BertPipelineError("vocab.txt: no such file")',
        "bert_core.errors.BertPipelineError: vocab.txt: no such file"]
    # Left out too: Airflow's client logging the 404 that ends its walk over a mapped task's outputs.
    # A task whose part of the log is not found: the log's end (Airflow's own bookkeeping lines left out).
    assert task_log_tail(log_path, "never_started", None, lines=1) == [
        "bert_core.errors.BertPipelineError: vocab.txt: no such file"]


def test_a_verdict_re_raised_by_bert_task_is_shown_once(tmp_path):
    """@bert_task re-raises a BertPipelineError as Airflow's AirflowFailException (no retries) with its message:
    the excerpt shows the message once, where it was raised; another chained error stays."""
    log_path = tmp_path / "run.log"
    log_path.write_text("\n".join([
        "starting task_id=plan map_index=-1",
        "Traceback (most recent call last):",
        '  File "/repo/operators/params.py", line 189, in check_conf_keys',
        "    raise BertPipelineError(msg)",
        "bert_core.errors.BertPipelineError: conf: unknown param(s) num_step (did you mean num_steps?)",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/repo/operators/airflow_tasks.py", line 130, in run',
        "    raise AirflowFailException(str(exc)) from exc",
        "airflow.sdk.exceptions.AirflowFailException: conf: unknown param(s) num_step (did you mean num_steps?)",
        "During handling of the above exception, another exception occurred:",
        "Traceback (most recent call last):",
        '  File "/repo/x.py", line 1, in f',
        "OSError: disk full",
        "end task task_id=plan map_index=-1", ""]))
    tail = task_log_tail(log_path, "plan", None)
    assert [line for line in tail if "num_step" in line] == [
        "bert_core.errors.BertPipelineError: conf: unknown param(s) num_step (did you mean num_steps?)"]
    assert tail[-2:] == ['  File "/repo/x.py", line 1, in f', "OSError: disk full"]
    assert "During handling of the above exception, another exception occurred:" in tail


def test_conf_flags_and_run_directory(tmp_path):
    conf_file = tmp_path / "conf.json"
    conf_file.write_text('{"num_steps": 10,\n "lr": 1e-3}\n')
    assert conf_from('{"lr": 2e-3}', str(conf_file)) == {"num_steps": 10, "lr": 2e-3}  # --conf wins
    conf_file.write_text('{"num_steps": 10,\n "lr": }\n')
    with pytest.raises(BertPipelineError, match=rf"--conf-file {conf_file}: not JSON: line 2 column 8"):
        conf_from(None, str(conf_file))
    with pytest.raises(BertPipelineError, match="--conf: expected a JSON object of DAG params"):
        conf_from("[1, 2]")
    with pytest.raises(BertPipelineError, match="--conf-file .*missing.json: No such file"):
        conf_from(None, str(tmp_path / "missing.json"))
    assert run_dir_for(tmp_path, "bert_demo", {"work_dir": str(tmp_path / "w")}, "T") == tmp_path / "w"
    assert run_dir_for(tmp_path, "bert_demo", {"work_dir": "s3://b/w"}, "T") == tmp_path / "runs" / "bert_demo" / "T"
    assert run_dir_for(tmp_path, "bert_finetune", {}, "T") == tmp_path / "runs" / "bert_finetune" / "T"
