"""The host name a Celery worker of the production profile reports to Airflow (`[core] hostname_callable`): its
name (celery-worker-1, ...) when BERT_PIPELINE_WORKER_HOSTNAME says so, else the machine's, as Airflow's
default does. Several workers on one machine would otherwise all record the same host on their task instances.

Airflow imports this module by name (AIRFLOW__CORE__HOSTNAME_CALLABLE); it imports nothing of Airflow's.
"""

from __future__ import annotations

import os
import socket

ENV = "BERT_PIPELINE_WORKER_HOSTNAME"
CALLABLE = f"{__name__}.hostname"


def hostname() -> str:
    return os.environ.get(ENV) or socket.getfqdn()
