"""infra/'s deployment (Airflow Helm values, the MLflow server, the Ray cluster, the two images) against the code.

- Every environment variable the deployed code reads (found in its source, not listed by hand) has a row in
  SETTINGS saying where a deployment gets it, and is set there: in the Airflow values, in every pod of the Ray
  cluster, in the MLflow server, through the Airflow connection; or, for settings whose default suits a
  deployment, documented in docs/deployment.md.
- Every Airflow conf key the code reads is set in the values; the executor is a distributed one.
- The DAGs are the installed `pipelines` package: the values' DAGs folder is where the image installs it.
- The images install the project with infra/constraints.txt, on the Airflow and Ray those pin.
- The clients' MLFLOW_TRACKING_URI is the MLflow Service, and the server (arguments parsed by `mlflow server`'s
  own parser) answers that Host, keeps runs in PostgreSQL and artifacts on S3; Airflow's RAY_ADDRESS is the Ray
  cluster's job server, with the token the cluster checks.

Each check also runs on an edited copy with a setting removed or changed, so a check that cannot fail shows up.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from operators import handoff
from operators.airflow_tasks import DEFAULT_CONN_ID
from tests.infra.pins import pinned
from tests.paths import REPO

INFRA = REPO / "infra"
DOCS = REPO / "docs" / "deployment.md"
CODE = ("bert_core", "operators", "pipelines", "evaluation", "bert_pipeline")

# Where a deployment gets each environment variable the code reads. A variable read in the code without a row
# here fails test_every_setting_the_code_reads_has_a_source: decide, and say so in docs/deployment.md.
#   airflow / ray / mlflow: set in that component's manifest (Airflow: the values' env or secret list; Ray: every
#       pod of infra/ray/raycluster.yaml; MLflow: the server's container);
#   connection: from the Airflow connection the tasks read S3 credentials from (set by the values' secret list);
#   optional: its default suits a deployment; docs/deployment.md says when to set it;
#   runtime: set by Airflow, Ray or the project itself while it runs, never by a deployment;
#   local: the single-machine stack and `bert-pipeline demo` only.
SETTINGS: dict[str, tuple[str, ...]] = {
    "MLFLOW_TRACKING_URI": ("airflow", "ray"),
    "RAY_ADDRESS": ("airflow",),
    "BERT_PIPELINE_HOME": ("airflow", "ray"),
    "BERT_MODEL_STORE": ("airflow", "ray"),
    "AWS_DEFAULT_REGION": ("airflow", "ray", "mlflow"),
    "AWS_ENDPOINT_URL": ("connection",),
    "AWS_ACCESS_KEY_ID": ("connection",),
    "AWS_PROFILE": ("optional",),
    "AWS_REGION": ("optional",),
    "BERT_PIPELINE_AWS_CONN_ID": ("optional",),
    "BERT_PIPELINE_CACHE": ("optional",),
    "BERT_PIPELINE_SHARED_PATHS": ("optional",),
    "BERT_PIPELINE_ARTIFACT_ROOT": ("optional",),
    "BERT_PIPELINE_RAY_WORKING_DIR": ("optional",),
    "GIT_SHA": ("optional",),
    "HF_HUB_OFFLINE": ("optional",),
    "NCCL_DEBUG": ("optional",),
    "NCCL_IB_DISABLE": ("optional",),
    "NCCL_SOCKET_IFNAME": ("optional",),
    "AIRFLOW_CTX_DAG_ID": ("runtime",),
    "AIRFLOW_CTX_DAG_RUN_ID": ("runtime",),
    "AIRFLOW_CTX_TASK_ID": ("runtime",),
    "AIRFLOW_CTX_MAP_INDEX": ("runtime",),
    "BERT_PIPELINE_IN_RAY_JOB": ("runtime",),
    "RAYON_NUM_THREADS": ("runtime",),
    "TOKENIZERS_PARALLELISM": ("runtime",),
    "AIRFLOW_HOME": ("local",),
    "AIRFLOW__CORE__DAGS_FOLDER": ("local",),
    "AIRFLOW__CORE__LOAD_EXAMPLES": ("local",),
    "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": ("local",),
    "RAY_AUTH_MODE": ("local",),
    "COLUMNS": ("local",),  # the terminal's width, for the live run view of `demo` / `run`
    "BERT_PIPELINE_WORKER_HOSTNAME": ("local",),  # each Celery worker's host name in the production profile
    # Set by the project for its own processes: MLflow's download bars off while a report is built; Ray Train's
    # preemption watcher off on a single-machine instance (there is no node to be preempted), and its worker-group
# start attempts cut to fit --placement-timeout (bert_core.launch.ray_train.start_attempt_s); the dashboard of
    # the local Ray instance connect() starts, named to its workers; MLflow's own logger set-up off on a Ray
    # worker of an Airflow task (bert_core.logs).
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": ("runtime",),
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": ("runtime",),
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": ("runtime",),
    "RAY_API_SERVER_ADDRESS": ("runtime",),
    "MLFLOW_CONFIGURE_LOGGING": ("runtime",),
    # MLflow's tags for every run a task try starts (operators.left_running), forwarded to its Ray workers.
    "MLFLOW_RUN_CONTEXT": ("runtime",),
}
# Read by Ray itself, not by our code: the token the cluster checks, which Airflow's job submissions must carry.
RAY_AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


# ----------------------------------------------------------------------------------------------- the code's reads


def _module_env_reads(tree: ast.Module) -> set[str]:
    """The environment variables one module reads or sets: os.environ[...], os.environ.get/setdefault/pop and
    os.getenv with a literal or a module constant, and the names in its module-level *_ENV tuples."""
    found: set[str] = set()
    constants: dict[str, list[str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name, value = node.targets[0].id, node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            constants[name] = [value.value]
        elif isinstance(value, ast.Tuple | ast.List) and name.endswith("_ENV"):
            constants[name] = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            found.update(constants[name])

    def names(arg: ast.AST) -> list[str]:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [arg.value]
        return constants.get(arg.id, []) if isinstance(arg, ast.Name) else []

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            if (func.attr in ("get", "setdefault", "pop") and is_environ(func.value)) or (
                    func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os"):
                found.update(names(node.args[0]))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "env_default"
                and node.args):  # bert_core.io.environment.env_default(NAME, value)
            found.update(names(node.args[0]))
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            found.update(names(node.slice))
    return found


@functools.cache
def env_reads() -> dict[str, frozenset[str]]:
    """Environment variable -> the files of CODE that read (or set) it."""
    found: dict[str, set[str]] = {}
    for package in CODE:
        for path in sorted((REPO / package).rglob("*.py")):
            for variable in _module_env_reads(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                found.setdefault(variable, set()).add(str(path.relative_to(REPO)))
    return {variable: frozenset(files) for variable, files in found.items()}


@functools.cache
def airflow_conf_reads() -> frozenset[tuple[str, str]]:
    """(section, key) of every `conf.get("section", "key")` (getboolean, getint, ...) in CODE."""
    keys: set[tuple[str, str]] = set()
    for package in CODE:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr.startswith("get") and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "conf" and len(node.args) >= 2
                        and all(isinstance(a, ast.Constant) for a in node.args[:2])):
                    keys.add((node.args[0].value, node.args[1].value))
    return frozenset(keys)


# ------------------------------------------------------------------------------------------------ the deployment


@dataclass
class Deployment:
    values: dict  # infra/airflow/values.yaml
    airflow_image: str  # infra/airflow/Dockerfile
    mlflow: list[dict]  # infra/mlflow/mlflow-server.yaml
    raycluster: dict  # infra/ray/raycluster.yaml
    ray_image: str  # infra/ray/Dockerfile
    docs: str  # docs/deployment.md


def load() -> Deployment:
    return Deployment(values=yaml.safe_load((INFRA / "airflow" / "values.yaml").read_text()),
                      airflow_image=(INFRA / "airflow" / "Dockerfile").read_text(),
                      mlflow=list(yaml.safe_load_all((INFRA / "mlflow" / "mlflow-server.yaml").read_text())),
                      raycluster=yaml.safe_load((INFRA / "ray" / "raycluster.yaml").read_text()),
                      ray_image=(INFRA / "ray" / "Dockerfile").read_text(),
                      docs=DOCS.read_text())


def _env(entries: list[dict] | None) -> dict[str, object]:
    """name -> value, or the secretKeyRef / other source it comes from."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in entries or []}


