"""Fine-tuning tasks: name -> kind (head), data files, and the metric that picks the best epoch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_core.tasks import glue


@dataclass(frozen=True)
class TaskInfo:
    name: str  # canonical, lower-case: also the registered model name bert-<name>
    kind: str  # classification | regression | squad | ner
    train_files: tuple[str, ...]
    dev_files: tuple[str, ...]
    test_files: tuple[str, ...]
    main_metric: str  # the dev metric that picks the best epoch (first dev file when several)


def _glue(key: str) -> TaskInfo:
    spec = glue.GLUE_TASKS[key]
    kind = "regression" if spec.is_regression else "classification"
    metric = {"cola": "mcc", "sts-b": "pearson", "mrpc": "f1", "qqp": "f1"}.get(key, "accuracy")
    tests = ("test_matched.tsv", "test_mismatched.tsv") if key == "mnli" else ("test.tsv",)
    return TaskInfo(key, kind, ("train.tsv",), spec.dev_files, tests, metric)


TASKS: dict[str, TaskInfo] = {
    **{key: _glue(key) for key in ("cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli")},
    "xnli": TaskInfo("xnli", "classification", ("train.tsv",), ("dev.tsv",), ("test.tsv",), "accuracy"),
    "squad": TaskInfo("squad", "squad", ("train-v1.1.json", "train-v2.0.json", "train.json"),
                      ("dev-v1.1.json", "dev-v2.0.json", "dev.json"), (), "f1"),
    "ner": TaskInfo("ner", "ner", ("train.txt", "eng.train"), ("dev.txt", "eng.testa"), ("test.txt", "eng.testb"),
                    "f1"),
}


def get(name: str) -> TaskInfo:
    key = name.strip().lower()
    key = glue.TASK_ALIASES.get(key, key)
    if key in ("squad1.1", "squad2.0", "squad-v2", "squad2"):
        key = "squad"
    if key not in TASKS:
        raise BertPipelineError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[key]


def find_file(data_dir: str | Path, candidates: tuple[str, ...], split: str, task: TaskInfo,
              required: bool = True) -> Path | None:
    """The first candidate present in data_dir; an error naming what was looked for otherwise."""
    for name in candidates:
        path = Path(data_dir) / name
        if path.is_file():
            return path
    if required:
        raise BertPipelineError(f"{data_dir}: no {split} file for {task.name} (looked for "
                                f"{' or '.join(candidates)})")
    return None
