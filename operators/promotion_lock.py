"""One promotion of a registered model at a time, across processes and machines: a ticket lock kept in the
MLflow model registry itself.

Promotion reads the champion, compares the candidate with it, then moves the alias. MLflow has no transactions
and no compare-and-set: two promotions of one model at once (two `bert_finetune` runs of one task, on two
Celery workers) could both compare with the same champion, and the worse candidate, writing last, would move
the champion backwards. So the read-compare-set of operators.registry.promote runs inside this lock.

Why it is correct. The one operation of the registry that is atomic and ordered for every client, whatever the
store (sqlite, PostgreSQL, MySQL) and whether reached directly or through `mlflow server`, is creating a model
version: the store picks max(version) + 1 and inserts it under the (name, version) primary key in one
transaction, retrying on a conflict. A number is thus handed out only after every lower one is committed, and is
never handed out again (a deleted version stays as a row, marked deleted). A promotion of model M takes a ticket,
a new version of the lock model `promotion-lock.M`, and goes ahead once no lower ticket is live; it deletes its
ticket when done.
- Mutual exclusion: of two live tickets the higher waits for the lower, never the reverse; and when a ticket's
  creation returns, every lower ticket is already committed, so the listing that follows sees it.
- Progress: first come, first served by ticket number; nothing waits on a higher ticket.
- A holder or waiter that dies (a spot node lost mid-promotion) leaves its ticket behind. A ticket lives LEASE_S
  past its last refresh: `update_model_version` stamps `last_updated_timestamp` with the *server's* clock, a live
  waiter refreshes every REFRESH_S, and a holder refreshes on entering. A waiter judges a lower ticket expired
  against the server's clock too (its own ticket's last stamp plus the time it has since waited on its monotonic
  clock, which can only under-estimate the server's time), so no two machines' clocks are ever compared. A holder
  writes nothing once WRITE_BY_S have passed since the refresh it sent before entering (it raises LockExpired, a
  retryable error): every write of a holder is sent before the server's clock reaches its last stamp + WRITE_BY_S,
  and no waiter goes ahead before that stamp + LEASE_S. The remaining assumption is that one registry request
  takes less than LEASE_S - WRITE_BY_S (240 s; MLflow's own request timeout is 120 s) to land.

The lock model shows in the registry's model list as `promotion-lock.<model>`, with no versions while no
promotion runs. It needs a database-backed registry (sqlite, PostgreSQL, MySQL, or a server on one): the file
store allocates version numbers without a transaction.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

LOCK_PREFIX = "promotion-lock."
LEASE_S = 300.0  # a ticket not refreshed for this long (server clock) is a dead holder's: ignored
WRITE_BY_S = 60.0  # a holder writes nothing once this long has passed since its last refresh
REFRESH_S = 45.0  # a waiter refreshes its ticket this often
POLL_S = 0.5  # a waiter looks at the tickets ahead of it this often (with jitter)
WAIT_S = 3600.0  # a promotion waits at most this long for the ones ahead of it


class LockExpired(RuntimeError):
    """The holder took too long since its last refresh: others may have gone ahead. Retryable (not a verdict)."""


def lock_name(name: str) -> str:
    return f"{LOCK_PREFIX}{name}"


def ensure_registered_model(client, name: str, description: str) -> None:
    """Create registered model `name` unless it exists: idempotent and race-safe (the store refuses a second
    creation, whoever makes it)."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name, description=description)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise


@dataclass
class Ticket:
    """A held promotion lock: `check()` before each write."""

    client: object
    lock: str
    version: str
    refreshed_at: float  # monotonic time just before the last refresh was sent

    def check(self) -> None:
        """Raise LockExpired when this holder may no longer write (too long since its refresh, or its ticket was
        removed as expired by a waiter)."""
        from mlflow.exceptions import MlflowException

        elapsed = time.monotonic() - self.refreshed_at
        if elapsed > WRITE_BY_S:
            raise LockExpired(f"{self.lock}: ticket {self.version} held for {elapsed:.0f} s, longer than the "
                              f"{WRITE_BY_S:.0f} s a holder may write for; promote again")
        try:
            self.client.get_model_version(self.lock, self.version)
        except MlflowException as exc:
            raise LockExpired(f"{self.lock}: ticket {self.version} was removed as expired by another promotion; "
                              "promote again") from exc


