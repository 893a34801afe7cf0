"""`bert-pipeline stack` without the real services: flags, state handling, health checks and process stopping,
against throw-away processes (`sleep`) and a tiny HTTP server. The real stack is exercised by test_stack_ui.py."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError
from bert_core.launch.ports import free_ports
from bert_pipeline.cli import main
from bert_pipeline.stack import airflow as airflow_service
from bert_pipeline.stack import health, processes, ray_head
from bert_pipeline.stack.processes import StopTarget
from bert_pipeline.stack.state import DEFAULT_PORTS


def _sleeper(*, new_session: bool = True) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], start_new_session=new_session)


def _record(proc: subprocess.Popen, health_url: str, log: Path, **extra) -> dict:
    return {"pid": proc.pid, "started": processes.start_time(proc.pid), "url": health_url.rsplit("/", 1)[0], "health_url": health_url,
            "log": str(log), **extra}


def _write_state(home: Path, services: dict) -> Path:
    state = home / "stack" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"ports": dict(DEFAULT_PORTS), "services": services}))
    return state


def _gone(proc: subprocess.Popen, timeout: float = 10.0) -> bool:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.fixture()
def health_server():
    """A loopback HTTP server whose answers the test sets: {path: (status, body)}."""
    answers: dict[str, tuple[int, str]] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            status, body = answers.get(self.path, (404, "no such path"))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


def test_status_when_nothing_runs_exits_1(tmp_path, capsys):
    assert main(["stack", "status", "--home", str(tmp_path / "home")]) == 1
    out = capsys.readouterr().out
    assert "stack is not running" in out and "bert-pipeline stack up" in out


def test_down_when_nothing_runs_is_a_no_op_twice(tmp_path, capsys):
    for _ in range(2):
        assert main(["stack", "down", "--home", str(tmp_path)]) == 0
        assert "stack is not running" in capsys.readouterr().out
    assert not (tmp_path / "stack" / "state.json").exists()


def test_home_defaults_to_bert_pipeline_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "from-env"))
    assert main(["stack", "status"]) == 1
    assert str(tmp_path / "from-env" / "stack" / "state.json") in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--mlflow-port", "0"], "outside 1-65535"),
    (["--airflow-port", "http"], "not a port number"),
    (["--ray-num-cpus", "0"], "must be >= 1"),
    (["--airflow-parallelism", "two"], "not a whole number"),
    (["--timeout", "-5"], "must be > 0"),
])
def test_bad_flag_values_are_usage_errors(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["stack", "up", "--home", str(tmp_path / "home"), *flags])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "home").exists()


def test_unknown_action_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["stack", "restart", "--home", str(tmp_path)])
    assert exit_.value.code == 2
    assert "invalid choice: 'restart'" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--mlflow-port", "7000", "--airflow-port", "7000"], "two services cannot share port 7000"),
    (["--ray-port", "15000"], "--ray-port 15000: Ray keeps ports 10002-19999 for its workers"),
])
def test_conflicting_ports_are_refused_before_anything_starts(flags, message, tmp_path, capsys):
    assert main(["stack", "up", "--home", str(tmp_path / "home"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("flags, message", [
    (["--postgres-port", "7001"], "--postgres-port: not a port of --profile default"),
    (["--ray-address", "10.0.0.1:6379"], "--ray-address is a setting of --profile production"),
    (["--celery-workers", "3"], "--celery-workers is a setting of --profile production"),
    (["--worker-concurrency", "4"], "--worker-concurrency is a setting of --profile production"),
    (["--profile", "production", "--artifacts-destination", "s3://b/p", "--airflow-parallelism", "4"],
     "--airflow-parallelism is a setting of --profile default"),
    (["--profile", "production"], "--profile production keeps the MLflow server's artifacts in an object store: "
                                  "give --artifacts-destination s3://BUCKET/PREFIX"),
    (["--profile", "production", "--artifacts-destination", "/data/mlartifacts"],
     "--artifacts-destination /data/mlartifacts: expected an object store URI"),
    (["--profile", "production", "--artifacts-destination", "s3://b/p", "--ray-address", "http://head:8265"],
     "--ray-address http://head:8265: expected the GCS address HOST:PORT"),
    (["--profile", "production", "--artifacts-destination", "s3://b/p", "--ray-address",
      f"127.0.0.1:{free_ports()[0]}"], "no Ray head answers there (Connection refused); start the cluster first"),
    (["--profile", "production", "--artifacts-destination", "s3://b/p", "--redis-port", "7002", "--postgres-port",
      "7002"], "two services cannot share port 7002"),
])
def test_profile_settings_are_checked_before_anything_starts(flags, message, tmp_path, capsys):
    assert main(["stack", "up", "--home", str(tmp_path / "home"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "home").exists()


def test_production_names_missing_system_packages_and_how_to_install_them(tmp_path, monkeypatch, capsys):
    from bert_pipeline.stack import airflow_celery, postgres, redis

    monkeypatch.setattr(postgres, "bin_dir", lambda: None)
    monkeypatch.setattr(redis, "server", lambda: None)
    monkeypatch.setattr(airflow_celery, "PYTHON_PACKAGES", ("apache-airflow-providers-celery", "no-such-dist"))
    assert main(["stack", "up", "--profile", "production", "--home", str(tmp_path / "home"),
                 "--artifacts-destination", "s3://b/p"]) == 2
    err = capsys.readouterr().err
    assert "--profile production needs what this machine lacks (nothing was started)" in err
    assert "PostgreSQL server (initdb, postgres): apt-get install -y postgresql" in err
    assert "redis-server: apt-get install -y redis-server" in err
    assert "Python packages no-such-dist: pip install" in err
    assert "install with:\n  apt-get install -y postgresql\n  apt-get install -y redis-server\n  pip install" in err
    assert not (tmp_path / "home").exists()


def test_celery_workers_report_their_own_host_name(monkeypatch):
    from bert_pipeline.stack import worker_host

    monkeypatch.setenv(worker_host.ENV, "celery-worker-2")
    assert worker_host.hostname() == "celery-worker-2"
    monkeypatch.delenv(worker_host.ENV)
    assert worker_host.hostname() == socket.getfqdn()


def test_ray_heads_extra_ports_are_none_of_its_own_nor_in_the_worker_range(tmp_path, monkeypatch):
    # The OS hands out again a port a service was given but has not bound yet (CI: the dashboard agent got the
    # dashboard's port and `ray start` refused both). Replay such a sequence of OS choices.
    offered = iter([8265, 6379, 15000, 41001, 41001, 10002, 41002])

    class OneChoice:
        def __init__(self, *args):
            self.port = next(offered)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, address):
            pass

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr("bert_core.launch.ports.socket.socket", OneChoice)
    command = ray_head.spec(tmp_path, {"ray_dashboard": 8265, "ray_gcs": 6379, "mlflow": 5000}, num_cpus=2)["command"]
    assert command[command.index("--ray-client-server-port") + 1] == "41001"
    assert command[command.index("--dashboard-agent-listen-port") + 1] == "41002"


def test_port_in_use_is_named_and_nothing_starts(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # MLflow's port is checked first, whatever else on this machine uses the other default ports.
        assert main(["stack", "up", "--home", str(tmp_path), "--mlflow-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"port {port} (for mlflow) is in use by another program: choose another with --mlflow-port" in err
    assert not (tmp_path / "stack" / "state.json").exists()
    assert not list((tmp_path / "stack").glob("*.log"))


def _wait_for_file(path: Path, timeout: float = 20.0) -> str:
    """The content of `path` once a process has written it (written to a temp name and renamed into place)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written within {timeout} s"
        time.sleep(0.05)
    return path.read_text()


