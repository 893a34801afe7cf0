"""`bert-pipeline stack up|down|status`: the local services the DAGs talk to, as background processes.

- MLflow tracking server: sqlite store $BERT_PIPELINE_HOME/mlflow.db (the same file the embedded mode and
  `bert-pipeline demo` write), artifacts proxied by the server into $BERT_PIPELINE_HOME/mlartifacts.
- Ray head node with its dashboard, which serves the Job Submission API behind `ray job submit`.
- Airflow (`airflow standalone`): AIRFLOW_HOME=$BERT_PIPELINE_HOME/airflow, DAGs folder = the `pipelines`
  package; its tasks get MLFLOW_TRACKING_URI (this MLflow) and RAY_ADDRESS (this Ray head, GCS form).

Each service runs in a session (process group) of its own; pids, ports and log files are recorded in
$BERT_PIPELINE_HOME/stack/state.json, so `status` and `down` work from any shell. This module only starts
processes and talks HTTP to them: it imports neither airflow, mlflow nor ray (their CLIs do the work).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError

SERVICES = ("mlflow", "ray", "airflow")  # start order; `down` stops in reverse
DEFAULT_PORTS = {"mlflow": 5000, "airflow": 8080, "ray_dashboard": 8265, "ray_gcs": 6379}
PORT_FLAGS = {"mlflow": "--mlflow-port", "airflow": "--airflow-port", "ray_dashboard": "--ray-dashboard-port",
              "ray_gcs": "--ray-port"}
# What `airflow standalone` writes the generated admin password to (SimpleAuthManager, Airflow 3).
AIRFLOW_PASSWORD_FILE = "simple_auth_manager_passwords.json.generated"
# Seconds between SIGTERM and SIGKILL in `down`. Airflow's scheduler and MLflow exit within a few seconds;
# Ray's head within ~3 s when it is stopped leader first (below).
STOP_GRACE_S = {"airflow": 30.0, "mlflow": 15.0, "ray": 8.0}
# Services whose main process stops its own children in order when it gets SIGTERM: it is signalled alone first,
# and the rest only if it is not done within LEADER_GRACE_S. `ray start --block` stops its head this way in ~3 s;
# signalled together with it, Ray's GCS and the `ray start` process itself hang on until SIGKILL (8.4 s against
# 2.6 s, measured, Ray 2.60).
LEADER_FIRST = frozenset({"ray"})
LEADER_GRACE_S = 6.0
RAY_WORKER_PORTS = (10002, 19999)  # `ray start`'s default --min-worker-port/--max-worker-port


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 1-65535")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "down", "status"),
                        help="up: start whatever is not running and wait until healthy; down: stop everything "
                             "`up` started; status: show each service, exit 1 when one is down or unhealthy")
    parser.add_argument("--home", metavar="DIR",
                        help="home of the stack's data (mlflow.db, mlartifacts/, airflow/) and of its state and "
                             "logs (stack/) (default: $BERT_PIPELINE_HOME or ./.bert-pipeline)")
    parser.add_argument("--mlflow-port", type=_port, metavar="PORT",
                        help="MLflow tracking server port (up only; default 5000)")
    parser.add_argument("--airflow-port", type=_port, metavar="PORT",
                        help="Airflow UI / API server port (up only; default 8080)")
    parser.add_argument("--ray-dashboard-port", type=_port, metavar="PORT",
                        help="Ray dashboard and Job Submission API port (up only; default 8265)")
    parser.add_argument("--ray-port", type=_port, metavar="PORT",
                        help="Ray head's GCS port, the address Ray drivers connect to (up only; default 6379)")
    parser.add_argument("--ray-num-cpus", type=_count, default=None, metavar="N",
                        help="CPUs the Ray head offers to tasks and Ray Train workers (up only; default: the "
                             "machine's CPU count, at least 2 so the demo's 2 pretraining workers fit)")
    parser.add_argument("--airflow-parallelism", type=_count, default=None, metavar="N",
                        help="Airflow task instances running at once (up only; default: the machine's CPU count, "
                             "at least 2)")
    parser.add_argument("--timeout", type=_positive, default=300.0, metavar="SECONDS",
                        help="how long `up` waits for the services to answer their health checks (default 300)")


# --- processes -------------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, start time in clock ticks) from /proc, or None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def _reap(pid: int) -> None:
    # When this process spawned `pid` (tests call `up` and `down` in one process), its exit leaves a zombie
    # until waited for; not our child: nothing to do.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _alive(pid: int, started: int | None = None) -> bool:
    """Whether `pid` runs and, when `started` is known, is still the process recorded (not a reused pid)."""
    _reap(pid)
    if Path("/proc").is_dir():
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return started is None or stat[3] == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _family(pid: int) -> set[int]:
    """`pid`, its descendants and its process group. Snapshotted before any signal: children whose parent
    dies are re-parented to init and can no longer be found from `pid`; some (Ray's raylet workers, Airflow's
    task processes) may have left the group."""
    if not Path("/proc").is_dir():
        return {pid}
    children: dict[int, list[int]] = {}
    group = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(int(entry.name))
        if stat is None:
            continue
        children.setdefault(stat[1], []).append(int(entry.name))
        if stat[2] == pid:
            group.add(int(entry.name))
    tree, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree | group


def _signal(pids: set[int], pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_processes(targets: dict[str, tuple[int, int | None, float]],
                   leader_first: frozenset[str] = frozenset()) -> dict[str, float | None]:
    """Stop several processes at once: SIGTERM each one's descendants and group, SIGKILL what is left of it
    after its grace period. `targets`: name -> (pid, start time or None, grace seconds). Those named in
    `leader_first` get SIGTERM in their main process alone, and their descendants and group only once it has
    ended or LEADER_GRACE_S (at most the grace) has passed. Returns name -> seconds it took, or None for one that
    was not running."""
    start = time.monotonic()
    families = {name: _family(pid) for name, (pid, started, _) in targets.items() if _alive(pid, started)}
    waiting_for_leader = set()
    for name, family in families.items():
        pid = targets[name][0]
        if name in leader_first:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
            waiting_for_leader.add(name)
        else:
            _signal(family, pid, signal.SIGTERM)
    took: dict[str, float | None] = {name: None for name in targets}
    killed: set[str] = set()
    while families:
        now = time.monotonic()
        for name, family in list(families.items()):
            pid, _, grace = targets[name]
            if name in waiting_for_leader and (not _alive(pid) or now - start > min(LEADER_GRACE_S, grace)):
                # What the main process left behind (or all of it, if it did not stop in time).
                _signal({p for p in family if _alive(p)}, pid, signal.SIGTERM)
                waiting_for_leader.discard(name)
            if not any(_alive(p) for p in family):
                took[name] = now - start
                del families[name]
            elif now - start > grace and name not in killed:
                # Processes started meanwhile (e.g. a worker respawned during shutdown) are in the group.
                _signal({p for p in family | _family(pid) if _alive(p)}, pid, signal.SIGKILL)
                killed.add(name)
            elif now - start > grace + 10:
                raise BertPipelineError(f"{name}: processes {sorted(p for p in family if _alive(p))} survive "
                                        "SIGKILL; stop them by hand")
        time.sleep(0.2)
    return took


def stop_process(pid: int, started: int | None, grace: float, leader_first: bool = False) -> bool:
    """One process with its descendants and group (see stop_processes); False when it was not running."""
    names = frozenset({"process"}) if leader_first else frozenset()
    return stop_processes({"process": (pid, started, grace)}, names)["process"] is not None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers bind: connections of a stopped server in TIME_WAIT do not make the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- health checks ---------------------------------------------------------------------------------------


def _get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback http only
            return response.status, response.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(4096).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def check_health(name: str, record: dict[str, Any]) -> tuple[bool, str]:
    """(healthy, short reason) from the service's own health endpoint."""
    status, body = _get(record["health_url"])
    if status != 200:
        return False, f"{record['health_url']}: " + (f"HTTP {status}" if status else body)
    if name != "airflow":
        return True, "ok"
    # Airflow answers 200 while a component is still starting: every component must report healthy.
    try:
        components = json.loads(body)
        bad = [f"{part} {info.get('status')}" for part, info in components.items()
               if isinstance(info, dict) and info.get("status") != "healthy"]
    except (ValueError, AttributeError):
        return False, f"{record['health_url']}: not JSON"
    missing = {"metadatabase", "scheduler", "dag_processor", "triggerer"} - set(components)
    bad += [f"{part} missing" for part in sorted(missing)]
    return (False, ", ".join(bad)) if bad else (True, "ok")