def _holder() -> dict[str, str]:
    tags = {"host": socket.gethostname(), "pid": str(os.getpid())}
    if os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"):
        tags["airflow_run"] = f"{os.environ.get('AIRFLOW_CTX_DAG_ID', '')}/{os.environ['AIRFLOW_CTX_DAG_RUN_ID']}"
    return tags


def _refresh(client, lock: str, version: str) -> tuple[float, int]:
    """Refresh a ticket; returns (monotonic time before the request, the server's stamp in ms)."""
    sent = time.monotonic()
    updated = client.update_model_version(lock, version, description=f"refreshed by {socket.gethostname()}")
    return sent, int(updated.last_updated_timestamp)


def _live_tickets(client, lock: str) -> list:
    return list(client.search_model_versions(f"name='{lock}'", max_results=1000))


@contextlib.contextmanager
def held(client, name: str, candidate: str, run_id: str | None) -> Iterator[Ticket]:
    """Hold the promotion lock of registered model `name` (for its version `candidate`) while the block runs.

    `run_id`: the candidate's run. A version needs a source the registry accepts: `runs:/<its run>/...` is
    accepted by a server with the run's id alone, and names no logged model, so none is linked to the ticket
    (without a run: the candidate version itself, which a server links to its logged model)."""
    from mlflow.exceptions import MlflowException

    lock = lock_name(name)
    ensure_registered_model(client, lock, f"Promotion lock of {name} (bert-pipeline, operators/promotion_lock.py): "
                                          "each version is one running promotion's ticket, deleted when it ends.")
    refreshed_at = time.monotonic()
    source = f"runs:/{run_id}/promotion-ticket" if run_id else f"models:/{name}/{candidate}"
    # No wait for the version to be READY (MLflow's "Waiting up to 300 seconds ..." line on every promotion): a
    # ticket has no files to copy, only its number and time count.
    ticket = client.create_model_version(lock, source, run_id=run_id,
                                         tags={**_holder(), "candidate": f"{name}/{candidate}"},
                                         description="waiting", await_creation_for=0)
    stamp, stamped_at = int(ticket.last_updated_timestamp), time.monotonic()
    mine = str(ticket.version)
    try:
        started, said = time.monotonic(), False
        while True:
            server_now = stamp + (time.monotonic() - stamped_at) * 1000.0
            ahead = [t for t in _live_tickets(client, lock) if int(t.version) < int(mine)]
            blocking = []
            for t in ahead:
                if int(t.last_updated_timestamp) + LEASE_S * 1000.0 < server_now:
                    log.warning("%s: ticket %s (%s) was not refreshed for %.0f s: its holder is gone; going past it",
                                lock, t.version, t.tags, (server_now - int(t.last_updated_timestamp)) / 1000.0)
                    with contextlib.suppress(MlflowException):
                        client.delete_model_version(lock, t.version)
                else:
                    blocking.append(t)
            if not blocking:
                break
            if not said:
                log.info("%s version %s: waiting for %d promotion(s) ahead of it (%s)", name, candidate,
                         len(blocking), ", ".join(t.tags.get("candidate", "?") for t in blocking))
                said = True
            if time.monotonic() - started > WAIT_S:
                raise TimeoutError(f"{name} version {candidate}: waited {WAIT_S:.0f} s for the promotions ahead of "
                                   f"it ({', '.join(t.tags.get('candidate', '?') for t in blocking)})")
            if time.monotonic() - refreshed_at > REFRESH_S:
                refreshed_at, stamp = _refresh(client, lock, mine)
                stamped_at = time.monotonic()
            time.sleep(POLL_S * random.uniform(0.5, 1.5))
        # The lease starts again on entering: the time spent waiting does not count against the holder.
        refreshed_at, _ = _refresh(client, lock, mine)
        yield Ticket(client, lock, mine, refreshed_at)
    finally:
        with contextlib.suppress(MlflowException):
            client.delete_model_version(lock, mine)
