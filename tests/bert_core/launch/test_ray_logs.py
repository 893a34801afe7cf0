"""Ray Train's per-report INFO line ("Reporting training result N: TrainingReport(... metrics={...}) from rank R",
one per rank per report) is not in a run's log; its checkpoint line is. A real one-worker Ray Train run on a local
Ray with the callbacks a step's run gets, its workers' lines read from the driver's stderr, where Ray forwards them
(the walk that found it: `ray job submit ... pretrain --num-workers 2`, two such lines beside each step line)."""

import subprocess
import sys
import textwrap

RUN = textwrap.dedent('''
    import os, tempfile
    import ray
    from ray.train import Checkpoint, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from bert_core.launch import ray_logs
    from bert_core.launch.ray_cluster import connect

    def loop(config):
        import ray.train
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "x"), "w").write("x")
            ray.train.report({"step": 50, "loss": 7.25}, checkpoint=Checkpoint.from_directory(d))

    connect(local_cpus=1)
    try:
        TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                     run_config=RunConfig(storage_path=tempfile.mkdtemp(), callbacks=ray_logs.callbacks())).fit()
        import time; time.sleep(3)  # Ray's log monitor forwards the workers' lines by polling
    finally:
        ray.shutdown()
''')


def test_a_run_logs_no_per_report_line():
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=240,
                          env={**__import__("os").environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                               "RAY_ADDRESS": ""})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Checkpoint successfully created" in out, out[-3000:]  # the worker's INFO lines do reach the driver
    assert "Reporting training result" not in out, out[-3000:]


def test_workers_get_mlflows_artifact_progress_bars_off_unless_the_driver_sets_them(monkeypatch):
    """Walked: rank 0's log_model at the end of `ray job submit ... pretrain` put eight carriage-return frames of
    `Downloading artifacts: 100%|...` into the job's log."""
    from bert_core.launch.ray_cluster import worker_env

    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    assert worker_env()["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")
    assert worker_env()["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "true"
