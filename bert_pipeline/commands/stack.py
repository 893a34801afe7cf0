"""`bert-pipeline stack up|down|status`: the local services the DAGs talk to (an MLflow tracking server, a Ray
head, Airflow; with --profile production also PostgreSQL, Redis and Celery workers), as background processes.
The flags; the work is bert_pipeline.stack's (docs/stack.md)."""

from __future__ import annotations

import argparse
import os

from bert_pipeline.stack import supervisor
from bert_pipeline.stack.profiles import DEFAULT, PRODUCTION, PROFILES, Options
from bert_pipeline.stack.state import DEFAULT_PORTS, PORT_FLAGS, Stack, stack_home


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
    parser.add_argument("--profile", choices=tuple(PROFILES), default=None,
                        help="up only. default: the embedded development stack (MLflow on sqlite, a Ray head, "
                             "`airflow standalone`). production: a team's deployment on one machine: PostgreSQL "
                             "for Airflow and MLflow, Redis, MLflow's artifacts in S3 (--artifacts-destination), "
                             "Airflow's components with the CeleryExecutor and --celery-workers workers (each with "
                             "its own home, work dir and TMPDIR), a Ray head or --ray-address. down and status use "
                             "the profile the stack was started with")
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
    parser.add_argument("--postgres-port", type=_port, metavar="PORT",
                        help=f"production: PostgreSQL's port (up only; default {DEFAULT_PORTS['postgres']})")
    parser.add_argument("--redis-port", type=_port, metavar="PORT",
                        help=f"production: the Redis broker's port (up only; default {DEFAULT_PORTS['redis']}, "
                             "as Ray's GCS has Redis's usual 6379)")
    parser.add_argument("--artifacts-destination", metavar="URI",
                        help="production, required: where the MLflow server keeps artifacts and registered models "
                             "(s3://BUCKET/PREFIX; the server reads AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                             "AWS_SECRET_ACCESS_KEY or AWS_PROFILE from the environment)")
    parser.add_argument("--ray-address", metavar="HOST:PORT",
                        help="production: the GCS address of a running Ray cluster (e.g. a multi-node one) for the "
                             "tasks to join; no Ray head is started then (default: start a head)")
    parser.add_argument("--celery-workers", type=_count, default=None, metavar="N",
                        help=f"production: Celery workers to start (up only; default {Options.celery_workers})")
    parser.add_argument("--worker-concurrency", type=_count, default=None, metavar="N",
                        help="production: task instances each Celery worker runs at once (up only; default "
                             f"{Options.worker_concurrency}: a task of this pipeline trains or drives a Ray job, like "
                             "a worker per machine)")
    parser.add_argument("--ray-num-cpus", type=_count, default=None, metavar="N",
                        help="CPUs the Ray head offers to tasks and Ray Train workers (up only; default: the "
                             "machine's CPU count, at least 2 so the demo's 2 pretraining workers fit)")
    parser.add_argument("--airflow-parallelism", type=_count, default=None, metavar="N",
                        help="default profile: Airflow task instances running at once (up only; default: the "
                             "machine's CPU count, at least 2)")
    parser.add_argument("--timeout", type=_positive, default=300.0, metavar="SECONDS",
                        help="how long `up` waits for each group of services to answer their health checks, and "
                             "for each set-up command (initdb, airflow db migrate) (default 300)")


# Settings of one profile's services only; the profile's own check refuses --artifacts-destination and --ray-address.
PROFILE_FLAGS = {"--celery-workers": PRODUCTION, "--worker-concurrency": PRODUCTION, "--airflow-parallelism": DEFAULT}


def _check_profile_flags(args: argparse.Namespace, profile: str) -> None:
    from bert_core.errors import BertPipelineError

    for flag, owner in PROFILE_FLAGS.items():
        if owner != profile and getattr(args, flag.removeprefix("--").replace("-", "_")) is not None:
            raise BertPipelineError(f"{flag} is a setting of --profile {owner}")


def check_artifacts_destination(uri: str | None) -> None:
    """Refuse, before anything starts, an s3:// --artifacts-destination the MLflow server could not write: its
    bucket missing (a typo, or not made yet on a fresh MinIO/moto), no credentials, or an endpoint that does not
    answer. The server starts and answers /health all the same, and the first artifact a task logs then fails
    with "too many 500 error responses" from the server, naming neither the bucket nor the setting. The check
    asks S3 with this environment, the one the server inherits (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...)."""
    from bert_core.errors import BertPipelineError

    if not uri or not uri.startswith("s3://"):
        return  # another object store: the MLflow server's own client checks it
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    bucket = uri.removeprefix("s3://").split("/", 1)[0]
    flag = f"--artifacts-destination {uri}"
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    where = f"at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else "on AWS (no AWS_ENDPOINT_URL set)"
    try:
        # A session of its own: boto3's default one keeps the credentials it found first.
        client = boto3.session.Session().client("s3", config=Config(connect_timeout=5, read_timeout=15,
                                                                    retries={"max_attempts": 2, "mode": "standard"}))
        client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        raise BertPipelineError(f"{flag}: no S3 credentials in this environment, which the MLflow server inherits: "
                                "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or run "
                                "where an instance role gives them") from None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket"):
            raise BertPipelineError(f"{flag}: bucket {bucket!r} does not exist {where}; create it first (e.g. "
                                    f"`aws s3 mb s3://{bucket}`), or correct the flag") from None
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise BertPipelineError(f"{flag}: access to bucket {bucket!r} {where} is denied with this "
                                    "environment's credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE), which the MLflow "
                                    "server inherits") from None
        raise BertPipelineError(f"{flag}: S3 {where} refused HEAD on bucket {bucket!r}: {exc}") from None
    except (BotoCoreError, ValueError) as exc:  # unreachable endpoint, malformed bucket name, ...
        raise BertPipelineError(f"{flag}: cannot reach bucket {bucket!r} {where}: {exc}") from None


def _running_profile(stack: Stack) -> str | None:
    """The profile a (half-)running stack was started with: a plain `up` completes it as it was started."""
    current = Stack(stack.home).load()
    return supervisor.recorded(current)[0].name if supervisor.running(current) else None


def run(args: argparse.Namespace) -> int:
    stack = Stack(stack_home(args.home))
    if args.action == "status":
        return supervisor.status(stack.load())
    given = {key: getattr(args, PORT_FLAGS[key].removeprefix("--").replace("-", "_")) for key in DEFAULT_PORTS}
    given = {key: port for key, port in given.items() if port is not None}
    ports = {**DEFAULT_PORTS, **given}
    cpus = max(2, os.cpu_count() or 1)
    options = Options(ray_num_cpus=args.ray_num_cpus or cpus, airflow_parallelism=args.airflow_parallelism or cpus,
                      artifacts_destination=args.artifacts_destination, ray_address=args.ray_address,
                      celery_workers=args.celery_workers or Options.celery_workers,
                      worker_concurrency=args.worker_concurrency or Options.worker_concurrency)
    profile = PROFILES[args.profile or _running_profile(stack) or DEFAULT]
    if args.action == "up":
        _check_profile_flags(args, profile.name)
    if args.action == "up" and not supervisor.running(Stack(stack.home).load()):
        # Before the lock makes the home; a running stack keeps the options it was started with.
        supervisor.check_request(profile, ports, given, options)
        supervisor.check_missing(profile, options)
        if profile.name == PRODUCTION:
            check_artifacts_destination(options.artifacts_destination)
    with stack.locked():
        stack.load()
        if args.action == "down":
            return supervisor.down(stack)
        return supervisor.up(stack, profile, ports, given, options, args.timeout)