# Writes its pid to argv[1] once it has left its parent's process group (a session of its own).
SETSID = """
import os, sys, time
os.setsid()
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""


def test_stop_process_ends_the_tree_and_the_group(tmp_path):
    # A shell in its own session with a child in its group and a grandchild that left the group (setsid),
    # like Ray's and Airflow's workers can.
    in_group, left = tmp_path / "in-group", tmp_path / "left"
    script = (f"sleep 300 & echo $! > {in_group}.tmp && mv {in_group}.tmp {in_group}; "
              f"{sys.executable} -c '{SETSID}' {left} & wait")
    shell = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    children = [int(_wait_for_file(in_group)), int(_wait_for_file(left))]
    assert processes.proc_stat(children[0])[2] == shell.pid  # in the shell's group
    assert processes.proc_stat(children[1])[2] != shell.pid  # left it: found as a descendant only
    target = StopTarget(shell.pid, processes.start_time(shell.pid), grace_s=5)
    assert processes.stop_process(target) is True
    assert _gone(shell)
    assert not any(processes.alive(pid) for pid in children)
    assert processes.stop_process(target) is False  # already stopped


def test_status_reports_health_and_down_stops_and_forgets(tmp_path, health_server, capsys):
    url, answers = health_server
    answers["/health"] = (200, "OK")
    answers["/api/v2/monitor/health"] = (200, json.dumps({
        "metadatabase": {"status": "healthy"}, "scheduler": {"status": "unhealthy"},
        "triggerer": {"status": "healthy"}, "dag_processor": {"status": "healthy"}}))
    mlflow, airflow = _sleeper(), _sleeper()
    try:
        _write_state(tmp_path, {
            "mlflow": _record(mlflow, f"{url}/health", tmp_path / "stack" / "mlflow.log"),
            "airflow": _record(airflow, f"{url}/api/v2/monitor/health", tmp_path / "stack" / "airflow.log",
                               password_file=str(tmp_path / "airflow" / airflow_service.PASSWORD_FILE)),
        })
        assert main(["stack", "status", "--home", str(tmp_path)]) == 1
        out = capsys.readouterr().out
        assert f"mlflow   pid {mlflow.pid}" in out and "healthy" in out.splitlines()[0]
        assert "ray      not started" in out
        assert "UNHEALTHY: scheduler unhealthy" in out
        assert f"password in {tmp_path / 'airflow' / airflow_service.PASSWORD_FILE}" in out

        assert main(["stack", "down", "--home", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "airflow  stopped" in out and "mlflow   stopped" in out
        assert _gone(mlflow) and _gone(airflow)
        assert json.loads((tmp_path / "stack" / "state.json").read_text())["services"] == {}
        assert main(["stack", "down", "--home", str(tmp_path)]) == 0
        assert "stack is not running" in capsys.readouterr().out
    finally:
        for proc in (mlflow, airflow):
            proc.kill()
            proc.wait()


def test_airflow_health_needs_every_component(health_server):
    url, answers = health_server
    record = {"health_url": f"{url}/api/v2/monitor/health"}
    healthy = {part: {"status": "healthy"} for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")}
    answers["/api/v2/monitor/health"] = (200, json.dumps(healthy))
    assert airflow_service.check_health(record) == (True, "ok")
    answers["/api/v2/monitor/health"] = (200, json.dumps({k: v for k, v in healthy.items() if k != "triggerer"}))
    assert airflow_service.check_health(record) == (False, "triggerer missing")
    answers["/api/v2/monitor/health"] = (503, "starting")
    ok, reason = airflow_service.check_health(record)
    assert not ok and "HTTP 503" in reason


def test_http_health_is_a_200_from_the_health_url(health_server):
    url, answers = health_server
    answers["/health"] = (200, "OK")
    assert health.http_ok({"health_url": f"{url}/health"}) == (True, "ok")
    assert health.http_ok({"health_url": f"{url}/missing"}) == (False, f"{url}/missing: HTTP 404")
    ok, reason = health.http_ok({"health_url": "http://127.0.0.1:9/health"})  # nothing listens on port 9
    assert not ok and reason.startswith("http://127.0.0.1:9/health: ")


def test_a_service_that_exits_while_starting_is_named_with_its_logs(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    record = {"url": "http://127.0.0.1:9", "health_url": "http://127.0.0.1:9/api/gcs_healthz",
              "log": str(tmp_path / "ray.log"), "temp_dir": str(tmp_path / "ray-tmp")}
    ray = ray_head.SERVICE
    with pytest.raises(BertPipelineError) as error:
        health.wait_healthy({"ray": (ray, proc, record)}, timeout=60)
    assert str(error.value) == (f"ray exited with code 3 before it became healthy; read {tmp_path / 'ray.log'} "
                                f"and the Ray logs in {tmp_path / 'ray-tmp'}/session_latest/logs")


def test_a_reused_pid_is_not_killed(tmp_path, capsys):
    # The recorded service is gone and its pid now belongs to an unrelated process: `down` must leave it alone.
    other = _sleeper()
    try:
        record = _record(other, "http://127.0.0.1:9/health", tmp_path / "stack" / "mlflow.log")
        record["started"] -= 1
        _write_state(tmp_path, {"mlflow": record})
        assert main(["stack", "status", "--home", str(tmp_path)]) == 1
        assert f"DOWN      (pid {other.pid} gone" in capsys.readouterr().out
        assert main(["stack", "down", "--home", str(tmp_path)]) == 0
        assert "mlflow   was not running" in capsys.readouterr().out
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_stack_module_imports_no_service_library():
    # The command starts the services' CLIs; importing airflow, mlflow or ray would cost seconds and couple
    # bert_core to them (ARCHITECTURE §1).
    code = ("import sys, bert_pipeline.commands.stack, bert_pipeline.stack.supervisor, bert_pipeline.cli; "
            "print(sorted(m for m in ('airflow', 'mlflow', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert out.stdout.strip() == "[]"


# A leader that starts one child in its group; on SIGTERM it stops the child itself (or, "ignore", does nothing).
# It writes `armed` once its SIGTERM disposition is set. The child blocks SIGTERM, writes its pid to `ready`, and
# records who sent it a SIGTERM (sigwaitinfo's si_pid), then exits.
LEADER = """
import os, signal, subprocess, sys
child_code, ready, sender, armed, mode = sys.argv[1:]
child = subprocess.Popen([sys.executable, "-c", child_code, ready, sender])
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def stop(*_):
        child.send_signal(signal.SIGTERM)
        child.wait()
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
open(armed + ".tmp", "w").close()
os.rename(armed + ".tmp", armed)
while True:
    signal.pause()
