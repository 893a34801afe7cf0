"""SQuAD 1.1 / 2.0 files: the version (the `version` field, or 2.0 when a question has `is_impossible`) and
the questions, checked (every answer's text must be the context at its `answer_start`).

Fine-tuning windows these examples into features (bert_core.finetune.tasks.squad); the official scorer
reads the same files (bert_core.metrics.squad).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError

V1 = "1.1"
V2 = "2.0"


@dataclass(frozen=True)
class SquadExample:
    qas_id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, character start); empty when unanswerable
    is_impossible: bool = False
    title: str = ""


def normalize_version(version: str) -> str:
    """'1.1', 'v1.1' (also 1.0, scored by the v1.1 script) -> '1.1'; '2.0', 'v2.0', '2' -> '2.0'."""
    v = str(version).strip().lower().removeprefix("v")
    if v in ("1", "1.0", "1.1"):
        return V1
    if v in ("2", "2.0"):
        return V2
    raise BertPipelineError(f"unknown SQuAD version {version!r}: expected 1.1 or 2.0")


def other_version_tag(version_2: bool) -> str:
    """The tag in the file names (train-v2.0.json) of the version a run does not read."""
    return "v1.1" if version_2 else "v2.0"


def version_files(files: tuple[str, ...], version_2: bool) -> tuple[str, ...]:
    """The SQuAD file names a run of this version reads: its own version's and the unversioned ones (train.json,
    dev.json; "dev" has a "v" in it, so the test is for the other version's tag, not for the letter)."""
    return tuple(f for f in files if other_version_tag(version_2) not in f)


def other_version_present(data_dir: Path, files: tuple[str, ...], version_2: bool) -> list[str]:
    """Those of `files` in `data_dir` that only the other version reads: what to name when this version's are missing
    (a 2.0 directory run as 1.1 was refused naming only the 1.1 files)."""
    other = other_version_tag(version_2)
    return [f for f in files if other in f and (Path(data_dir) / f).is_file()]


def detect_version(data: Mapping[str, Any], source: str = "dataset") -> str:
    """The version field when present, else v2.0 when any question has `is_impossible`."""
    if "version" in data:
        try:
            return normalize_version(data["version"])
        except BertPipelineError as exc:
            raise BertPipelineError(
                f"{source}: its 'version' field is {data['version']!r}, expected 1.1 or 2.0 "
                "(force one with --version)"
            ) from exc
    for article in data["data"]:
        for p in article["paragraphs"]:
            if any("is_impossible" in qa for qa in p["qas"]):
                return V2
    return V1


def read_squad(path: str | Path) -> tuple[str, list[SquadExample]]:
    """(version, examples) of a SQuAD JSON file; errors name the file and the question id."""
    try:
        dataset = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise BertPipelineError(f"SQuAD file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertPipelineError(f"{path}: not a SQuAD JSON file ({exc})") from None
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise BertPipelineError(f"{path}: expected a SQuAD JSON object with a 'data' list of articles")
    examples: list[SquadExample] = []
    seen: set[str] = set()
    for ai, article in enumerate(dataset["data"]):
        for pi, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{path}: data[{ai}].paragraphs[{pi}]"
            context = paragraph.get("context")
            if not isinstance(context, str) or not isinstance(paragraph.get("qas"), list):
                raise BertPipelineError(f"{where}: expected 'context' (text) and 'qas' (list)")
            for qa in paragraph["qas"]:
                examples.append(_read_question(qa, context, article.get("title", ""), where, seen))
    if not examples:
        raise BertPipelineError(f"{path}: no questions")
    return detect_version(dataset, str(path)), examples


def _read_question(qa: dict, context: str, title: str, where: str, seen: set[str]) -> SquadExample:
    qid, question = qa.get("id"), qa.get("question")
    if not isinstance(qid, str) or not isinstance(question, str):
        raise BertPipelineError(f"{where}: a question lacks 'id' or 'question' text")
    if qid in seen:
        raise BertPipelineError(f"{where}: question id {qid!r} appears twice")
    seen.add(qid)
    impossible = bool(qa.get("is_impossible", False))
    answers = []
    for answer in [] if impossible else qa.get("answers", []):
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not isinstance(start, int):
            raise BertPipelineError(f"{where}, question {qid!r}: an answer needs 'text' and integer 'answer_start'")
        found = context[start:start + len(text)]
        if found != text:
            raise BertPipelineError(
                f"{where}, question {qid!r}: answer {text!r} at answer_start {start} does not match the context, "
                f"which has {found!r} there")
        answers.append((text, start))
    return SquadExample(qid, question, context, tuple(answers), impossible, title)
