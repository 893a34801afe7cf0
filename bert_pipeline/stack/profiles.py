"""The stack's profiles: which services `up` starts, in which order, with what.

- `default`: the embedded development stack: an MLflow server on sqlite with artifacts on the local disk, a Ray
  head, and `airflow standalone` (LocalExecutor on sqlite).
- `production`: the shape of a team's deployment on one machine: PostgreSQL (Airflow's metadata database and
  the MLflow server's backend store), Redis, the MLflow server with its artifacts in S3, a Ray head (or an
  existing Ray cluster, --ray-address), and Airflow as separate components with the CeleryExecutor and its
  Celery workers (bert_pipeline.stack.airflow_celery).
"""

from __future__ import annotations

import dataclasses
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_pipeline.stack import airflow, airflow_celery, mlflow_server, postgres, ray_head, redis, secrets
from bert_pipeline.stack.service import Record, Service

DEFAULT = "default"
PRODUCTION = "production"


@dataclass(frozen=True)
class Options:
    """What `up` was asked for beyond the ports; recorded in state.json, so `status` and `down` know the services."""

    ray_num_cpus: int = 2
    airflow_parallelism: int = 2
    artifacts_destination: str | None = None  # production: where the MLflow server keeps artifacts (s3://...)
    ray_address: str | None = None  # production: an existing Ray cluster's GCS address; no head is started then
    celery_workers: int = 2
    worker_concurrency: int = 1

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> Options:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass(frozen=True)
class Missing:
    """Something this machine lacks for a profile, and the command that installs it."""

    what: str
    install: str


class Profile:
    name: str

    def services(self, options: Options) -> dict[str, Service]:
        """Name -> service, in start order (`down` stops them all at once)."""
        return {s.name: s for phase in self.phases(options) for s in phase}

    def phases(self, options: Options) -> list[list[Service]]:
        raise NotImplementedError

    def port_keys(self, options: Options) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for s in self.services(options).values() for k in s.port_keys))

    def check_options(self, options: Options) -> None:
        """Refuse options the profile cannot use, before anything starts."""

    def missing(self, options: Options) -> list[Missing]:
        return []

    def plan(self, home: Path, ports: dict[str, int], options: Options) -> dict[str, Record]:
        raise NotImplementedError

    def summary(self, home: Path, records: dict[str, Record], options: Options) -> list[str]:
        raise NotImplementedError


class DefaultProfile(Profile):
    name = DEFAULT

    def phases(self, options: Options) -> list[list[Service]]:
        # Airflow last: its start-up (migrations, four components) saturates a 2-core machine, and `ray start`
        # gives up when its raylet has not registered with the GCS within 30 s.
        return [[mlflow_server.SERVICE, ray_head.SERVICE], [airflow.SERVICE]]

    def check_options(self, options: Options) -> None:
        for flag, value in (("--artifacts-destination", options.artifacts_destination),
                            ("--ray-address", options.ray_address)):
            if value:
                raise BertPipelineError(f"{flag} is a setting of --profile production")

    def plan(self, home: Path, ports: dict[str, int], options: Options) -> dict[str, Record]:
        return {"mlflow": mlflow_server.spec(home, ports),
                "ray": ray_head.spec(home, ports, options.ray_num_cpus),
                "airflow": airflow.spec(home, ports, options.airflow_parallelism)}

    def summary(self, home: Path, records: dict[str, Record], options: Options) -> list[str]:
        mlflow, ray, airflow_ = (records.get(name) for name in ("mlflow", "ray", "airflow"))
        lines = []
        if mlflow:
            lines.append(f"MLflow   {mlflow['url']}   (store sqlite:///{home / 'mlflow.db'}, artifacts "
                         f"{home / 'mlartifacts'})")
        if ray:
            lines.append(f"Ray      dashboard {ray['url']}   GCS {ray['address']}   "
                         f"(ray job submit --address {ray['url']} -- python ...)")
        if airflow_:
            lines.append(f"Airflow  {airflow_['url']}   user admin, password in {airflow_['password_file']}")
        if mlflow and ray:
            lines.append(_exports(home, mlflow["url"], ray["address"], own_head=True))
        return lines


def _exports(home: Path, mlflow_url: str, ray_address: str, own_head: bool) -> str:
    """The line that points a shell at the stack (a head the stack started checks its token; a cluster of the
    user's, their own authentication)."""
    auth = ray_head.auth_env(home)
    return (f"From a shell: export MLFLOW_TRACKING_URI={mlflow_url} RAY_ADDRESS={ray_address}"
            + (f" RAY_AUTH_MODE={auth['RAY_AUTH_MODE']} RAY_AUTH_TOKEN_PATH={auth['RAY_AUTH_TOKEN_PATH']}"
               if own_head else ""))