"""
CHILD = """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
info = signal.sigwaitinfo({signal.SIGTERM})
open(sys.argv[2], "w").write(str(info.si_pid))
"""


def _leader(tmp_path, mode: str) -> tuple[subprocess.Popen, int]:
    """The leader and its child's pid, once both are ready for SIGTERM."""
    ready, sender, armed = tmp_path / "ready", tmp_path / "sender", tmp_path / "armed"
    leader = subprocess.Popen([sys.executable, "-c", LEADER, CHILD, str(ready), str(sender), str(armed), mode],
                              start_new_session=True)
    child = int(_wait_for_file(ready))
    _wait_for_file(armed)
    return leader, child


@pytest.fixture()
def family_signals(monkeypatch):
    """The signals stop_processes sends to a whole family, each with whether its leader was still alive."""
    sent: list[tuple[str, bool]] = []
    real = processes.signal_family

    def spy(pids, pgid, sig):
        sent.append((signal.Signals(sig).name, processes.alive(pgid)))
        real(pids, pgid, sig)

    monkeypatch.setattr(processes, "signal_family", spy)
    return sent


def test_leader_first_lets_the_main_process_stop_its_children(tmp_path, family_signals):
    """As `stack down` stops Ray: only `ray start` gets our SIGTERM; it stops its own children."""
    leader, child = _leader(tmp_path, "stop-children")
    target = StopTarget(leader.pid, processes.start_time(leader.pid), grace_s=8, leader_first=True)
    assert processes.stop_process(target) is True
    assert int((tmp_path / "sender").read_text()) == leader.pid  # the child heard from its leader, not from us
    # The family was signalled once, after its leader had ended (not on the fallback's clock), and never killed.
    assert family_signals == [("SIGTERM", False)]
    assert _gone(leader) and not processes.alive(child)


