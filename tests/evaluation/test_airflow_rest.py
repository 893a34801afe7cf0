"""The REST client the end-to-end tests and the stack benchmark use: a server error is tried again, and one that
stays, or a client error, is raised with the server's answer."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
from urllib.parse import quote

import pytest

from evaluation.airflow_rest import AirflowApi


class _Server(http.server.ThreadingHTTPServer):
    def __init__(self, answers: list[tuple[int, dict]]):
        self.answers, self.seen, self.bodies = answers, [], []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the http.server interface)
        self.server.seen.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.server.bodies.append(json.loads(self.rfile.read(length)) if length else None)
        code, body = self.server.answers.pop(0) if self.server.answers else (200, {"access_token": "t"})
        data = json.dumps(body(self.server.bodies[-1]) if callable(body) else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PATCH = do_POST  # noqa: N815

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    made: list[_Server] = []

    def start(answers):
        made.append(_Server(answers))
        threading.Thread(target=made[-1].serve_forever, daemon=True).start()
        return made[-1]

    yield start
    for one in made:
        one.shutdown()


def test_a_passing_server_error_is_tried_again(server):
    srv = server([(200, {"access_token": "t"}), (500, {"detail": "database is locked"}), (200, {"dag_run_id": "r1"})])
    api = AirflowApi(f"http://127.0.0.1:{srv.server_port}", "admin", "pw")
    assert api.call("POST", "/api/v2/dags/d/dagRuns", {"conf": {}})["dag_run_id"] == "r1"
    assert srv.seen == ["/auth/token", "/api/v2/dags/d/dagRuns", "/api/v2/dags/d/dagRuns"]


def test_errors_that_stay_name_the_request_and_the_answer(server):
    srv = server([(200, {"access_token": "t"}), (422, {"detail": "conf: not an object"})])
    api = AirflowApi(f"http://127.0.0.1:{srv.server_port}", "admin", "pw")
    with pytest.raises(urllib.error.HTTPError, match="POST /api/v2/dags/d/dagRuns.*conf: not an object") as raised:
        api.call("POST", "/api/v2/dags/d/dagRuns", {"conf": 1})
    assert raised.value.code == 422 and len(srv.seen) == 2  # a client error is not tried again
    srv.answers[:] = [(503, {"detail": "down"})] * 2
    with pytest.raises(urllib.error.HTTPError, match="down") as raised:
        api.call("POST", "/x", {}, attempts=2)
    assert raised.value.code == 503 and srv.seen[-2:] == ["/x", "/x"]


def test_a_retried_trigger_whose_first_try_was_committed_makes_one_run(server):
    """The first POST is committed but answered 500: the retry, with the run id the client chose, gets 409; the run
    of that id has this conf, so it is the one."""
    conf = {"epochs": 2}
    run = {}
    srv = server([(200, {"access_token": "t"}), (200, {"dag_id": "d", "next_dagrun_logical_date": None}),
                  (500, {"detail": "database is locked"}),
                  (409, lambda body: run.update(body) or {"detail": "already exists"}),
                  (200, lambda body: {"dag_run_id": run["dag_run_id"], "conf": run["conf"]}),
                  (200, {"is_paused": False})])
    api = AirflowApi(f"http://127.0.0.1:{srv.server_port}", "admin", "pw")
    run_id = api.trigger("d", conf)
    assert run_id == run["dag_run_id"] and run["conf"] == conf
    assert srv.seen[2:5] == ["/api/v2/dags/d/dagRuns"] * 2 + [f"/api/v2/dags/d/dagRuns/{quote(run_id, safe='')}"]
    # A 409 for a run of another conf (not ours) is raised.
    srv.answers[:] = [(200, {"dag_id": "d"}), (409, {"detail": "already exists"}),
                      (200, {"dag_run_id": "x", "conf": {"other": 1}})]
    with pytest.raises(urllib.error.HTTPError, match="409|already exists"):
        api.trigger("d", conf)
