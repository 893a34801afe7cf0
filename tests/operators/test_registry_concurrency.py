"""Concurrent registration and promotion against a real `mlflow server` (sqlite backend, artifacts served by it):
no registration is lost, and the champion alias never moves to a worse version, whatever order concurrent
promotions finish in.

Every alias move is recorded by the server's own database (a trigger on MLflow's alias table), so a move that
is undone a moment later still shows. The promotions run in threads of this process, each its own chain of
HTTP requests to the server. Where a promotion stands when its rivals finish is set by a hook in the serving
check (which every promotion passes through after its first look at the champion and before it moves the
alias): all of them first reach it, then leave it in the order the scenario names. That is the window in which
the promotion of old read the champion, so it moved the alias in finishing order (backwards when the better
candidate finished first); no timing is involved.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from bert_core.launch.ports import free_ports
from operators import promotion_lock, registry
from tests.tiny_bert import write_tiny_bert

WAIT_S = 180  # generous: the machine may be loaded; a hang fails here instead of at the suite's timeout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlflow server` on a free loopback port: sqlite store, artifacts under its own directory (proxied)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    [port] = free_ports()
    db = root / "mlflow.db"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = (root / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
                             "--serve-artifacts", "--artifacts-destination", str(root / "artifacts"),
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (root / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "mlflow server did not come up"
            time.sleep(0.5)
        _record_alias_moves(db)
        yield url, db
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the workers it started, in its own session
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _record_alias_moves(db) -> None:
    with sqlite3.connect(db) as con:
        con.executescript("""
            CREATE TABLE alias_moves (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, alias TEXT, version INTEGER);
            CREATE TRIGGER alias_set AFTER INSERT ON registered_model_aliases BEGIN
                INSERT INTO alias_moves (name, alias, version) VALUES (NEW.name, NEW.alias, NEW.version); END;
            CREATE TRIGGER alias_moved AFTER UPDATE ON registered_model_aliases BEGIN
                INSERT INTO alias_moves (name, alias, version) VALUES (NEW.name, NEW.alias, NEW.version); END;
        """)


def _champion_moves(db, name: str) -> list[str]:
    with sqlite3.connect(db) as con:
        return [str(v) for (v,) in con.execute("SELECT version FROM alias_moves WHERE name = ? AND alias = ? "
                                               "ORDER BY seq", (name, registry.CHAMPION))]


def _run_all(functions) -> list:
    """Run each function in its own thread, all released at once; their results (or the first error)."""
    start = threading.Barrier(len(functions))
    results: list = [None] * len(functions)
    errors: list[BaseException] = []

    def run(i, fn):
        try:
            start.wait(WAIT_S)
            results[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, fn), daemon=True) for i, fn in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 2)
    assert not any(t.is_alive() for t in threads), "a registration or promotion hung"
    if errors:
        raise errors[0]
    return results


@pytest.fixture(scope="module")
def logged_run(server, tmp_path_factory):
    """One logged task pyfunc (a tiny BERT) on the server; every candidate below is a version of it with its own
    metrics (what is compared is the metrics, what the serving check loads is this model)."""
    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.io.tracking import MlflowTracker

    url, _ = server
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", url)
        tracker = MlflowTracker("bert-finetune/sst-2", pyfunc=pyfunc_spec)
        tracker.log_model_dir(write_tiny_bert(tmp_path_factory.mktemp("model") / "model"))
        tracker.end()
    return tracker.run_id


def test_concurrent_promotions_never_move_the_champion_backwards(server, logged_run, monkeypatch):
    url, db = server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    name = "bert-sst-2"
    real_check = registry.serving_check

    def register_all(accuracies: list[float]) -> dict[float, str]:
        """Register one version per accuracy, all at once: none lost, each with its own metrics."""
        versions = _run_all([lambda a=a: registry.register(logged_run, name, {"accuracy": a})["version"]
                             for a in accuracies])
        assert len(set(versions)) == len(accuracies), versions
        client = registry._client(url)
        for accuracy, version in zip(accuracies, versions):
            assert registry.version_metrics(client, name, version) == {"accuracy": accuracy}
        return dict(zip(accuracies, versions))

    def promote_finishing_in(order: list[float], versions: dict[float, str]) -> list[dict]:
        """Promote every version at once; they leave the serving check (after their first look at the champion)
        only when all have reached it and the ones before them in `order` have finished."""
        reached = threading.Barrier(len(order))
        finished = {a: threading.Event() for a in order}

        def hooked_check(model, version):
            result = real_check(model, version)
            accuracy = next(a for a, v in versions.items() if v == version)
            reached.wait(WAIT_S)
            for before in order[:order.index(accuracy)]:
                assert finished[before].wait(WAIT_S), f"version {version} waited for {before} forever"
            return result

        def promote(accuracy):
            try:
                return registry.promote(name, versions[accuracy])
            finally:
                finished[accuracy].set()

        monkeypatch.setattr(registry, "serving_check", hooked_check)
        return _run_all([lambda a=a: promote(a) for a in order])

    def accuracy_of(version: str) -> float:
        return registry.version_metrics(registry._client(url), name, version)["accuracy"]

    # Round 1: no champion yet; the best finishes first (the promotion of old then moved the alias to each worse
    # one in turn). Round 2: better candidates, finishing out of order.
    first = register_all([0.7, 0.9, 0.6, 0.8])
    reports = promote_finishing_in([0.9, 0.8, 0.7, 0.6], first)
    assert [accuracy_of(v) for v in _champion_moves(db, name)] == [0.9]
    assert [r["promoted"] for r in reports] == [True, False, False, False]
    second = register_all([0.93, 0.95, 0.91, 0.97])
    promote_finishing_in([0.95, 0.91, 0.97, 0.93], second)

    moves = [accuracy_of(v) for v in _champion_moves(db, name)]
    assert moves == sorted(moves), f"the champion moved backwards: {moves}"
    assert moves[-1] == 0.97 and moves == [0.9, 0.95, 0.97]
    client = registry._client(url)
    assert registry.current_version(client, name, registry.PREVIOUS) == second[0.95]
    decisions = {a: client.get_model_version(name, v).tags["promotion.decision"]
                 for a, v in {**first, **second}.items()}
    assert [a for a, d in sorted(decisions.items()) if d == "promoted"] == [0.9, 0.95, 0.97]
    # Every ticket was given back: the lock model has no live version.
    assert list(client.search_model_versions(f"name='{promotion_lock.lock_name(name)}'")) == []


def test_a_dead_promotions_ticket_is_passed_once_its_lease_ends(server, logged_run, monkeypatch, caplog):
    """A promotion killed while holding the lock (its node lost) leaves its ticket: the next one waits for the
    lease to end (server clock), goes past it, removes it and promotes."""
    url, _ = server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.setattr(promotion_lock, "LEASE_S", 3.0)
    name = "bert-rte"
    version = registry.register(logged_run, name, {"accuracy": 0.8})["version"]
    client = registry._client(url)
    lock = promotion_lock.lock_name(name)
    promotion_lock.ensure_registered_model(client, lock, "test")
    dead = client.create_model_version(lock, f"runs:/{logged_run}/promotion-ticket", run_id=logged_run,
                                       tags={"candidate": f"{name}/0", "host": "lost-node"}).version
    caplog.set_level("INFO", logger="operators")
    report = registry.promote(name, version, gates=["accuracy"], floors={}, check_serving=False)
    assert report["promoted"]
    assert "waiting for 1 promotion(s) ahead of it" in caplog.text and "its holder is gone" in caplog.text
    assert [v.version for v in client.search_model_versions(f"name='{lock}'")] == []
    assert dead  # the dead ticket was a real version of the lock model, now removed


def test_a_holder_past_its_lease_writes_nothing(server, logged_run, monkeypatch):
    url, _ = server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.setattr(promotion_lock, "WRITE_BY_S", 0.0)
    name = "bert-wnli"
    version = registry.register(logged_run, name, {"accuracy": 0.8})["version"]
    with pytest.raises(promotion_lock.LockExpired, match="held for"):
        registry.promote(name, version, gates=["accuracy"], floors={}, check_serving=False)
    client = registry._client(url)
    assert registry.current_version(client, name, registry.CHAMPION) is None
    assert "promotion.decision" not in client.get_model_version(name, version).tags
    assert list(client.search_model_versions(f"name='{promotion_lock.lock_name(name)}'")) == []
