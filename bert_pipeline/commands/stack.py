"""`bert-pipeline stack up|down|status`: the local services the DAGs talk to (an MLflow tracking server, a Ray
head, Airflow), as background processes. The flags; the work is bert_pipeline.stack's (docs/stack.md)."""

from __future__ import annotations

import argparse
import os

from bert_pipeline.stack import supervisor
from bert_pipeline.stack.state import DEFAULT_PORTS, Stack, stack_home


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 1-65535")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "down", "status"),
                        help="up: start whatever is not running and wait until healthy; down: stop everything "
                             "`up` started; status: show each service, exit 1 when one is down or unhealthy")
    parser.add_argument("--home", metavar="DIR",
                        help="home of the stack's data (mlflow.db, mlartifacts/, airflow/) and of its state and "
                             "logs (stack/) (default: $BERT_PIPELINE_HOME or ./.bert-pipeline)")
    parser.add_argument("--mlflow-port", type=_port, metavar="PORT",
                        help=f"MLflow tracking server port (up only; default {DEFAULT_PORTS['mlflow']})")
    parser.add_argument("--airflow-port", type=_port, metavar="PORT",
                        help=f"Airflow UI / API server port (up only; default {DEFAULT_PORTS['airflow']})")
    parser.add_argument("--ray-dashboard-port", type=_port, metavar="PORT",
                        help="Ray dashboard and Job Submission API port (up only; default "
                             f"{DEFAULT_PORTS['ray_dashboard']})")
    parser.add_argument("--ray-port", type=_port, metavar="PORT",
                        help="Ray head's GCS port, the address Ray drivers connect to (up only; default "
                             f"{DEFAULT_PORTS['ray_gcs']})")
    parser.add_argument("--ray-num-cpus", type=_count, default=None, metavar="N",
                        help="CPUs the Ray head offers to tasks and Ray Train workers (up only; default: the "
                             "machine's CPU count, at least 2 so the demo's 2 pretraining workers fit)")
    parser.add_argument("--airflow-parallelism", type=_count, default=None, metavar="N",
                        help="Airflow task instances running at once (up only; default: the machine's CPU count, "
                             "at least 2)")
    parser.add_argument("--timeout", type=_positive, default=300.0, metavar="SECONDS",
                        help="how long `up` waits for the services to answer their health checks (default 300)")


def run(args: argparse.Namespace) -> int:
    stack = Stack(stack_home(args.home))
    if args.action == "status":
        return supervisor.status(stack.load())
    given = {"mlflow": args.mlflow_port, "airflow": args.airflow_port, "ray_dashboard": args.ray_dashboard_port,
             "ray_gcs": args.ray_port}
    given = {key: port for key, port in given.items() if port is not None}
    ports = {**DEFAULT_PORTS, **given}
    if args.action == "up":
        supervisor.check_ports(ports)
    with stack.locked():
        stack.load()
        if args.action == "down":
            return supervisor.down(stack)
        cpus = max(2, os.cpu_count() or 1)
        return supervisor.up(stack, ports, given, args.ray_num_cpus or cpus, args.airflow_parallelism or cpus,
                             args.timeout)
