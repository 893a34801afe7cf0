"""The REST client the end-to-end tests and the stack benchmark use: a server error is tried again, and one that
stays, or a client error, is raised with the server's answer."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error

import pytest

from evaluation.airflow_rest import AirflowApi


class _Server(http.server.ThreadingHTTPServer):
    def __init__(self, answers: list[tuple[int, dict]]):
        self.answers, self.seen = answers, []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the http.server interface)
        self.server.seen.append(self.path)
        code, body = self.server.answers.pop(0) if self.server.answers else (200, {"access_token": "t"})
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

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
