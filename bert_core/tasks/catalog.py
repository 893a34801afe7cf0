"""The task catalog: each task name -> its kind (which head answers it), its data files, and the metric that
picks the best epoch. Fine-tuning, scoring, export and the registry look tasks up here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_core.tasks import glue, squad


@dataclass(frozen=True)
class Split:
    """One evaluation file of a task: scored when `gold`, else predictions only (a test file)."""

    name: str  # "dev", "dev_mismatched", "test": also the prefix of its prediction file
    files: tuple[str, ...]  # alternative names in the data dir: the first one present is used
    gold: bool
    required: bool = False


@dataclass(frozen=True)
class TaskInfo:
    name: str  # canonical, lower-case: also the registered model name bert-<name>
    kind: str  # classification | regression | squad | ner
    train_files: tuple[str, ...]  # alternatives, first present wins; "{language}" is the XNLI language
    dev_files: tuple[str, ...]
    test_files: tuple[str, ...]
    main_metric: str  # the dev metric that picks the best epoch (first dev file when several)
    # None: one split per dev file (the first required) and per test file. Set where one split has
    # several possible file names (XNLI: the Baidu/ERNIE dev.tsv or the original xnli.dev.tsv).
    splits: tuple[Split, ...] | None = None
    missing_train_hint: str = ""  # said when no train file is found

    def eval_splits(self, version_2: bool = False) -> tuple[Split, ...]:
        """`version_2`: SQuAD's, whose one dev split is its version's file (or the unversioned dev.json)."""
        if self.kind == "squad":
            return (Split("dev", squad.version_files(self.dev_files, version_2), gold=True, required=True),)
        if self.splits is not None:
            return self.splits
        return (tuple(Split(Path(n).stem, (n,), True, i == 0) for i, n in enumerate(self.dev_files))
                + tuple(Split(Path(n).stem, (n,), False) for n in self.test_files))

    def train_candidates(self, language: str) -> tuple[str, ...]:
        return tuple(n.format(language=language) for n in self.train_files)


def _glue(key: str) -> TaskInfo:
    spec = glue.GLUE_TASKS[key]
    kind = "regression" if spec.is_regression else "classification"
    metric = {"cola": "mcc", "sts-b": "pearson", "mrpc": "f1", "qqp": "f1"}.get(key, "accuracy")
    tests = ("test_matched.tsv", "test_mismatched.tsv") if key == "mnli" else ("test.tsv",)
    return TaskInfo(key, kind, ("train.tsv",), spec.dev_files, tests, metric)


TASKS: dict[str, TaskInfo] = {
    **{key: _glue(key) for key in ("cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli")},
    # XNLI comes as the Baidu/ERNIE layout (train/dev/test.tsv, one language) or as the original XNLI-1.0
    # release (xnli.dev.tsv, xnli.test.tsv: all languages, rows picked by --language) whose training
    # data is the separate XNLI-MT-1.0 release: multinli/multinli.train.<lang>.tsv, found where
    # Google's run_classifier.py looks for it (inside the data dir), or given with --train-file.
    "xnli": TaskInfo("xnli", "classification",
                     ("train.tsv", "multinli/multinli.train.{language}.tsv", "multinli.train.{language}.tsv"),
                     ("dev.tsv", "xnli.dev.tsv"), ("test.tsv", "xnli.test.tsv"), "accuracy",
                     splits=(Split("dev", ("dev.tsv", "xnli.dev.tsv"), gold=True, required=True),
                             Split("test", ("test.tsv", "xnli.test.tsv"), gold=False)),
                     missing_train_hint="the original XNLI-1.0 release has no training data: add XNLI-MT-1.0's "
                                        "multinli/ directory (multinli.train.<language>.tsv) to the data dir, "
                                        "or pass --train-file"),
    "squad": TaskInfo("squad", "squad", ("train-v1.1.json", "train-v2.0.json", "train.json"),
                      ("dev-v1.1.json", "dev-v2.0.json", "dev.json"), (), "f1"),
    # One dev and one test split, each under either name: the CoNLL-2003 release's eng.testa/eng.testb are the
    # dev/test files (as separate splits they were named "eng" twice, and the release's layout had no dev file).
    "ner": TaskInfo("ner", "ner", ("train.txt", "eng.train"), ("dev.txt", "eng.testa"), ("test.txt", "eng.testb"),
                    "f1", splits=(Split("dev", ("dev.txt", "eng.testa"), gold=True, required=True),
                                  Split("test", ("test.txt", "eng.testb"), gold=False))),
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
              required: bool = True, hint: str = "") -> Path | None:
    """The first candidate present in data_dir; an error naming what was looked for otherwise."""
    for name in candidates:
        path = Path(data_dir) / name
        if path.is_file():
            return path
    if required:
        raise BertPipelineError(f"{data_dir}: no {split} file for {task.name} (looked for "
                                f"{' or '.join(candidates)}){'; ' + hint if hint else ''}")
    return None
