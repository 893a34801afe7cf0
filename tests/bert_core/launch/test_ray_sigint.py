"""Ctrl-C during a Ray Train run aborts the Ray run and then reaches the process's own handler. Ray Train's fit()
installs a SIGINT handler that aborts the run gracefully and leaves it in place afterwards, so before, the CLI's
KeyboardInterrupt and `bert-pipeline run`'s stop of a whole DAG run never saw that Ctrl-C (the step failed, Airflow
retried it) nor any later one. A real one-worker run on a local Ray, whose worker sends the driver a SIGINT. (SIGTERM,
which aborts the Ray run the same way: tests/bert_pipeline/test_run_command.py, a whole `bert-pipeline run`.)"""

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
        os.kill(config["driver"], config["signal"])
        time.sleep(60)

    def own(signum, frame):
        print("own handler:", signal.Signals(signum).name, flush=True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, own)
    signal.signal(signal.SIGTERM, own)
    connect(local_cpus=1)
    for sent in (signal.SIGINT,):
        started = time.monotonic()
        try:
            with ray_train._signals_passed_on():
                TorchTrainer(loop, train_loop_config={"driver": os.getpid(), "signal": sent},
                             scaling_config=ScalingConfig(num_workers=1),
                             run_config=RunConfig(storage_path=tempfile.mkdtemp())).fit()
            print("fit returned")
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - started:.0f} s")
        print("handlers back:", signal.getsignal(signal.SIGINT) is own is signal.getsignal(signal.SIGTERM),
              flush=True)
        # The Ray run was aborted, not left going: its worker (sleeping 60 s) gave back the one CPU it held.
        deadline = time.monotonic() + 20
        while ray.available_resources().get("CPU", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        print("workers left:", 1 - int(ray.available_resources().get("CPU", 0)), flush=True)
    ray.shutdown()
''')


def test_a_sigint_during_a_ray_train_run_aborts_it_and_reaches_the_drivers_own_handler(tmp_path):
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    runs = done.stdout.split("own handler: ")[1:]
    assert [run.split()[0] for run in runs] == ["SIGINT"], done.stdout + done.stderr[-3000:]
    for run in runs:
        assert "interrupted after" in run and "fit returned" not in run, done.stdout
        assert int(run.split("interrupted after ")[1].split()[0]) < 50  # not the worker's 60 s sleep
        assert "handlers back: True" in run and "workers left: 0" in run, done.stdout + done.stderr[-3000:]


BOUNDED = textwrap.dedent('''
    import os, signal, threading, time
    from bert_core.launch import ray_train

    ray_train.ABORT_WAIT_S = 1.0

    class Stopped(Exception):
        pass

    calls = []

    def own(signum, frame):
        calls.append(signal.Signals(signum).name)
        raise Stopped

    def fit(cluster_answers: bool):
        """What fit() does to signals: it puts in Ray Train's SIGINT handler (a closure counting the SIGINTs it
        took) whose graceful abort asks the run's controller, then waits for the run."""
        run_over = threading.Event()
        sigint_count = 0

        def sigint_handler(signum, frame):
            nonlocal sigint_count
            sigint_count += 1
            if cluster_answers:
                run_over.set()  # the controller aborted the run: fit() returns
            else:
                threading.Event().wait()  # a cluster whose processes the same SIGTERM ended: no answer, ever

        signal.signal(signal.SIGINT, sigint_handler)
        os.kill(os.getpid(), signal.SIGTERM)
        run_over.wait(30)

    signal.signal(signal.SIGINT, own)
    signal.signal(signal.SIGTERM, own)
    for cluster_answers in (False, True):
        calls.clear()
        started = time.monotonic()
        try:
            with ray_train._signals_passed_on():
                fit(cluster_answers)
            print("fit returned")
        except Stopped:
            print(f"stopped after {time.monotonic() - started:.1f} s")
        print("calls:", calls, "handlers back:", signal.getsignal(signal.SIGINT) is own is signal.getsignal(signal.SIGTERM),
              flush=True)
''')


def test_a_sigterm_waits_for_ray_trains_abort_a_bounded_time_then_reaches_the_drivers_own_handler(tmp_path):
    """A SIGTERM to the whole process group (`timeout`, a service manager's stop) ends the local Ray's own processes
    too, and Ray Train's abort then waited for a cluster that was gone: `bert-pipeline demo` under `kill -TERM -PGID`
    hung 60 s until Ray's GCS client ended the process, with no report and no record of the stop. Now the abort has
    ABORT_WAIT_S (here 1 s); then the signal reaches the driver's handler, once. Where the abort is answered, the
    signal reaches it once fit() has returned, also once, and no SIGINT is left over."""
    done = subprocess.run([sys.executable, "-c", BOUNDED], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith(("stopped", "fit", "calls"))]
    assert len(lines) == 4, done.stdout + done.stderr[-3000:]
    unanswered, answered = lines[:2], lines[2:]
    assert unanswered[0].startswith("stopped after") and float(unanswered[0].split()[2]) < 10, lines
    assert unanswered[1] == "calls: ['SIGTERM'] handlers back: True", lines
    assert answered[0].startswith("stopped after") and float(answered[0].split()[2]) < 10, lines
    assert answered[1] == "calls: ['SIGTERM'] handlers back: True", lines
    assert "did not confirm its abort within 1 s" in done.stderr, done.stderr[-3000:]