def test_leader_first_falls_back_to_the_family_and_sigkill(tmp_path, monkeypatch, family_signals):
    """A main process that does not stop: after LEADER_GRACE_S its family gets SIGTERM, and SIGKILL after the
    grace period."""
    monkeypatch.setattr(processes, "LEADER_GRACE_S", 0.5)
    leader, child = _leader(tmp_path, "ignore")
    target = StopTarget(leader.pid, processes.start_time(leader.pid), grace_s=2, leader_first=True)
    assert processes.stop_process(target) is True
    assert int((tmp_path / "sender").read_text()) == os.getpid()  # the fallback's SIGTERM, from this process
    assert family_signals == [("SIGTERM", True), ("SIGKILL", True)]  # the leader outlived both stages' start
    assert _gone(leader) and not processes.alive(child)


def test_production_secrets_are_made_once_and_readable_by_the_owner_only(tmp_path):
    from bert_pipeline.stack import secrets

    made = secrets.load_or_create(tmp_path)
    assert secrets.load_or_create(tmp_path) == made  # kept: the database's password lives in its data directory
    assert secrets.path(tmp_path).stat().st_mode & 0o777 == 0o600
    assert len(set(made.values())) == len(secrets.NAMES)
    secrets.path(tmp_path).write_text(json.dumps({"postgres_password": "x"}))
    with pytest.raises(BertPipelineError, match="missing redis_password, jwt_secret"):
        secrets.load(tmp_path)


