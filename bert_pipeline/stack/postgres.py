"""PostgreSQL (Debian's `postgresql` package): the metadata database of Airflow and the backend store of the MLflow
server in the production profile.

A cluster of its own, made by `initdb` on the first `up` and run in the foreground by the supervisor
(`postgres -D DATA`, like every other service: its pid, log and stop are the supervisor's), listening on
127.0.0.1 only (no Unix socket), password (scram-sha-256) authentication for the one role `bert`, which owns the
databases `airflow` and `mlflow`.

PostgreSQL refuses to run as root. When `up` runs as root (CI, containers), initdb and the server run as the
`postgres` system user (setpriv), and the data directory is under that user's home
(~postgres/bert-pipeline/<stack>-<hash>): the stack's home is often under a root-only directory (/root, a 0700
temp dir) that the `postgres` user cannot enter. Otherwise the data directory is HOME/postgres/data.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_pipeline.stack.processes import run_logged
from bert_pipeline.stack.service import Record, Service, base_env

ROLE = "bert"
DATABASES = ("airflow", "mlflow")
SYSTEM_USER = "postgres"  # Debian's package creates it
TOOLS = ("initdb", "postgres", "pg_isready", "createdb", "psql")
APT_PACKAGE = "postgresql"


def bin_dir() -> Path | None:
    """The directory of the server binaries: Debian keeps them in /usr/lib/postgresql/<version>/bin, off PATH
    (the newest version there), unless `initdb` is on PATH."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parts[-3].split(".")])
    return Path(found[-1]).parent if found else None


def missing() -> list[str]:
    """What this machine lacks to run the service: [] or the reasons (named with what installs them)."""
    where = bin_dir()
    if where is None:
        return ["PostgreSQL server (initdb, postgres)"]
    lacking = [tool for tool in TOOLS if not (where / tool).is_file()]
    problems = [f"PostgreSQL's {', '.join(lacking)} (looked in {where})"] if lacking else []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            problems.append(f"the `{SYSTEM_USER}` system user (PostgreSQL refuses to run as root)")
        if shutil.which("setpriv") is None:
            problems.append("setpriv (util-linux), to run PostgreSQL as the postgres user")
    return problems


def _tool(name: str) -> str:
    where = bin_dir()
    if where is None:
        raise BertPipelineError(f"PostgreSQL is not installed: apt-get install {APT_PACKAGE}")
    return str(where / name)


def as_server_user() -> list[str]:
    """The command prefix that runs a server binary as the postgres user when this process is root, else []."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={SYSTEM_USER}", f"--regid={SYSTEM_USER}", "--init-groups", "--"]


def data_dir(home: Path) -> Path:
    if os.geteuid() != 0:
        return home / "postgres" / "data"
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:10]
    return Path(pwd.getpwnam(SYSTEM_USER).pw_dir) / "bert-pipeline" / f"{home.name}-{digest}" / "data"


def url(ports: dict[str, int], password: str, database: str) -> str:
    """SQLAlchemy URL of one of the databases, naming the driver both Airflow and MLflow use: psycopg 3, which
    Airflow's postgres provider installs (Airflow derives its async URL from it: asyncpg, installed with it)."""
    return f"postgresql+psycopg://{ROLE}:{password}@127.0.0.1:{ports['postgres']}/{database}"


def prepare(spec: Record, timeout: float) -> None:
    """initdb the cluster when its data directory has none yet (as the server's user, with the stored password)."""
    data = Path(spec["data_dir"])
    if (data / "PG_VERSION").is_file():
        if spec["private"]["fresh_secrets"]:
            raise BertPipelineError(f"{data} holds a PostgreSQL cluster made for an earlier stack in this home "
                                    f"whose password file is gone; remove {data.parent} to start afresh")
        return
    prefix = as_server_user()
    # mkdir and the password file as the server's user: initdb wants to own the directory and read the file.
    parent = data.parent
    subprocess.run([*prefix, "mkdir", "-p", "-m", "0700", str(parent)], check=True)
    password_file = parent / "initdb-password"
    subprocess.run([*prefix, "sh", "-c", f'umask 077; cat > "{password_file}"'], input=spec["private"]["password"].encode(),
                   check=True)
    try:
        run_logged([*prefix, _tool("initdb"), "-D", str(data), "-U", ROLE, f"--pwfile={password_file}",
              "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"],
             spec["env"], parent, Path(spec["log"]), timeout, f"initdb {data}")
    finally:
        subprocess.run([*prefix, "rm", "-f", str(password_file)], check=False)


def create_databases(spec: Record, timeout: float) -> None:
    """The databases the other services use, when missing (`createdb`, over TCP with the role's password)."""
    env = {**spec["env"], "PGPASSWORD": spec["private"]["password"], "PGHOST": "127.0.0.1", "PGPORT": str(spec["port"]),
           "PGUSER": ROLE}
    listed = subprocess.run([_tool("psql"), "-d", "postgres", "-Atc", "SELECT datname FROM pg_database"], env=env,
                            capture_output=True, text=True, timeout=timeout)
    if listed.returncode != 0:
        raise BertPipelineError(f"PostgreSQL at 127.0.0.1:{spec['port']}: listing databases failed: "
                                f"{listed.stderr.strip()}")
    have = set(listed.stdout.split())
    for name in DATABASES:
        if name not in have:
            run_logged([_tool("createdb"), name], env, Path(spec["data_dir"]).parent, Path(spec["log"]).with_name(
                "postgres-setup.log"), timeout, f"createdb {name}")


def check_health(record: Record) -> tuple[bool, str]:
    """(healthy, short reason): `pg_isready` says the server accepts connections."""
    try:
        result = subprocess.run([_tool("pg_isready"), "-h", "127.0.0.1", "-p", str(record["port"]), "-t", "3"],
                                capture_output=True, text=True, timeout=10)
    except (subprocess.TimeoutExpired, OSError, BertPipelineError) as exc:
        return False, f"pg_isready: {exc}"
    return (True, "ok") if result.returncode == 0 else (False, result.stdout.strip() or result.stderr.strip())


# SIGINT: "fast" shutdown (clients are disconnected); SIGTERM would wait for every client to leave. The postmaster
# stops its own processes; signalled with it, they would make it restart as after a crash.
SERVICE = Service("postgres", port_keys=("postgres",), stop_grace_s=30.0, check_health=check_health,
                  leader_first=True, stop_signal=signal.SIGINT, prepare=prepare, ready=create_databases)


def spec(home: Path, ports: dict[str, int], password: str, fresh_secrets: bool) -> Record:
    """Command, environment, data directory and log file of the server."""
    data = data_dir(home)
    env = base_env(home)
    return {
        "command": [*as_server_user(), _tool("postgres"), "-D", str(data), "-p", str(ports["postgres"]),
                    "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="],
        # Its user may not enter the stack's home (see the module's docstring).
        "cwd": str(data.parent),
        "env": env, "private": {"password": password, "fresh_secrets": fresh_secrets}, "port": ports["postgres"],
        "url": f"postgresql://127.0.0.1:{ports['postgres']}", "data_dir": str(data),
        "log": str(home / "stack" / "postgres.log"),
    }
