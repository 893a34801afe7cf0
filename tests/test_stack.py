"""`bert-pipeline stack` without the real services: flags, state handling, health checks and process stopping,
against throw-away processes (`sleep`) and a tiny HTTP server. The real stack is exercised by test_stack_ui.py."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bert_pipeline.cli import main
from bert_pipeline.commands import stack as stack_cmd


def _sleeper(*, new_session: bool = True) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], start_new_session=new_session)


def _record(proc: subprocess.Popen, health_url: str, log: Path, **extra) -> dict:
    stat = stack_cmd._proc_stat(proc.pid)
    return {"pid": proc.pid, "started": stat[3], "url": health_url.rsplit("/", 1)[0], "health_url": health_url,
            "log": str(log), **extra}


def _write_state(home: Path, services: dict) -> Path:
    state = home / "stack" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"ports": dict(stack_cmd.DEFAULT_PORTS), "services": services}))
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


def test_stop_process_ends_the_tree_and_the_group(tmp_path):
    # A shell in its own session with a child in its group and a grandchild that left the group (setsid),
    # like Ray's and Airflow's workers can.
    pids_file = tmp_path / "pids"
    script = (f"sleep 300 & echo $! >> {pids_file}; "
              f"{sys.executable} -c 'import os, time; os.setsid(); time.sleep(300)' & echo $! >> {pids_file}; "
              "wait")
    shell = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(pids_file.read_text().split() if pids_file.exists() else []) < 2:
        time.sleep(0.05)
    children = [int(p) for p in pids_file.read_text().split()]
    started = stack_cmd._proc_stat(shell.pid)[3]
    assert stack_cmd.stop_process(shell.pid, started, grace=5) is True
    assert _gone(shell)
    assert not any(stack_cmd._alive(pid) for pid in children)
    assert stack_cmd.stop_process(shell.pid, started, grace=5) is False  # already stopped


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
                               password_file=str(tmp_path / "airflow" / stack_cmd.AIRFLOW_PASSWORD_FILE)),
        })
        assert main(["stack", "status", "--home", str(tmp_path)]) == 1
        out = capsys.readouterr().out
        assert f"mlflow   pid {mlflow.pid}" in out and "healthy" in out.splitlines()[0]
        assert "ray      not started" in out
        assert "UNHEALTHY: scheduler unhealthy" in out
        assert f"password in {tmp_path / 'airflow' / stack_cmd.AIRFLOW_PASSWORD_FILE}" in out

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
    assert stack_cmd.check_health("airflow", record) == (True, "ok")
    answers["/api/v2/monitor/health"] = (200, json.dumps({k: v for k, v in healthy.items() if k != "triggerer"}))
    assert stack_cmd.check_health("airflow", record) == (False, "triggerer missing")
    answers["/api/v2/monitor/health"] = (503, "starting")
    ok, reason = stack_cmd.check_health("airflow", record)
    assert not ok and "HTTP 503" in reason


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
    code = ("import sys, bert_pipeline.commands.stack, bert_pipeline.cli; "
            "print(sorted(m for m in ('airflow', 'mlflow', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert out.stdout.strip() == "[]"


# A leader that starts one child in its group; on SIGTERM it stops the child itself (or, "ignore", does nothing).
# The child blocks SIGTERM and records who sent it one (sigwaitinfo's si_pid), then exits.
LEADER = """
import signal, subprocess, sys
child_code, ready, sender, mode = sys.argv[1:]
child = subprocess.Popen([sys.executable, "-c", child_code, ready, sender])
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def stop(*_):
        child.send_signal(signal.SIGTERM)
        child.wait()
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
while True:
    signal.pause()
"""
CHILD = """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
open(sys.argv[1], "w").write(str(os.getpid()))
info = signal.sigwaitinfo({signal.SIGTERM})
open(sys.argv[2], "w").write(str(info.si_pid))
"""


def _leader(tmp_path, mode: str) -> tuple[subprocess.Popen, int]:
    ready, sender = tmp_path / "ready", tmp_path / "sender"
    leader = subprocess.Popen([sys.executable, "-c", LEADER, CHILD, str(ready), str(sender), mode],
                              start_new_session=True)
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the leader's SIGTERM handler is installed right after it started the child
    return leader, int(ready.read_text())


def test_leader_first_lets_the_main_process_stop_its_children(tmp_path):
    """As `stack down` stops Ray: only `ray start` gets our SIGTERM; it stops its own children."""
    leader, child = _leader(tmp_path, "stop-children")
    started = stack_cmd._proc_stat(leader.pid)[3]
    begin = time.monotonic()
    assert stack_cmd.stop_process(leader.pid, started, grace=8, leader_first=True) is True
    assert time.monotonic() - begin < stack_cmd.LEADER_GRACE_S  # no waiting for the fallback
    assert int((tmp_path / "sender").read_text()) == leader.pid  # the child heard from its leader, not from us
    assert _gone(leader) and not stack_cmd._alive(child)


def test_leader_first_falls_back_to_the_family_and_sigkill(tmp_path, monkeypatch):
    """A main process that does not stop: after LEADER_GRACE_S its family gets SIGTERM, and SIGKILL after the
    grace period."""
    monkeypatch.setattr(stack_cmd, "LEADER_GRACE_S", 0.5)
    leader, child = _leader(tmp_path, "ignore")
    started = stack_cmd._proc_stat(leader.pid)[3]
    assert stack_cmd.stop_process(leader.pid, started, grace=2, leader_first=True) is True
    assert int((tmp_path / "sender").read_text()) == os.getpid()  # the fallback's SIGTERM, from this process
    assert _gone(leader) and not stack_cmd._alive(child)
