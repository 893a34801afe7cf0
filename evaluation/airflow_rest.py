"""Airflow's REST API v2 as a client of a running stack uses it (the stack benchmark, evaluation.stack_profiles, and
the end-to-end tests): log in as the admin (JWT from POST /auth/token), trigger a DAG run, wait for it, and read
its task instances and their logs. Plain HTTP: nothing of Airflow's is imported."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid


class AirflowApi:
    """The Airflow REST API v2 with the admin's JWT (POST /auth/token)."""

    def __init__(self, base_url: str, user: str, password: str):
        self.base_url = base_url
        token = self.call("POST", "/auth/token", {"username": user, "password": password}, auth=False)
        self.token = token["access_token"]

    def call(self, method: str, path: str, body: dict | None = None, auth: bool = True, attempts: int = 3) -> dict:
        """One request; a server error (5xx) is tried again, up to `attempts` times, a second apart, and one that
        stays is raised with the server's answer in the message. Seen on the SQLite stack under load (`airflow
        standalone` on SQLite is Airflow's development setup): a trigger answered 500 while a stopped run's tasks
        were writing their states, most likely the database's write lock. A write that failed is rolled back;
        one that was committed before the error is why `trigger` names its run (a retry then gets 409)."""
        request = urllib.request.Request(self.base_url + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": "application/json"})
        if auth:
            request.add_header("Authorization", f"Bearer {self.token}")
        for attempt in range(1, attempts + 1):
            try:
                with urllib.request.urlopen(request, timeout=90) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                answer = exc.read().decode(errors="replace")[-2000:]
                if exc.code < 500 or attempt == attempts:
                    raise urllib.error.HTTPError(exc.url, exc.code, f"{exc.reason}: {method} {path}: {answer}",
                                                 exc.headers, None) from exc
                time.sleep(attempt)
        raise AssertionError("unreachable")

    def get(self, path: str) -> dict:
        return self.call("GET", path)

    def wait_for_dags(self, dag_ids, timeout: float = 180) -> None:
        """Until the API lists every one of `dag_ids` (the DAG processor has parsed and serialized them)."""
        deadline = time.monotonic() + timeout
        while not set(dag_ids) <= (listed := {d["dag_id"] for d in self.get("/api/v2/dags")["dags"]}):
            assert time.monotonic() < deadline, f"after {timeout:.0f} s the API lists only {sorted(listed)}"
            time.sleep(3)

    def trigger(self, dag_id: str, conf: dict) -> str:
        """Start a run with `conf` and unpause the DAG; the run id.

        A scheduled DAG (catchup=False) whose next run is due (a paused nightly DAG) would get that run, with its
        default params, as soon as it is unpaused, besides this one: the run triggered here takes that logical
        date instead, so the scheduler finds it done and moves on to the next one."""
        dag = self.get(f"/api/v2/dags/{dag_id}")
        due = dag.get("next_dagrun_logical_date")
        logical_date = due if due and dt.datetime.fromisoformat(due) <= dt.datetime.now(dt.UTC) else None
        # Named here, so that a retried POST whose first try was committed (answered 5xx all the same) finds its
        # run (409) instead of starting a second one.
        run_id = f"manual__{dt.datetime.now(dt.UTC).isoformat()}_{uuid.uuid4().hex[:8]}"
        try:
            self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                      {"dag_run_id": run_id, "logical_date": logical_date, "conf": conf})
        except urllib.error.HTTPError as exc:
            if exc.code != 409 or self._run_conf(dag_id, run_id) != conf:
                raise
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        return run_id

    def _run_conf(self, dag_id: str, run_id: str) -> dict | None:
        """The conf of run `run_id`, None when there is no such run."""
        try:
            return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}").get("conf")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> dict:
        """The run once it succeeded or failed (or as it is after `timeout` seconds)."""
        quoted = urllib.parse.quote(run_id, safe="")
        deadline = time.monotonic() + timeout
        run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quoted}")
        while run["state"] not in ("success", "failed") and time.monotonic() < deadline:
            time.sleep(3)
            run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quoted}")
        return run

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        quoted = urllib.parse.quote(run_id, safe="")
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances")["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, try_number: int = 1) -> str:
        quoted = urllib.parse.quote(run_id, safe="")
        log = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances/{task_id}/logs/{try_number}"
                       f"?full_content=true&map_index={map_index}")
        content = log.get("content", "")
        # Airflow 3 serves a structured log as a list of events: one JSON event a line, like the log file.
        return content if isinstance(content, str) else "\n".join(json.dumps(e) for e in content)

    def failed_tasks(self, dag_id: str, run_id: str) -> str:
        """The failed task instances of a run with the end of each one's log (mapped ones by their map index)."""
        parts = []
        for t in self.task_instances(dag_id, run_id):
            if t["state"] not in ("failed", "upstream_failed"):
                continue
            where = f"{t['task_id']}[{t.get('map_index', -1)}] {t['state']}"
            if t["state"] == "failed":
                try:
                    content = self.task_log(dag_id, run_id, t["task_id"], t.get("map_index", -1),
                                            max(t.get("try_number") or 1, 1))
                except urllib.error.HTTPError as exc:
                    content = f"(log not readable: {exc})"
                where += "\n" + _log_digest(content)
            parts.append(where)
        return f"{dag_id} run {run_id}:\n" + "\n---\n".join(parts)


def _log_digest(content: str, limit: int = 6000) -> str:
    """What a person needs of a failed task's log: its error and warning events (a traceback's lines included),
    then its last events; Ray's raylet chatter, which ends most task logs, left out."""
    try:
        events = [json.loads(line) for line in content.splitlines() if line.strip()]
        events = [e for e in events if isinstance(e, dict)]
    except ValueError:
        return content[-limit:]
    if not events:
        return content[-limit:]

    def text(e: dict) -> str:
        return f"{e.get('level', '')} {e.get('event', '')} {e.get('error_detail', '') or ''}".rstrip()

    wanted = [text(e) for e in events if e.get("level") in ("error", "critical", "warning") or e.get("error_detail")]
    tail = [text(e) for e in events[-40:] if "(raylet)" not in str(e.get("event", ""))]
    digest = "\n".join(wanted[-30:] + ["... last events:"] + tail)
    return digest[-limit:]

