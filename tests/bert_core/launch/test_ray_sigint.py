"""Ctrl-C during a Ray Train run reaches the process's own SIGINT handler. Ray Train's fit() installs a handler
that aborts the run gracefully and leaves it in place afterwards, so before, the CLI's KeyboardInterrupt and
`bert-pipeline run`'s stop of a whole DAG run never saw that Ctrl-C (the step failed, Airflow retried it) nor any
later one. A real one-worker run on a local Ray, whose worker sends the driver a SIGINT."""

import subprocess
import sys
import textwrap

RUN = textwrap.dedent('''
    import os, signal, tempfile, time
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from bert_core.launch import ray_train
    from bert_core.launch.ray_cluster import connect

    def loop(config):
        os.kill(config["driver"], signal.SIGINT)
        time.sleep(60)

    def own(signum, frame):
        print("own handler:", signal.Signals(signum).name, flush=True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, own)
    connect(local_cpus=1)
    started = time.monotonic()
    try:
        with ray_train._sigint_passed_on():
            TorchTrainer(loop, train_loop_config={"driver": os.getpid()}, scaling_config=ScalingConfig(num_workers=1),
                         run_config=RunConfig(storage_path=tempfile.mkdtemp())).fit()
        print("fit returned")
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - started:.0f} s")
    print("handler back:", signal.getsignal(signal.SIGINT) is own, flush=True)
    ray.shutdown()
''')


def test_a_sigint_ray_train_took_reaches_the_drivers_own_handler(tmp_path):
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    out = done.stdout
    assert "own handler: SIGINT" in out, out + done.stderr[-3000:]
    assert "interrupted after" in out and "fit returned" not in out, out
    assert int(out.split("interrupted after ")[1].split()[0]) < 50  # not the worker's 60 s sleep
    assert "handler back: True" in out, out