def airflow_env(d: Deployment) -> dict[str, object]:
    env = _env(d.values.get("env"))
    env.update({s["envName"]: {"secretKeyRef": {"name": s["secretName"], "key": s["secretKey"]}}
                for s in d.values.get("secret") or []})
    return env


def ray_pods(d: Deployment) -> list[dict]:
    spec = d.raycluster["spec"]
    return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]


def ray_env(d: Deployment) -> dict[str, object]:
    """The variables every container of every Ray pod has (the values of the head's)."""
    envs = [_env(c.get("env")) for pod in ray_pods(d) for c in pod["containers"]]
    return {k: v for k, v in envs[0].items() if all(k in e for e in envs)}


def mlflow_objects(d: Deployment, kind: str) -> dict:
    found = [o for o in d.mlflow if o and o.get("kind") == kind]
    assert len(found) == 1, f"infra/mlflow/mlflow-server.yaml: expected one {kind}, found {len(found)}"
    return found[0]


def mlflow_container(d: Deployment) -> dict:
    containers = mlflow_objects(d, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "the MLflow server pod: one container"
    return containers[0]


def dockerfile_args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))


def pip_installs(text: str) -> list[str]:
    """Each `pip install ...` command of the Dockerfile's RUN lines (continuations joined)."""
    joined = re.sub(r"\\\n", " ", text)
    return [m.strip() for m in re.findall(r"pip install ([^&\n]*)", joined)]


