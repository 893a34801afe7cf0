"""`mlflow models serve` of a model URI on loopback, as a child process, and JSON requests to it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from bert_core.launch.ports import free_ports


def post_json(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


class ModelServer:
    """`mlflow models serve` of a model URI as a child process; stopped on exit."""

    def __init__(self, uri: str, env: dict[str, str], log: Path):
        [self.port] = free_ports()
        self.log = log.open("w")
        mlflow = Path(sys.executable).with_name("mlflow")
        self.process = subprocess.Popen(
            [str(mlflow), "models", "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1",
             "-p", str(self.port), "-w", "1"], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ModelServer:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"mlflow models serve exited: {Path(self.log.name).read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"mlflow models serve did not answer /ping: {Path(self.log.name).read_text()[-3000:]}")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
