"""GLUE and XNLI task files as people have them: the layouts `download_glue_data.py` writes, the
original XNLI TSV (all languages in one file) and the Baidu/ERNIE XNLI layout.

Fields are split on tabs and nothing else: GLUE text holds unbalanced quote characters, so a
quote must never start a quoted field (csv.QUOTE_NONE semantics); lines split on "\\n" only; the
UTF-8 byte order mark of MRPC's files is dropped. Every row must have exactly the header's
columns, and a blank line is allowed only at the end of the file: a malformed row is an error with
file and line, never a silently skipped example, so row counts are exact. Test files (no label column) read with `label=None`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertPipelineError

NLI_LABELS = ("contradiction", "entailment", "neutral")
BINARY_LABELS = ("0", "1")
TWO_WAY_NLI_LABELS = ("entailment", "not_entailment")

DEFAULT_XNLI_LANGUAGE = "zh"
# Google's XnliProcessor maps the XNLI-MT training label "contradictory" to "contradiction".
LABEL_ALIASES = {"xnli": {"contradictory": "contradiction"}}


@dataclass(frozen=True)
class TaskSpec:
    name: str
    labels: tuple[str, ...] | None  # None: regression (STS-B)
    text_a: str  # header name of the first text column
    text_b: str | None  # header name of the second, None for single-sentence tasks
    label_column: str | None
    layout: str  # for error messages: what the file should look like
    dev_files: tuple[str, ...] = ("dev.tsv",)
    # CoLA's train/dev files have no header: these names stand in for it.
    implicit_header: tuple[str, ...] | None = None

    @property
    def is_regression(self) -> bool:
        return self.labels is None


GLUE_TASKS: dict[str, TaskSpec] = {
    "cola": TaskSpec("CoLA", BINARY_LABELS, "sentence", None, "label",
                     "no header; 4 columns: source, label, original label, sentence (test.tsv: index, sentence)",
                     implicit_header=("source", "label", "original_label", "sentence")),
    "sst-2": TaskSpec("SST-2", BINARY_LABELS, "sentence", None, "label", "header 'sentence<TAB>label'"),
    "mrpc": TaskSpec("MRPC", BINARY_LABELS, "#1 String", "#2 String", "Quality",
                     "header 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String'"),
    "sts-b": TaskSpec("STS-B", None, "sentence1", "sentence2", "score",
                      "10-column header ending in 'sentence1<TAB>sentence2<TAB>score'"),
    "qqp": TaskSpec("QQP", BINARY_LABELS, "question1", "question2", "is_duplicate",
                    "header 'id<TAB>qid1<TAB>qid2<TAB>question1<TAB>question2<TAB>is_duplicate'"),
    "mnli": TaskSpec("MNLI", NLI_LABELS, "sentence1", "sentence2", "gold_label",
                     "header with sentence1, sentence2 and gold_label (dev_matched.tsv: 16 columns)",
                     dev_files=("dev_matched.tsv", "dev_mismatched.tsv")),
    "mnli-mm": TaskSpec("MNLI-mm", NLI_LABELS, "sentence1", "sentence2", "gold_label",
                        "dev_mismatched.tsv: 16-column header ending in 'gold_label'",
                        dev_files=("dev_mismatched.tsv",)),
    "qnli": TaskSpec("QNLI", TWO_WAY_NLI_LABELS, "question", "sentence", "label",
                     "header 'index<TAB>question<TAB>sentence<TAB>label'"),
    "rte": TaskSpec("RTE", TWO_WAY_NLI_LABELS, "sentence1", "sentence2", "label",
                    "header 'index<TAB>sentence1<TAB>sentence2<TAB>label'"),
    "wnli": TaskSpec("WNLI", BINARY_LABELS, "sentence1", "sentence2", "label",
                     "header 'index<TAB>sentence1<TAB>sentence2<TAB>label'"),
    "ax": TaskSpec("AX", NLI_LABELS, "Premise", "Hypothesis", "Label",
                   "diagnostic-full.tsv: header ending in 'Premise<TAB>Hypothesis<TAB>Label'",
                   dev_files=("diagnostic-full.tsv",)),
    # Column names depend on the layout; see _xnli_columns.
    "xnli": TaskSpec("XNLI", NLI_LABELS, "text_a", "text_b", "label",
                     "original XNLI header with 'language', 'sentence1', 'sentence2', 'gold_label'; "
                     "or Baidu/ERNIE 'text_a<TAB>text_b<TAB>label'; or XNLI-MT 'premise<TAB>hypo<TAB>label'"),
}

TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli-m": "mnli", "mnli_mismatched": "mnli-mm"}
# Test-file text columns that differ from the train/dev names.
_TEST_TEXT_COLUMNS = {"ax": ("sentence1", "sentence2")}


@dataclass(frozen=True)
class Example:
    guid: str  # "<file name>-<line>", or the file's own index/id column when it has one
    text_a: str
    text_b: str | None
    label: str | float | None  # None in test files
    line: int


def task_key(task: str) -> str:
    """Canonical key for a case-insensitive task name or alias; an error listing the valid ones."""
    key = task.strip().lower()
    key = TASK_ALIASES.get(key, key)
    if key not in GLUE_TASKS:
        valid = sorted(GLUE_TASKS) + sorted(TASK_ALIASES)
        raise BertPipelineError(f"unknown GLUE task {task!r}; valid tasks: {', '.join(valid)}")
    return key


def get_task(task: str) -> TaskSpec:
    return GLUE_TASKS[task_key(task)]


def iter_tsv(path: str | Path, what: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for every line, split on tabs only.

    Blank lines (nothing but spaces/tabs) are allowed only at the end of the file, where editors and
    `cat` leave them. Anywhere else one is an error: a dropped or emptied row there would otherwise
    vanish silently and shift every later prediction against its gold row.
    """
    try:
        # Binary iteration splits on b"\n" only: a stray "\r" inside a field stays in that field.
        with open(path, "rb") as f:
            first_blank = None  # line number of the first blank line not yet followed by a row
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise BertPipelineError(f"{what} {path}, line {lineno}: not UTF-8 ({exc})") from exc
                if lineno == 1:
                    line = line.removeprefix("\ufeff")  # MRPC's files start with a BOM
                line = line.removesuffix("\n").removesuffix("\r")
                if not line.strip():
                    first_blank = first_blank or lineno
                    continue
                if first_blank is not None:
                    raise BertPipelineError(f"{what} {path}, line {first_blank}: blank line before the row at line "
                                            f"{lineno}; only the end of the file may have blank lines (a row "
                                            "with every field empty is not a valid example)")
                yield lineno, line.split("\t")
    except FileNotFoundError as exc:
        raise BertPipelineError(f"{what} not found: {path}") from exc
    except IsADirectoryError as exc:
        raise BertPipelineError(f"{what} {path} is a directory, expected a TSV file") from exc
    except PermissionError as exc:
        raise BertPipelineError(f"cannot read {what} {path}: {exc}") from exc