class ProductionProfile(Profile):
    name = PRODUCTION

    def phases(self, options: Options) -> list[list[Service]]:
        second = [mlflow_server.SERVICE] + ([] if options.ray_address else [ray_head.SERVICE])
        # The Airflow components and the workers together: the workers need only the broker and the database,
        # which are up, and `airflow db migrate` runs before the API server (the first of them) starts.
        return [[postgres.SERVICE, redis.SERVICE], second, airflow_celery.services(options.celery_workers)]

    def check_options(self, options: Options) -> None:
        if not options.artifacts_destination:
            raise BertPipelineError("--profile production keeps the MLflow server's artifacts in an object store: "
                                    "give --artifacts-destination s3://BUCKET/PREFIX (the server reads the S3 "
                                    "endpoint and credentials from the environment: AWS_ENDPOINT_URL, "
                                    "AWS_ACCESS_KEY_ID, ... or an instance role)")
        if not re.match(r"^[a-z][a-z0-9+.-]*://", options.artifacts_destination):
            raise BertPipelineError(f"--artifacts-destination {options.artifacts_destination}: expected an object "
                                    "store URI such as s3://BUCKET/PREFIX, not a local path")
        if options.ray_address and not re.match(r"^[^:/\s]+:\d+$", options.ray_address):
            raise BertPipelineError(f"--ray-address {options.ray_address}: expected the GCS address HOST:PORT of "
                                    "a running Ray cluster's head (the one `ray start --address` takes)")
        if options.ray_address:
            # No head of ours is health-checked then: a cluster that is not there would only show as the first
            # training task hanging in Ray's connection retries.
            host, port = options.ray_address.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
            except OSError as exc:
                raise BertPipelineError(f"--ray-address {options.ray_address}: no Ray head answers there "
                                        f"({exc.strerror or exc}); start the cluster first, or give its head's "
                                        "GCS address") from None

    def missing(self, options: Options) -> list[Missing]:
        found = [Missing(what, f"apt-get install -y {postgres.APT_PACKAGE}") for what in postgres.missing()]
        found += [Missing(what, f"apt-get install -y {redis.APT_PACKAGE}") for what in redis.missing()]
        packages = airflow_celery.missing_packages()
        if packages:
            found.append(Missing(f"Python packages {', '.join(packages)}",
                                 "pip install -c infra/constraints.txt -e '.[production]'"))
        return found

    def plan(self, home: Path, ports: dict[str, int], options: Options) -> dict[str, Record]:
        fresh = secrets.load(home) is None
        stored = secrets.load_or_create(home)
        planned = {
            "postgres": postgres.spec(home, ports, stored["postgres_password"], fresh),
            "redis": redis.spec(home, ports, stored["redis_password"]),
            "mlflow": mlflow_server.spec(home, ports, postgres.url(ports, stored["postgres_password"], "mlflow"),
                                         options.artifacts_destination),
        }
        if options.ray_address:
            ray_address, dashboard = options.ray_address, None
        else:
            planned["ray"] = ray_head.spec(home, ports, options.ray_num_cpus)
            ray_address, dashboard = ray_head.gcs_address(ports), ray_head.dashboard_url(ports)
        planned.update(airflow_celery.specs(home, ports, stored, ray_address, dashboard, options.celery_workers,
                                            options.worker_concurrency))
        return planned

    def summary(self, home: Path, records: dict[str, Record], options: Options) -> list[str]:
        lines = []
        if "postgres" in records:
            lines.append(f"Postgres {records['postgres']['url']}   (databases {', '.join(postgres.DATABASES)}, "
                         f"role {postgres.ROLE}, data {records['postgres']['data_dir']}; password in "
                         f"{secrets.path(home)})")
        if "redis" in records:
            lines.append(f"Redis    {records['redis']['url']}   (Celery broker)")
        if "mlflow" in records:
            lines.append(f"MLflow   {records['mlflow']['url']}   (store {records['mlflow']['store']}, artifacts "
                         f"{records['mlflow']['artifacts']})")
        if "ray" in records:
            lines.append(f"Ray      dashboard {records['ray']['url']}   GCS {records['ray']['address']}")
        elif options.ray_address:
            lines.append(f"Ray      the cluster at {options.ray_address} (not started by the stack)")
        if "airflow-api" in records:
            lines.append(f"Airflow  {records['airflow-api']['url']}   CeleryExecutor; user admin, password in "
                         f"{records['airflow-api']['password_file']}")
        workers = [name for name in records if name.startswith(airflow_celery.WORKER_PREFIX)]
        if workers:
            lines.append(f"Workers  {', '.join(workers)} (concurrency {options.worker_concurrency} each; "
                         f"home, work dir and TMPDIR under {home / 'workers'})")
        ray_address = records["ray"]["address"] if "ray" in records else options.ray_address
        if "mlflow" in records and ray_address:
            lines.append(_exports(home, records["mlflow"]["url"], ray_address, own_head="ray" in records))
        return lines


PROFILES: dict[str, Profile] = {p.name: p for p in (DefaultProfile(), ProductionProfile())}
