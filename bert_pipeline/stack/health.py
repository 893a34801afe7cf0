"""Health checks over HTTP (each service's own endpoint), and waiting for just-started services to pass theirs."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request

from bert_core.errors import BertPipelineError
from bert_pipeline.stack.service import Record, Service


def get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(HTTP status, body) of a GET; status 0 and the reason when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback http only
            return response.status, response.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(4096).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def http_ok(record: Record) -> tuple[bool, str]:
    """(healthy, short reason): healthy when the record's health_url answers 200."""
    status, body = get(record["health_url"])
    if status != 200:
        return False, f"{record['health_url']}: " + (f"HTTP {status}" if status else body)
    return True, "ok"


def wait_healthy(started: dict[str, tuple[Service, subprocess.Popen, Record]], timeout: float, width: int = 8) -> None:
    """Wait until each started service passes its health check. One that exits first, or is not healthy within
    `timeout` seconds, is an error naming where to read why."""
    deadline = time.monotonic() + timeout
    waiting = dict(started)
    reasons: dict[str, str] = {}
    while waiting:
        for name, (service, proc, record) in list(waiting.items()):
            code = proc.poll()
            if code is not None:
                raise BertPipelineError(f"{name} exited with code {code} before it became healthy; read "
                                        f"{service.logs(record)}")
            healthy, reasons[name] = service.check_health(record)
            if healthy:
                print(f"  {name:{width}} healthy at {record['url']}", flush=True)
                del waiting[name]
        if waiting and time.monotonic() > deadline:
            name, (service, _, record) = next(iter(waiting.items()))
            raise BertPipelineError(f"{name} not healthy after {timeout:.0f} s ({reasons[name]}); read "
                                    f"{service.logs(record)}")
        time.sleep(1.0)