def image_of(values: dict) -> str:
    return f"{values['defaultAirflowRepository']}:{values['defaultAirflowTag']}"


# ------------------------------------------------------------------------------------------------------ the checks


def setting_problems(d: Deployment, reads: dict[str, frozenset[str]]) -> list[str]:
    problems = []
    envs = {"airflow": airflow_env(d), "ray": ray_env(d), "mlflow": _env(mlflow_container(d).get("env"))}
    where = {"airflow": "infra/airflow/values.yaml (env or secret)", "ray": "every pod of infra/ray/raycluster.yaml",
             "mlflow": "infra/mlflow/mlflow-server.yaml's container"}
    connection = f"AIRFLOW_CONN_{DEFAULT_CONN_ID.upper()}"
    for variable, sources in SETTINGS.items():
        readers = ", ".join(sorted(reads.get(variable, ()))) or "nothing"
        for source in sources:
            if source in envs and variable not in envs[source]:
                problems.append(f"{variable} (read by {readers}) is not set in {where[source]}")
            elif source == "connection" and connection not in envs["airflow"]:
                problems.append(f"{variable} (read by {readers}) comes from the Airflow connection {DEFAULT_CONN_ID}, "
                                f"which infra/airflow/values.yaml does not set ({connection})")
            elif source == "optional" and variable not in d.docs:
                problems.append(f"{variable} (read by {readers}) is not documented in docs/deployment.md")
    return problems