# --- the stack -------------------------------------------------------------------------------------------


@dataclass
class Stack:
    home: Path
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.home / "stack"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    def load(self) -> Stack:
        if self.state_file.is_file():
            try:
                self.state = json.loads(self.state_file.read_text())
            except ValueError as exc:
                raise BertPipelineError(f"{self.state_file}: unreadable stack state ({exc}); stop leftover "
                                        "processes by hand and delete the file") from None
        self.state.setdefault("services", {})
        return self

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        os.replace(tmp, self.state_file)

    @contextlib.contextmanager
    def locked(self):
        """One `up`/`down` at a time per home: two concurrent `up`s would both find the ports free."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BertPipelineError(f"another `bert-pipeline stack` command is working on {self.home}; "
                                        "wait for it to finish") from None
            yield

    def running(self) -> dict[str, dict[str, Any]]:
        return {name: record for name, record in self.state["services"].items()
                if _alive(record["pid"], record.get("started"))}


def stack_home(arg: str | None) -> Path:
    return Path(arg or os.environ.get("BERT_PIPELINE_HOME") or Path.cwd() / ".bert-pipeline").absolute()


def _executable(name: str) -> str:
    # The CLIs of this interpreter's environment: the venv's bin directory need not be on PATH.
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise BertPipelineError(f"`{name}` not found next to {sys.executable}: install the project with "
                                "`pip install -e .` in this environment")
    return str(path)


def _ray_temp_dir(home: Path) -> Path:
    # Ray puts Unix sockets under its temp dir and socket paths are limited to 107 bytes: a home deep in a
    # temp directory would be too long, so a short per-home directory under the system temp dir. Its own
    # directory (not /tmp/ray) also keeps a bare `ray.init()` elsewhere from finding and joining this head.
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"bert-ray-{digest}"


def _base_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    # `airflow standalone` starts its components as `airflow ...` from PATH (FACTS.md).
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["BERT_PIPELINE_HOME"] = str(home)
    env["RAY_AUTH_MODE"] = "disabled"  # loopback-only head; clients must use the same mode (see conftest)
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the log files as they happen
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    return env


def plan(home: Path, ports: dict[str, int], ray_num_cpus: int, airflow_parallelism: int) -> dict[str, dict]:
    """Command, environment, URLs and log file of each service."""
    from bert_pipeline.commands.demo import pipelines_dir

    logs = home / "stack"
    mlflow_url = f"http://127.0.0.1:{ports['mlflow']}"
    dashboard_url = f"http://127.0.0.1:{ports['ray_dashboard']}"
    gcs = f"127.0.0.1:{ports['ray_gcs']}"
    airflow_url = f"http://127.0.0.1:{ports['airflow']}"
    base = _base_env(home)
    ray_tmp = _ray_temp_dir(home)

    # The server's job runner (seven huey consumers, ~200 MB each) only serves GenAI features this
    # pipeline does not use.
    mlflow_env = {**base, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    airflow_env = dict(base)
    airflow_env.update({
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(pipelines_dir()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # The LocalExecutor forks `parallelism` workers up front (default 32, ~130 MB each).
        "AIRFLOW__CORE__PARALLELISM": str(airflow_parallelism),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(ports["airflow"]),
        # Task processes reach the execution API at {base_url}/execution/; the default assumes port 8080.
        "AIRFLOW__API__BASE_URL": airflow_url,
        # A task's calls to the execution API time out after 5 s by default, and a retry of a call that did go
        # through fails the task ("already running"): on a busy 2-core machine the sqlite-backed API server can
        # take longer than that.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": os.environ.get("AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT", "60"),
        "MLFLOW_TRACKING_URI": mlflow_url,
        # GCS form: a task connects to this head as a Ray driver. The dashboard (Job Submission API) address
        # is there for operators and people that submit jobs instead.
        "RAY_ADDRESS": gcs,
        "RAY_DASHBOARD_URL": dashboard_url,
    })
    return {
        "mlflow": {
            "command": [_executable("mlflow"), "server",
                        "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
                        "--serve-artifacts", "--artifacts-destination", str(home / "mlartifacts"),
                        "--host", "127.0.0.1", "--port", str(ports["mlflow"]),
                        # One worker process: a local server for one person; each worker costs ~300 MB.
                        "--workers", "1"],
            "env": mlflow_env, "url": mlflow_url, "health_url": f"{mlflow_url}/health",
            "log": str(logs / "mlflow.log"),
        },
        "ray": {
            "command": [_executable("ray"), "start", "--head", "--block",
                        "--node-ip-address", "127.0.0.1", "--port", str(ports["ray_gcs"]),
                        "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                        "--dashboard-port", str(ports["ray_dashboard"]),
                        # Ray's other fixed default ports (client server 10001, dashboard agent 52365) would
                        # clash with a second head or a local ray.init() on this machine: free ones instead.
                        "--ray-client-server-port", str(free_port()),
                        "--dashboard-agent-listen-port", str(free_port()),
                        "--num-cpus", str(ray_num_cpus), "--temp-dir", str(ray_tmp), "--disable-usage-stats"],
            "env": base, "url": dashboard_url, "health_url": f"{dashboard_url}/api/gcs_healthz",
            "log": str(logs / "ray.log"), "address": gcs, "temp_dir": str(ray_tmp),
        },
        "airflow": {
            "command": [_executable("airflow"), "standalone"],
            "env": airflow_env, "url": airflow_url, "health_url": f"{airflow_url}/api/v2/monitor/health",
            "log": str(logs / "airflow.log"),
            "password_file": str(home / "airflow" / AIRFLOW_PASSWORD_FILE),
        },
    }


def _start(home: Path, spec: dict[str, Any]) -> tuple[subprocess.Popen, dict[str, Any]]:
    log = Path(spec["log"])
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        handle.write(f"\n===== {stamp} bert-pipeline stack up: {' '.join(spec['command'])}\n".encode())
        handle.flush()
        # A new session per service: `down` signals the whole group, and a Ctrl-C in the shell that ran
        # `up` does not reach the services.
        proc = subprocess.Popen(spec["command"], stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                env=spec["env"], cwd=home, start_new_session=True)
    stat = _proc_stat(proc.pid)
    record = {key: value for key, value in spec.items() if key not in ("env", "command")}
    record.update(pid=proc.pid, started=stat[3] if stat else None, command=spec["command"])
    return proc, record


def _wait_healthy(started: dict[str, tuple[subprocess.Popen, dict[str, Any]]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = dict(started)
    reasons: dict[str, str] = {}
    while waiting:
        for name, (proc, record) in list(waiting.items()):
            code = proc.poll()
            if code is not None:
                raise BertPipelineError(f"{name} exited with code {code} before it became healthy; read "
                                        f"{record['log']}" + _ray_logs_hint(name, record))
            healthy, reasons[name] = check_health(name, record)
            if healthy:
                print(f"  {name:8} healthy at {record['url']}", flush=True)
                del waiting[name]
        if waiting and time.monotonic() > deadline:
            name = next(iter(waiting))
            raise BertPipelineError(f"{name} not healthy after {timeout:.0f} s ({reasons[name]}); read "
                                    f"{waiting[name][1]['log']}" + _ray_logs_hint(name, waiting[name][1]))
        time.sleep(1.0)


def _ray_logs_hint(name: str, record: dict[str, Any]) -> str:
    return f" and the Ray logs in {record['temp_dir']}/session_latest/logs" if name == "ray" else ""


def _stop_all(stack: Stack, names: list[str]) -> dict[str, float | None]:
    """Stop the named services together and forget them; name -> seconds it took (None: was not running)."""
    services = stack.state["services"]
    took = stop_processes({name: (services[name]["pid"], services[name].get("started"), STOP_GRACE_S[name])
                           for name in names if name in services}, LEADER_FIRST)
    for name in took:
        del services[name]
    stack.save()
    return took


def up(stack: Stack, ports: dict[str, int], given: dict[str, int], ray_num_cpus: int, airflow_parallelism: int,
       timeout: float) -> int:
    """Start the services that are not running; `given` holds the ports named on the command line."""
    running = stack.running()
    if running:
        # Ports are those of the services already up: a half-up stack is completed with the same addresses.
        ports = stack.state["ports"]
        changed = [f"{PORT_FLAGS[key]} {port}" for key, port in given.items() if port != ports[key]]
        if changed:
            print(f"note: the stack is already up with its earlier ports; ignoring {', '.join(changed)} "
                  "(`bert-pipeline stack down` first to change them)")
    specs = plan(stack.home, ports, ray_num_cpus, airflow_parallelism)
    healthy = {}
    for name in running:
        ok, reason = check_health(name, stack.state["services"][name])
        healthy[name] = ok
        print(f"  {name:8} already running (pid {running[name]['pid']}), "
              + ("healthy" if ok else f"NOT healthy: {reason}"))
    to_start = [name for name in SERVICES if name not in running]
    if not to_start:
        print_urls(stack)
        if not all(healthy.values()):
            raise BertPipelineError("the stack is up but not healthy: see `bert-pipeline stack status` and the "
                                    f"logs in {stack.dir}, or restart it (`stack down`, then `stack up`)")
        return 0

    port_keys = {"mlflow": ["mlflow"], "ray": ["ray_gcs", "ray_dashboard"], "airflow": ["airflow"]}
    for name in to_start:
        for key in port_keys[name]:
            if not _port_free(ports[key]):
                raise BertPipelineError(f"port {ports[key]} (for {name}) is in use by another program: "
                                        f"choose another with {PORT_FLAGS[key]}")
    stack.state["ports"] = ports
    stack.state["home"] = str(stack.home)
    started: dict[str, tuple[subprocess.Popen, dict[str, Any]]] = {}
    try:
        # Airflow last: its start-up (migrations, four components) saturates a 2-core machine, and `ray start`
        # gives up when its raylet has not registered with the GCS within 30 s.
        for phase in (("mlflow", "ray"), ("airflow",)):
            batch = {}
            for name in (name for name in phase if name in to_start):
                print(f"  {name:8} starting (log: {specs[name]['log']})", flush=True)
                batch[name] = started[name] = _start(stack.home, specs[name])
                stack.state["services"][name] = started[name][1]
                stack.save()
            _wait_healthy(batch, timeout)
    except BaseException:
        # All or nothing: what this `up` started is stopped again, so a failed `up` leaves no half stack.
        _stop_all(stack, list(started))
        raise
    print_urls(stack)
    return 0


def print_urls(stack: Stack) -> None:
    services = stack.state["services"]
    mlflow, ray, airflow = (services.get(name) for name in SERVICES)
    lines = [""]
    if mlflow:
        lines.append(f"MLflow   {mlflow['url']}   (store sqlite:///{stack.home / 'mlflow.db'}, artifacts "
                     f"{stack.home / 'mlartifacts'})")
    if ray:
        lines.append(f"Ray      dashboard {ray['url']}   GCS {ray['address']}   "
                     f"(ray job submit --address {ray['url']} -- python ...)")
    if airflow:
        lines.append(f"Airflow  {airflow['url']}   user admin, password in {airflow['password_file']}")
    lines.append(f"Logs in {stack.dir}; stop with `bert-pipeline stack down"
                 + ("" if stack.home == stack_home(None) else f" --home {stack.home}") + "`")
    if mlflow and ray:
        lines.append(f"From a shell: export MLFLOW_TRACKING_URI={mlflow['url']} RAY_ADDRESS={ray['address']} "
                     "RAY_AUTH_MODE=disabled")
    print("\n".join(lines))


def down(stack: Stack) -> int:
    services = stack.state["services"]
    if not services:
        print(f"stack is not running (no services recorded in {stack.state_file})")
        return 0
    names = [name for name in reversed(SERVICES) if name in services]
    for name in names:
        print(f"  {name:8} stopping (pid {services[name]['pid']})", flush=True)
    # All at once: each takes seconds to shut down cleanly (Airflow's scheduler ~15 s on 2 cores).
    for name, took in _stop_all(stack, names).items():
        print(f"  {name:8} " + ("was not running" if took is None else f"stopped ({took:.1f} s)"), flush=True)
    return 0


def status(stack: Stack) -> int:
    services = stack.state["services"]
    if not services:
        print(f"stack is not running (no services recorded in {stack.state_file}); start it with "
              "`bert-pipeline stack up`")
        return 1
    all_ok = True
    for name in SERVICES:
        record = services.get(name)
        if record is None:
            print(f"{name:8} not started")
            all_ok = False
            continue
        if not _alive(record["pid"], record.get("started")):
            print(f"{name:8} DOWN      (pid {record['pid']} gone; log: {record['log']})")
            all_ok = False
            continue
        ok, reason = check_health(name, record)
        all_ok &= ok
        extra = f"  GCS {record['address']}" if name == "ray" else ""
        print(f"{name:8} pid {record['pid']:<7} {record['url']}{extra}  "
              + ("healthy" if ok else f"UNHEALTHY: {reason} (log: {record['log']})"))
    if "airflow" in services:
        print(f"Airflow login: admin, password in {services['airflow']['password_file']}")
    return 0 if all_ok else 1


def run(args: argparse.Namespace) -> int:
    stack = Stack(stack_home(args.home))
    if args.action == "status":
        return status(stack.load())
    given = {"mlflow": args.mlflow_port, "airflow": args.airflow_port, "ray_dashboard": args.ray_dashboard_port,
             "ray_gcs": args.ray_port}
    given = {key: port for key, port in given.items() if port is not None}
    ports = {**DEFAULT_PORTS, **given}
    if args.action == "up":
        clashes = {port for port in ports.values() if list(ports.values()).count(port) > 1}
        if clashes:
            raise BertPipelineError(f"two services cannot share port {min(clashes)}: give each its own port")
        for key in ("ray_gcs", "ray_dashboard"):
            if RAY_WORKER_PORTS[0] <= ports[key] <= RAY_WORKER_PORTS[1]:
                raise BertPipelineError(f"{PORT_FLAGS[key]} {ports[key]}: Ray keeps ports {RAY_WORKER_PORTS[0]}-"
                                        f"{RAY_WORKER_PORTS[1]} for its workers; choose a port outside them")
    with stack.locked():
        stack.load()
        if args.action == "down":
            return down(stack)
        cpus = max(2, os.cpu_count() or 1)
        return up(stack, ports, given, args.ray_num_cpus or cpus, args.airflow_parallelism or cpus, args.timeout)
