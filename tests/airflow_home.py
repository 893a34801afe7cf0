"""One Airflow home for the whole test session, set before anything imports airflow (it reads its
config at import): AIRFLOW_HOME in a temp dir, the DAGs folder = the pipelines package, no examples."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

PIPELINES = Path(__file__).resolve().parent.parent / "pipelines"
ROOT = Path(os.environ.get("BERT_PIPELINE_TEST_HOME") or tempfile.mkdtemp(prefix="bert-pipeline-airflow-"))
if not os.environ.get("BERT_PIPELINE_TEST_HOME"):
    atexit.register(shutil.rmtree, ROOT, ignore_errors=True)
HOME = ROOT / "home"  # the demo's BERT_PIPELINE_HOME; Airflow's home is HOME/airflow, as `demo` sets it

os.environ["AIRFLOW_HOME"] = str(HOME / "airflow")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(PIPELINES)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"


def embedded_env(monkeypatch, cwd: Path) -> Path:
    """Run in `cwd` with the environment `bert-pipeline demo` sets (monkeypatched, so restored afterwards);
    returns the embedded home."""
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(HOME))
    monkeypatch.setenv("AIRFLOW_HOME", str(HOME / "airflow"))
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(PIPELINES))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return HOME


_MIGRATED = False


def migrated_home(monkeypatch, cwd: Path) -> Path:
    """embedded_env, with the session's Airflow metadata DB migrated and the DAGs serialized (once per session:
    `airflow db migrate` + `dags reserialize` cost ~10 s of subprocesses, and the DAG files do not change)."""
    global _MIGRATED
    home = embedded_env(monkeypatch, cwd)
    if not _MIGRATED:
        from bert_pipeline.embedded_home import setup_home

        setup_home(home)  # sets the same variables embedded_env did (monkeypatch restores them afterwards)
        _MIGRATED = True
    return home
