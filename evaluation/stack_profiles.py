"""The same DAG runs on the two stack profiles: `bert-pipeline stack up` (SQLite, `airflow standalone`, local files)
against `bert-pipeline stack up --profile production` (PostgreSQL, Redis, CeleryExecutor with two workers that
share no directory, MLflow artifacts and the run's work dir on S3), one after the other on this machine.

    python -m evaluation.stack_profiles --out-json bench-results/stack_profiles.json

Per profile: the time `stack up` takes; each DAG run's wall time from the REST API's trigger to its success (the
same conf on both, apart from the work dir: a local directory, or an s3:// prefix for production); and the stack's
memory: the sums of RSS and of PSS (shared pages split among the processes sharing them) over every process of
the stack (each service's process, its descendants and its process group: Airflow's task processes, Ray's
workers, PostgreSQL's backends...), sampled every second, idle after `up` and at their peaks during the runs. Both stacks run their own Ray head with the same CPUs, so Ray's share is the same.

S3 for the production profile: AWS_ENDPOINT_URL and credentials from the environment, or, when AWS_ENDPOINT_URL is
unset, the moto server on loopback (`moto[server]`, the test extra) started here. The runs use the bundled demo
data, tiny models and few steps: the figures compare the orchestration, not the training. The machine's load
changes them: run it on a quiet machine and say when it was not.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bert_core.launch.ports import free_ports
from evaluation.airflow_rest import AirflowApi

PROFILES = ("default", "production")
BUCKET = "bert-stack-bench"
# The runs: bert_pretraining (make-shards mapped over the two demo files, two Ray Train workers, a tiny model) and
# bert_finetune of its default model, MiniLM (two tasks at once, one with a search of two trials), as
# tests/test_production_stack.py runs them. `work_dir` is added per profile.
RUNS = (
    ("bert_pretraining", {"model": "bert_2_64_2", "max_seq_length": 64, "dupe_factor": 1, "batch_size": 8,
                          "num_steps": 20, "num_workers": 2, "ckpt_interval": 10}),
    ("bert_finetune", {"tasks": {"sst-2": "", "squad": ""}, "preset": "gluonnlp",
                       "search": {"sst-2": {"lr": [1e-4, 2e-5]}},
                       "overrides": {"sst-2": {"epochs": 1, "max_seq_length": 32},
                                     "squad": {"epochs": 1, "batch_size": 8, "max_seq_length": 64,
                                               "doc_stride": 32}}}),
)


def stack_processes(home: Path) -> list[int]:
    """Every process of the stack: each recorded service's process, its descendants and its process group (one
    pass over the machine's processes)."""
    import psutil

    state = json.loads((home / "stack" / "state.json").read_text())
    roots = {record["pid"] for record in state["services"].values()}
    children: dict[int, list[int]] = {}
    pids: set[int] = set()
    for proc in psutil.process_iter(["pid", "ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc.info["pid"])
        with contextlib.suppress(OSError):
            if os.getpgid(proc.info["pid"]) in roots:
                pids.add(proc.info["pid"])
    seen: set[int] = set()
    todo = [pid for pid in roots if psutil.pid_exists(pid)]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return sorted(pids | seen)


def memory_mb(pids: list[int]) -> tuple[float, float]:
    """(RSS sum, PSS sum) of the processes in MB. The RSS sum counts a page shared by several processes (forked
    workers, the same libraries) once per process; PSS splits it among them, so its sum is what the processes
    take together (reading it needs the processes' smaps: root or their owner)."""
    import psutil

    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            info = psutil.Process(pid).memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return rss / 2**20, pss / 2**20


class MemorySampler:
    """The stack's RSS and PSS sums every `interval` seconds in a thread; the peak of each."""

    def __init__(self, home: Path, interval: float = 1.0):
        self.home, self.interval = home, interval
        self.peak_rss = self.peak_pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, pss = memory_mb(stack_processes(self.home))
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def s3_endpoint() -> Iterator[dict[str, str]]:
    """The S3 settings of the production profile: the environment's, or a moto server started in this process
    for the run (its memory is not the stack's)."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        yield {}
        return
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise SystemExit("no S3: set AWS_ENDPOINT_URL and credentials of an S3 server, or install moto[server] "
                         "(pip install -e '.[test]')") from None
    # Its HTTP server (werkzeug) logs every request at INFO: the objects the stacks' tasks write were 473 of the
    # benchmark's 500 lines.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "bench",
               "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    finally:
        server.stop()


def stack_cli(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "stack", *args, "--home", str(home)], env=env,
                          capture_output=True, text=True, timeout=900)


def run_profile(profile: str, root: Path, s3: dict[str, str]) -> dict:
    home = root / profile
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "MLFLOW_")) and k not in ("RAY_ADDRESS", "BERT_PIPELINE_HOME")}
    mlflow, airflow, gcs, dashboard, postgres, redis = free_ports(6)
    flags = ["--mlflow-port", str(mlflow), "--airflow-port", str(airflow), "--ray-port", str(gcs),
             "--ray-dashboard-port", str(dashboard), "--ray-num-cpus", "2"]
    work = str(home / "runs")
    if profile == "production":
        env.update(s3)
        import boto3

        s3_client = boto3.client("s3", endpoint_url=env.get("AWS_ENDPOINT_URL"),
                                 aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                                 aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                                 region_name=env.get("AWS_DEFAULT_REGION"))
        with contextlib.suppress(s3_client.exceptions.BucketAlreadyOwnedByYou):
            s3_client.create_bucket(Bucket=BUCKET)
        flags += ["--profile", "production", "--postgres-port", str(postgres), "--redis-port", str(redis),
                  "--artifacts-destination", f"s3://{BUCKET}/mlflow"]
        work = f"s3://{BUCKET}/runs"
    result: dict = {"profile": profile}
    began = time.monotonic()
    up = stack_cli(home, env, "up", *flags)
    result["up_s"] = round(time.monotonic() - began, 1)
    try:
        if up.returncode != 0:
            raise RuntimeError(f"{profile}: stack up failed:\n{up.stdout}\n{up.stderr}")
        password = json.loads((home / "airflow" / "simple_auth_manager_passwords.json.generated").read_text())
        url = next(r["url"] for r in json.loads((home / "stack" / "state.json").read_text())["services"].values()
                   if "password_file" in r)
        api = AirflowApi(url, "admin", password["admin"])
        api.wait_for_dags([dag for dag, _ in RUNS])
        time.sleep(10)  # let the start-up settle before the idle figure
        result["idle_rss_mb"], result["idle_pss_mb"] = map(round, memory_mb(stack_processes(home)))
        result["runs"] = {}
        with MemorySampler(home) as sampler:
            for dag, conf in RUNS:
                began = time.monotonic()
                run_id = api.trigger(dag, {**conf, "work_dir": f"{work}/{dag}"})
                run = api.wait_for_run(dag, run_id, timeout=1800)
                took = round(time.monotonic() - began, 1)
                if run["state"] != "success":
                    raise RuntimeError(f"{profile}: {dag} {run['state']}\n{api.failed_tasks(dag, run_id)}")
                result["runs"][dag] = took
                print(f"  {profile:10} {dag:18} {took:6.1f} s", flush=True)
        result["peak_rss_mb"], result["peak_pss_mb"] = round(sampler.peak_rss), round(sampler.peak_pss)
    finally:
        state = home / "stack" / "state.json"
        services = json.loads(state.read_text())["services"] if state.is_file() else {}
        down = stack_cli(home, env, "down")
        if down.returncode != 0:
            print(f"{profile}: stack down failed:\n{down.stdout}\n{down.stderr}", file=sys.stderr)
        # Run as root, PostgreSQL's data directory is under the postgres user's home, outside the stack's.
        data = services.get("postgres", {}).get("data_dir")
        if data and down.returncode == 0 and not Path(data).is_relative_to(home):
            shutil.rmtree(Path(data).parent, ignore_errors=True)
        ray_tmp = services.get("ray", {}).get("temp_dir")
        if ray_tmp and down.returncode == 0:
            shutil.rmtree(ray_tmp, ignore_errors=True)
    return result


def markdown(results: list[dict], meta: dict) -> str:
    by = {r["profile"]: r for r in results}
    lines = [f"Machine: {meta['machine']}; {meta['date']}; load average before: {meta['load_before']}.", "",
             "| | default (SQLite, standalone) | production (PostgreSQL, Celery x2, S3) | production / default |",
             "| --- | --- | --- | --- |"]

    def row(name: str, a: float, b: float, unit: str) -> None:
        lines.append(f"| {name} | {a:g} {unit} | {b:g} {unit} | {b / a:.2f}x |")

    row("`stack up`", by["default"]["up_s"], by["production"]["up_s"], "s")
    for dag, _ in RUNS:
        row(f"{dag} run", by["default"]["runs"][dag], by["production"]["runs"][dag], "s")
    for kind in ("rss", "pss"):
        row(f"stack memory idle ({kind.upper()} sum)", by["default"][f"idle_{kind}_mb"],
            by["production"][f"idle_{kind}_mb"], "MB")
        row(f"stack memory, peak during the runs ({kind.upper()} sum)", by["default"][f"peak_{kind}_mb"],
            by["production"][f"peak_{kind}_mb"], "MB")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m evaluation.stack_profiles", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated, in this order (default: "
                        "default,production)")
    parser.add_argument("--out-json", type=Path, help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the stacks' homes (logs) in the temp dir")
    args = parser.parse_args()
    meta = {"machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}",
            "date": dt.datetime.now().astimezone().isoformat(timespec="minutes"),
            "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    root = Path(tempfile.mkdtemp(prefix="bert-stack-bench-"))
    results = []
    try:
        with s3_endpoint() as s3:
            for profile in args.profiles.split(","):
                results.append(run_profile(profile, root, s3))
                if args.out_json:  # each profile's figures as soon as they are measured
                    args.out_json.parent.mkdir(parents=True, exist_ok=True)
                    args.out_json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    meta["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    report = {"meta": meta, "results": results}
    print(json.dumps(report, indent=2))
    if {r["profile"] for r in results} == set(PROFILES):
        print(markdown(results, meta))
    if args.out_json:
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
