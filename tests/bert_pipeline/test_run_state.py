"""bert_pipeline.run_state: the run view's reader of Airflow's metadata DB, in a thread beside dag.test()."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# A fresh interpreter (Airflow imported, no mapper configured yet), as `bert-pipeline demo` starts its watch. The
# main thread holds SQLAlchemy's configure lock, as the first query of dag.test() does while Airflow's
# before_configured hook imports every model module; the watch's polls must go on meanwhile. Before prepare_orm
# the watch's first query configured the mappers itself: one thread in the configure lock importing a model
# module, the other importing a model module and waiting for the lock to map its class, hung the demo for good
# before dag.test() logged anything (once in CI, once in a full local suite; 3 of 16 tries of a script racing
# the two threads, 0 of 48 with prepare_orm). Without prepare_orm this test prints BLOCKED.
SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import sqlalchemy.orm.mapper  # the module (sqlalchemy.orm.mapper, the attribute, is a function)
    mapperlib = sys.modules["sqlalchemy.orm.mapper"]
    from airflow.models.dagrun import DagRun  # what run_dag has imported when it starts the watch
    from bert_pipeline.run_state import RunWatch

    polled = threading.Event()

    class Watch(RunWatch):
        def poll(self):
            result = super().poll()  # None here: the DB has no tables; what counts is that it returned
            polled.set()
            return result

    with mapperlib._CONFIGURE_MUTEX:
        watch = Watch("bert_demo", "manual__x", lambda rows: None, interval=0.05)
        watch.start()
        ok = polled.wait(20)
    print("POLLED" if ok else "BLOCKED", flush=True)
    watch.stop()
""")


def test_polls_go_on_while_another_thread_configures_the_orm(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/airflow.db",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "POLLED", done.stdout + done.stderr[-3000:]