def airflow_problems(d: Deployment, conf_keys: frozenset[tuple[str, str]]) -> list[str]:
    problems = []
    values, config = d.values, d.values.get("config") or {}
    for section, key in sorted(conf_keys):
        # The chart writes [core] executor from `executor` unless config.core.executor overrides it.
        given = (config.get(section) or {}).get(key, values.get("executor") if (section, key) == ("core", "executor")
                                                 else None)
        if given is None:
            problems.append(f"Airflow conf [{section}] {key} (read by the code) is not set in the values")
    executor = (config.get("core") or {}).get("executor", values.get("executor", ""))
    if not handoff.distributed(str(executor)):
        problems.append(f"executor {executor!r}: the deployment runs tasks on workers that share no disk (Celery)")
    if (values.get("postgresql") or {}).get("enabled", True):
        problems.append("postgresql.enabled: the metadata database is the team's PostgreSQL, not the chart's")
    if not (values.get("data") or {}).get("metadataSecretName"):
        problems.append("data.metadataSecretName: the PostgreSQL connection comes from a Secret")
    dags = values.get("dags") or {}
    if (dags.get("gitSync") or {}).get("enabled") or (dags.get("persistence") or {}).get("enabled"):
        problems.append("dags: the DAGs come with the image (the installed pipelines package), not git-sync or a volume")
    folder = (config.get("core") or {}).get("dags_folder")
    built = dockerfile_args(d.airflow_image).get("DAGS_FOLDER")
    if not folder or folder != built:
        problems.append(f"config.core.dags_folder {folder!r} is not where the image installs pipelines ({built!r})")
    python = re.search(r"^FROM \S+-python(3\.\d+)", d.airflow_image, flags=re.M)
    if folder and python and f"/python{python.group(1)}/site-packages/pipelines" not in folder:
        problems.append(f"config.core.dags_folder {folder!r} is not the image's Python {python.group(1)} "
                        "site-packages/pipelines")
    logging_conf = config.get("logging") or {}
    if logging_conf.get("remote_logging") == "True" and logging_conf.get("remote_log_conn_id") != DEFAULT_CONN_ID:
        problems.append(f"config.logging.remote_log_conn_id: the connection the values set is {DEFAULT_CONN_ID}")
    return problems


def image_problems(d: Deployment) -> list[str]:
    problems = []
    airflow, ray = pinned("apache-airflow"), pinned("ray")
    python = re.search(r'requires-python = ">=(3\.\d+)', (REPO / "pyproject.toml").read_text()).group(1)
    tomllib.loads((REPO / "pyproject.toml").read_text())  # the project the images install is valid TOML
    for name, text, base, version_arg, pin in (
            ("infra/airflow/Dockerfile", d.airflow_image, f"apache/airflow:${{AIRFLOW_VERSION}}-python{python}",
             "AIRFLOW_VERSION", airflow),
            ("infra/ray/Dockerfile", d.ray_image, f"rayproject/ray:${{RAY_VERSION}}-py{python.replace('.', '')}-gpu",
             "RAY_VERSION", ray)):
        if not re.search(rf"^FROM {re.escape(base)}$", text, flags=re.M):
            problems.append(f"{name}: FROM {base}")
        if dockerfile_args(text).get(version_arg) != pin:
            problems.append(f"{name}: ARG {version_arg}={dockerfile_args(text).get(version_arg)}, the constraints pin "
                            f"{pin}")
        if "COPY" not in text or not re.search(r"^COPY .*infra/constraints\.txt", text, flags=re.M):
            problems.append(f"{name}: the image must copy infra/constraints.txt")
        installs = pip_installs(text)
        if not installs or any("-c infra/constraints.txt" not in i for i in installs):
            problems.append(f"{name}: every pip install must use -c infra/constraints.txt ({installs})")
        if not any(re.search(r"(^|\s)\.(\s|$)", i) for i in installs):
            problems.append(f"{name}: the image must install the project (pip install ... .)")
        for package in ("bert_core", "operators", "pipelines"):
            if not re.search(rf"^COPY .*\b{package}\b", text, flags=re.M):
                problems.append(f"{name}: the project's {package} is not copied into the image")
    if d.values.get("airflowVersion") != airflow or d.values.get("defaultAirflowTag") != f"airflow{airflow}-py311":
        problems.append(f"values airflowVersion/defaultAirflowTag: the image of Airflow {airflow} "
                        f"(airflow{airflow}-py311)")
    if mlflow_container(d)["image"] != image_of(d.values):
        problems.append("the MLflow server runs the project image (the clients' mlflow): "
                        f"{mlflow_container(d)['image']} != {image_of(d.values)}")
    if d.raycluster["spec"]["rayVersion"] != ray:
        problems.append(f"raycluster.yaml rayVersion {d.raycluster['spec']['rayVersion']} != ray=={ray}")
    for pod in ray_pods(d):
        for container in pod["containers"]:
            if not container["image"].endswith(f":ray{ray}-py311-gpu"):
                problems.append(f"raycluster.yaml image {container['image']}: infra/ray/Dockerfile's ray{ray}-py311-gpu")
    return problems


