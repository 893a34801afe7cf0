"""What a task may hand the next one when tasks run on machines that share no disk.

Under a distributed executor (Celery, Kubernetes) the next task of a run may start on another machine: a file a
task wrote to its local disk is not there. The work a run hands on must therefore live under a shared work URI
(`work_dir` = s3://...), and what tasks pass each other (XCom values, and the manifests of the outputs they name)
must name URIs, never local paths. operators.airflow_tasks.bert_task applies both checks to every task, so a
DAG cannot forget them:

- `check_work_dir`: under a distributed executor a run needs a shared work dir; without one its first task
  fails at once, instead of a later task failing on a file that is on another machine.
- `check_handoff`: when the work dir is remote, a task whose return value, or the manifest of an output it
  returns, names a local path fails, naming the task, the key and the path.

A few local paths are the same on every machine of a deployment and are allowed: files of the installed packages
(site-packages: the bundled demo data, the MiniLM checkpoint; bert_core's own directory in an editable install)
and the shared mounts listed in BERT_PIPELINE_SHARED_PATHS (':'-separated directories, e.g. an NFS mount).
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError

SHARED_PATHS_ENV = "BERT_PIPELINE_SHARED_PATHS"
# Executors whose tasks all run on the scheduler's machine (Airflow 3 keeps LocalExecutor; the others are
# Airflow 2's, for a conf that still names them). Any other executor may run a task elsewhere.
LOCAL_EXECUTORS = frozenset({"LocalExecutor", "SequentialExecutor", "DebugExecutor"})


def executor_names(setting: str) -> list[str]:
    """The executor class names of Airflow's [core] executor setting: one name, a module path, `alias:path`, or
    several of those separated by commas (Airflow 3's multiple executors)."""
    names = []
    for item in setting.split(","):
        item = item.strip().rsplit(":", 1)[-1].strip()
        if item:
            names.append(item.rsplit(".", 1)[-1])
    return names


def distributed(setting: str) -> bool:
    """Whether a task of this executor setting may run on a machine other than the previous task's."""
    return any(name not in LOCAL_EXECUTORS for name in executor_names(setting))


def shared_roots() -> list[Path]:
    """Local directories with the same content on every machine of a deployment (see the module doc)."""
    import bert_core

    roots = {Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}
    roots.add(Path(bert_core.__file__).parent)
    roots.update(Path(p) for p in os.environ.get(SHARED_PATHS_ENV, "").split(":") if p.strip())
    return sorted(r.resolve() for r in roots)


def _as_path(text: str) -> Path | None:
    """The local path a string names (an absolute path or a file: URI), else None."""
    if text.startswith("file:"):
        from bert_core.io import storage

        return storage.local_path(text)
    if text.startswith("/"):
        return Path(text)
    return None


def is_shared(path: Path, roots: list[Path] | None = None) -> bool:
    resolved = path.resolve()
    return any(resolved == root or root in resolved.parents for root in (roots or shared_roots()))


def local_paths(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """(key, text) of every string in a JSON-like value, dict keys included, that names a local path; `key` is
    where it sits, e.g. `return_value["phases"][0]["output"]`."""
    if isinstance(value, str):
        if _as_path(value) is not None:
            yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _as_path(key) is not None:
                yield f"{where} (a key)", key
            yield from local_paths(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from local_paths(item, f"{where}[{i}]")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def check_work_dir(work_dir: str | None, executor: str, task: str) -> None:
    """Under a distributed executor the run's work dir must be shared: an s3:// URI, or a directory under
    BERT_PIPELINE_SHARED_PATHS. Raises a BertPipelineError naming the task and what to give."""
    from bert_core.io import storage

    if not distributed(executor) or storage.is_s3(work_dir or ""):
        return
    path = _as_path(work_dir) if work_dir else None
    if path is not None and is_shared(path):
        return
    what = f"work_dir {work_dir} is a local directory" if work_dir else "no work_dir was given"
    raise BertPipelineError(
        f"{task}: {what}, and Airflow's executor is {executor}: its tasks run on machines that share no disk, "
        "so the next task would not find this one's files. Give work_dir a shared work URI (s3://bucket/prefix), "
        f"or a directory on a mount every worker has, listed in {SHARED_PATHS_ENV}")


def check_handoff(result: Any, work_dir: str | None, task: str) -> None:
    """When the run's work dir is remote, fail if `result` (a task's return value, its XCom) or the manifest of
    an output it names (an s3:// URI under the work dir) names a local path that other machines do not have."""
    from bert_core.io import manifest, storage

    if not storage.is_s3(work_dir or ""):
        return
    roots = shared_roots()
    why = (f"the run's work dir is {work_dir}, so the next task may run on a machine that cannot read it: write it "
           f"under the work dir (s3://...), or list a shared mount in {SHARED_PATHS_ENV}")
    for key, text in local_paths(result, "return_value"):
        if not is_shared(_as_path(text), roots):
            raise BertPipelineError(f"{task}: XCom {key} names the local path {text}; {why}")
    under = work_dir.rstrip("/") + "/"
    for uri in sorted({s.rstrip("/") for s in _strings(result) if s.startswith(under)}):
        try:
            written = manifest.read(uri)
        except (FileNotFoundError, BertPipelineError):  # not an output directory (a file, a future output)
            continue
        for key, text in local_paths(written, "manifest"):
            if not is_shared(_as_path(text), roots):
                raise BertPipelineError(f"{task}: {storage.join(uri, manifest.MANIFEST)} field "
                                        f"{key.removeprefix('manifest')} names the local path {text}; {why}")