def test_production_summary_gives_the_shell_exports(tmp_path):
    from bert_pipeline.stack.profiles import PRODUCTION, PROFILES, Options

    mlflow = {"url": "http://127.0.0.1:5000", "store": "postgresql://bert@127.0.0.1:5433/mlflow",
              "artifacts": "s3://b/p"}
    ray = {"url": "http://127.0.0.1:8265", "address": "127.0.0.1:6379"}
    own = PROFILES[PRODUCTION].summary(tmp_path, {"mlflow": mlflow, "ray": ray}, Options(artifacts_destination="s3://b/p"))
    assert own[-1] == ("From a shell: export MLFLOW_TRACKING_URI=http://127.0.0.1:5000 RAY_ADDRESS=127.0.0.1:6379 "
                       f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={tmp_path / 'stack' / 'ray_auth_token'}")
    # A cluster of the team's own: its address, and its auth mode is not the stack's to say.
    external = PROFILES[PRODUCTION].summary(tmp_path, {"mlflow": mlflow},
                                            Options(artifacts_destination="s3://b/p", ray_address="10.0.0.1:6379"))
    assert external[-1] == "From a shell: export MLFLOW_TRACKING_URI=http://127.0.0.1:5000 RAY_ADDRESS=10.0.0.1:6379"


def test_a_plain_up_completes_a_half_up_stack_with_the_profile_it_was_started_with(tmp_path, monkeypatch, capsys):
    from bert_pipeline.stack import supervisor

    started = []
    monkeypatch.setattr(supervisor, "up", lambda stack, profile, *rest: started.append(profile.name) or 0)
    redis = _sleeper()
    try:
        state = _write_state(tmp_path, {"redis": _record(redis, "http://127.0.0.1:1/none", tmp_path / "redis.log")})
        state.write_text(json.dumps({**json.loads(state.read_text()), "profile": "production"}))
        assert main(["stack", "up", "--home", str(tmp_path)]) == 0
        assert started == ["production"]  # not "is up with --profile production; down first"
    finally:
        redis.kill()
        redis.wait()
    assert main(["stack", "up", "--home", str(tmp_path)]) == 0  # nothing running: the default profile
    assert started == ["production", "default"]


def test_down_stops_the_production_profile_in_reverse_start_order(tmp_path, monkeypatch, capsys):
    """Phase by phase, in reverse: the Celery workers and Airflow's components first, then MLflow (and Ray), and
    PostgreSQL and Redis last. All at once, PostgreSQL stopped in under a second and every production `down` left
    AdminShutdown and "Connection refused" tracebacks in the Airflow logs. A recorded service the profile does not
    name goes with the first wave."""
    from bert_pipeline.stack import supervisor
    from bert_pipeline.stack.profiles import PROFILES, Options
    from bert_pipeline.stack.state import Stack

    phases = [[s.name for s in phase] for phase in PROFILES["production"].phases(Options.from_json(None))]
    names = [name for phase in phases for name in phase] + ["hand-added"]
    state = tmp_path / "stack" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"profile": "production", "ports": {},
                                 "services": {n: {"pid": 1, "started": 1} for n in names}}))
    waves = []
    monkeypatch.setattr(supervisor, "_stop_all", lambda stack, wave: waves.append(wave) or dict.fromkeys(wave, 0.5))
    assert supervisor.down(Stack(tmp_path).load()) == 0
    assert waves == [["hand-added", *phases[2]], phases[1], phases[0]]
    assert phases[0] == ["postgres", "redis"]