def mlflow_problems(d: Deployment, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from mlflow.cli import server
    from mlflow.server.security_utils import is_allowed_host_header

    problems = []
    container = mlflow_container(d)
    if container.get("command") != ["mlflow", "server"]:
        problems.append(f"the MLflow container's command {container.get('command')}: mlflow server")
    env = _env(container.get("env"))
    secret = env.get("MLFLOW_BACKEND_STORE_URI")
    if not (isinstance(secret, dict) and "secretKeyRef" in secret):
        problems.append("MLFLOW_BACKEND_STORE_URI: the PostgreSQL URI (with its password) comes from a Secret")
    for name, value in env.items():  # what the pod's environment gives the server's options
        monkeypatch.setenv(name, value if isinstance(value, str) else "postgresql://mlflow:from-secret@db/mlflow")
    params = server.make_context("server", list(container.get("args") or [])).params
    store = params["backend_store_uri"] or ""
    if urlparse(store).scheme.split("+")[0] != "postgresql":
        problems.append(f"backend store {store!r}: PostgreSQL")
    if not params["serve_artifacts"] or not (params["artifacts_destination"] or "").startswith("s3://"):
        problems.append("--serve-artifacts --artifacts-destination s3://...: registered models live in S3, served "
                        "through the server")
    if params["default_artifact_root"]:
        problems.append("--default-artifact-root: with --serve-artifacts the server proxies the destination")
    service = mlflow_objects(d, "Service")
    deployment = mlflow_objects(d, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in service["spec"]["selector"].items()):
        problems.append("the MLflow Service does not select the server's pods")
    port_names = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    targets = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    for who, env_of in (("Airflow", airflow_env(d)), ("Ray", ray_env(d))):
        uri = urlparse(str(env_of.get("MLFLOW_TRACKING_URI", "")))
        host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
        if uri.hostname != host or uri.port not in targets:
            problems.append(f"{who}'s MLFLOW_TRACKING_URI {uri.geturl()} is not the MLflow Service "
                            f"(http://{host}:{'/'.join(map(str, targets))})")
            continue
        target = targets[uri.port]
        if port_names.get(target, target) != params["port"]:
            problems.append(f"the Service's port {uri.port} does not reach the server's --port {params['port']}")
        allowed = [h.strip() for h in (params["allowed_hosts"] or "").split(",") if h.strip()]
        if not allowed or not is_allowed_host_header(allowed, uri.netloc):
            problems.append(f"the server refuses the Host {uri.netloc} of {who}'s MLFLOW_TRACKING_URI "
                            f"(--allowed-hosts {params['allowed_hosts']})")
    return problems


def ray_problems(d: Deployment) -> list[str]:
    problems = []
    cluster = d.raycluster
    head = cluster["spec"]["headGroupSpec"]
    ports = {p["name"]: p["containerPort"] for c in head["template"]["spec"]["containers"] for p in c.get("ports", [])}
    address = f"http://{cluster['metadata']['name']}-head-svc.{cluster['metadata']['namespace']}.svc.cluster.local:" \
              f"{ports.get('dashboard')}"
    given = airflow_env(d).get("RAY_ADDRESS")
    if given != address:
        problems.append(f"Airflow's RAY_ADDRESS {given}: the Ray cluster's job server is {address}")
    if head["rayStartParams"].get("dashboard-host") != "0.0.0.0":
        problems.append("the Ray head's dashboard-host: 0.0.0.0, or Airflow cannot reach the job server")
    ray_auth = {k: ray_env(d).get(k) for k in RAY_AUTH}
    airflow_auth = {k: airflow_env(d).get(k) for k in RAY_AUTH}
    if ray_auth["RAY_AUTH_MODE"] == "token":
        if airflow_auth["RAY_AUTH_MODE"] != "token" or not airflow_auth["RAY_AUTH_TOKEN"]:
            problems.append("the Ray cluster checks a token (RAY_AUTH_MODE=token): Airflow's job submissions need "
                            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN")
        elif airflow_auth["RAY_AUTH_TOKEN"] != ray_auth["RAY_AUTH_TOKEN"]:
            problems.append(f"Airflow's RAY_AUTH_TOKEN {airflow_auth['RAY_AUTH_TOKEN']} is not the Secret the Ray "
                            f"pods read {ray_auth['RAY_AUTH_TOKEN']}")
    return problems


def all_problems(d: Deployment, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return [*setting_problems(d, env_reads()), *airflow_problems(d, airflow_conf_reads()), *image_problems(d),
            *mlflow_problems(d, monkeypatch), *ray_problems(d)]


# ------------------------------------------------------------------------------------------------------- the tests


def test_every_manifest_parses_as_kubernetes_objects_or_values():
    files = sorted(INFRA.rglob("*.yaml"))
    assert {f.relative_to(INFRA).as_posix() for f in files} >= {
        "airflow/values.yaml", "mlflow/mlflow-server.yaml", "ray/raycluster.yaml", "ray/rayjob.yaml"}
    for path in files:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        assert documents, path
        if path.name in ("values.yaml", "cluster.yaml"):  # Helm values; the Ray cluster launcher's config
            continue
        for doc in documents:
            assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{path}: not a Kubernetes object"
            assert doc["metadata"].get("name"), f"{path}: {doc['kind']} without a name"


def test_every_setting_the_code_reads_has_a_source():
    reads = env_reads()
    assert {"MLFLOW_TRACKING_URI", "RAY_ADDRESS", "AWS_ENDPOINT_URL", "BERT_PIPELINE_SHARED_PATHS"} <= set(reads)
    unplaced = sorted(set(reads) - set(SETTINGS))
    assert not unplaced, ("read by the code, with no row in SETTINGS (where does a deployment set it?): "
                          + ", ".join(f"{v} ({', '.join(sorted(reads[v]))})" for v in unplaced))
    stale = sorted(set(SETTINGS) - set(reads))
    assert not stale, f"SETTINGS rows the code no longer reads: {stale}"
    assert airflow_conf_reads() >= {("core", "executor")}


def test_the_deployment_sets_what_the_code_reads(monkeypatch):
    assert all_problems(load(), monkeypatch) == []


def _drop_env(entries: list[dict], name: str) -> None:
    entries[:] = [e for e in entries if e.get("name") != name]


def _edit_values(edit):
    def apply(d: Deployment) -> None:
        edit(d.values)
    return apply


BROKEN = {
    "MLFLOW_TRACKING_URI unset in Airflow": (
        _edit_values(lambda v: _drop_env(v["env"], "MLFLOW_TRACKING_URI")),
        "MLFLOW_TRACKING_URI (read by bert_core/io/tracking.py"),
    "RAY_ADDRESS unset": (_edit_values(lambda v: _drop_env(v["env"], "RAY_ADDRESS")), "RAY_ADDRESS (read by"),
    "RAY_ADDRESS elsewhere": (
        _edit_values(lambda v: next(e for e in v["env"] if e["name"] == "RAY_ADDRESS").update(
            value="http://ray-head:8265")), "the Ray cluster's job server is http://bert-ray-head-svc"),
    "no S3 connection": (_edit_values(lambda v: v.update(secret=[s for s in v["secret"]
                                                                if s["envName"] != "AIRFLOW_CONN_AWS_DEFAULT"])),
                         "comes from the Airflow connection aws_default"),
    "no Ray token in Airflow": (_edit_values(lambda v: v.update(secret=[s for s in v["secret"]
                                                                       if s["envName"] != "RAY_AUTH_TOKEN"])),
                                "Airflow's job submissions need RAY_AUTH_MODE=token and RAY_AUTH_TOKEN"),
    "LocalExecutor": (_edit_values(lambda v: v.update(executor="LocalExecutor")), "share no disk"),
    "no executor": (_edit_values(lambda v: v.pop("executor")), "[core] executor (read by the code) is not set"),
    "chart's PostgreSQL": (_edit_values(lambda v: v["postgresql"].update(enabled=True)), "postgresql.enabled"),
    "DAGs by git-sync": (_edit_values(lambda v: v["dags"]["gitSync"].update(enabled=True)), "dags: the DAGs come"),
    "DAGs folder elsewhere": (_edit_values(lambda v: v["config"]["core"].update(dags_folder="/opt/airflow/dags")),
                              "is not where the image installs pipelines"),
    "other Airflow": (_edit_values(lambda v: v.update(defaultAirflowTag="airflow3.1.0-py311")), "airflowVersion"),
    "region unset on a Ray pod": (
        lambda d: _drop_env(d.raycluster["spec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["env"],
                            "AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION (read by"),
    "Ray image of another Ray": (
        lambda d: d.raycluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(
            image="rayproject/ray:2.9.0"), "infra/ray/Dockerfile's ray"),
    "no constraints in the image": (
        lambda d: setattr(d, "airflow_image", d.airflow_image.replace("-c infra/constraints.txt ", "", 1)),
        "every pip install must use -c infra/constraints.txt"),
    "image on another Airflow": (
        lambda d: setattr(d, "airflow_image", d.airflow_image.replace("ARG AIRFLOW_VERSION=", "ARG AIRFLOW_VERSION=9")),
        "the constraints pin"),
    "project not installed": (
        lambda d: setattr(d, "ray_image", d.ray_image.replace(' . gt-all', ' gt-all')), "must install the project"),
    "server on sqlite": (
        lambda d: mlflow_container(d)["env"].__setitem__(0, {"name": "MLFLOW_BACKEND_STORE_URI",
                                                             "value": "sqlite:////tmp/mlflow.db"}),
        "PostgreSQL"),
    "artifacts on the pod's disk": (
        lambda d: mlflow_container(d).update(args=[a for a in mlflow_container(d)["args"]
                                                   if not a.startswith("--artifacts-destination")]),
        "--serve-artifacts --artifacts-destination s3://"),
    "server refuses the Service's Host": (
        lambda d: mlflow_container(d).update(args=[a for a in mlflow_container(d)["args"]
                                                   if not a.startswith("--allowed-hosts")]),
        "the server refuses the Host mlflow.mlflow.svc.cluster.local:5000"),
    "a flag mlflow server lacks": (
        lambda d: mlflow_container(d)["args"].append("--artifact-destination=s3://x"), "No such option"),
    "an undocumented optional setting": (
        lambda d: setattr(d, "docs", d.docs.replace("BERT_PIPELINE_SHARED_PATHS", "SHARED PATHS")),
        "BERT_PIPELINE_SHARED_PATHS (read by operators/handoff.py) is not documented"),
}


@pytest.mark.parametrize("edit, message", BROKEN.values(), ids=BROKEN.keys())
def test_an_edited_copy_fails(edit, message, monkeypatch):
    deployment = copy.deepcopy(load())
    edit(deployment)
    try:
        problems = all_problems(deployment, monkeypatch)
    except Exception as exc:  # noqa: BLE001 - `mlflow server`'s own parser refusing the arguments (click's UsageError)
        if not hasattr(exc, "format_message"):
            raise
        problems = [exc.format_message()]
    assert any(message in p for p in problems), problems


def test_settings_table_is_in_the_docs():
    """docs/deployment.md lists every setting a deployment sets, with the component that needs it."""
    docs = DOCS.read_text()
    for variable, sources in SETTINGS.items():
        if set(sources) & {"airflow", "ray", "mlflow", "connection", "optional"}:
            assert f"`{variable}`" in docs, f"docs/deployment.md does not name {variable}"
    for path in ("infra/airflow/values.yaml", "infra/airflow/Dockerfile", "infra/mlflow/mlflow-server.yaml",
                 "infra/ray/raycluster.yaml", "infra/ray/rayjob.yaml", "infra/ray/Dockerfile"):
        assert path in docs and (REPO / path).is_file(), path


def test_the_dags_folder_is_the_installed_pipelines_package_here_too():
    """The values name the installed package, as `bert-pipeline demo` and the local stack do (one rule)."""
    from bert_pipeline.dags_folder import pipelines_dir

    assert pipelines_dir() == Path(__import__("pipelines").__file__).parent
    assert load().values["config"]["core"]["dags_folder"].endswith("/site-packages/" + pipelines_dir().name)