def parse_label(spec: TaskSpec, key: str, value: str, where: str, column: str) -> str | float:
    """A label checked against the task's label set (a float for regression)."""
    if spec.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = float("nan")
        if score != score or score in (float("inf"), float("-inf")):
            raise BertPipelineError(f"{where}: {column} {value!r} is not a number")
        return score
    value = LABEL_ALIASES.get(key, {}).get(value, value)
    if value not in spec.labels:
        raise BertPipelineError(
            f"{where}: {column} {value!r} is not a {spec.name} label; expected one of {', '.join(spec.labels)}")
    return value


def _xnli_columns(header: list[str]) -> tuple[str, str, str, bool]:
    """(text_a, text_b, label, multi-language) column names for the three XNLI layouts."""
    if "language" in header:
        return "sentence1", "sentence2", "gold_label", True
    if "premise" in header:
        return "premise", "hypo", "label", False
    return "text_a", "text_b", "label", False


def read_examples(task: str, path: str | Path, language: str | None = None,
                  what: str = "data file") -> list[Example]:
    """Every example of a GLUE/XNLI TSV in file order; labels are None when the file has none (test).

    `language` selects rows of the original multi-language XNLI file (default zh); it is an error
    for other tasks and unused by the single-language XNLI layouts.
    """
    key = task_key(task)
    spec = GLUE_TASKS[key]
    if language is not None and key != "xnli":
        raise BertPipelineError(f"a language applies to XNLI only, not {spec.name}")
    rows = iter_tsv(path, what)
    first = next(rows, None)
    if first is None:
        raise BertPipelineError(f"{what} {path} is empty; expected the GLUE {spec.name} layout ({spec.layout})")
    header_line, header = first
    pending = None
    if spec.implicit_header is not None and header[:1] != ["index"]:
        # CoLA train/dev: no header line, so the first line is already an example.
        pending, header, header_line = first, list(spec.implicit_header), 0
    text_a, text_b, label_column = spec.text_a, spec.text_b, spec.label_column
    multi_language = False
    if key == "xnli":
        text_a, text_b, label_column, multi_language = _xnli_columns(header)
        language = (language or DEFAULT_XNLI_LANGUAGE) if multi_language else None
    if key in _TEST_TEXT_COLUMNS and spec.text_a not in header:
        text_a, text_b = _TEST_TEXT_COLUMNS[key]

    def column(name: str) -> int:
        if name not in header:
            raise BertPipelineError(f"{what} {path}, line {header_line}: no {name!r} column in the header "
                                    f"{header!r}; expected the GLUE {spec.name} layout ({spec.layout})")
        return header.index(name)

    ia = column(text_a)
    ib = column(text_b) if text_b is not None else None
    il = header.index(label_column) if label_column in header else None  # absent in test files
    iguid = next((header.index(c) for c in ("index", "id", "pairID") if c in header), None)
    ilang = header.index("language") if multi_language else None
    examples: list[Example] = []
    languages_seen: set[str] = set()
    source = Path(path).name
    for lineno, fields in itertools.chain([pending] if pending else [], rows):
        where = f"{what} {path}, line {lineno}"
        if len(fields) != len(header):
            raise BertPipelineError(f"{where}: {len(fields)} tab-separated column(s), expected {len(header)} "
                                    f"({spec.layout})")
        if ilang is not None:
            languages_seen.add(fields[ilang])
            if fields[ilang] != language:
                continue
        label = parse_label(spec, key, fields[il], where, label_column) if il is not None else None
        guid = fields[iguid] if iguid is not None else f"{source}-{lineno}"
        examples.append(Example(guid, fields[ia], fields[ib] if ib is not None else None, label, lineno))
    if ilang is not None and not examples:
        raise BertPipelineError(f"{what} {path}: no rows with language {language!r}; languages present: "
                                f"{', '.join(sorted(languages_seen)) or 'none'}")
    return examples
