"""CoNLL-2003 style NER files: one token per line, the tag in the last column, blank lines between
sentences, `-DOCSTART-` lines between documents. Tags may be IOB1 (the original CoNLL-2003
scheme: I- everywhere, B- only between two adjacent entities of a type) or IOB2; `to_iob2`
converts so a model learns one scheme.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertPipelineError


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int  # line of the first token


def _check_tag(tag: str, where: str) -> None:
    if tag != "O" and (len(tag) < 3 or tag[1] != "-" or tag[0] not in "BIES"):
        raise BertPipelineError(f"{where}: tag {tag!r} is not O or B-/I-/E-/S-TYPE")


def read_conll(path: str | os.PathLike) -> list[Sentence]:
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0

    def flush() -> None:
        if words:
            sentences.append(Sentence(tuple(words), tuple(tags), start))
            words.clear()
            tags.clear()

    try:
        with open(path, encoding="utf-8") as f:
            for lineno, raw in enumerate(f, start=1):
                line = raw.rstrip("\n").rstrip("\r")
                if not line.strip():
                    flush()
                    continue
                fields = line.split()
                if fields[0] == "-DOCSTART-":
                    flush()
                    continue
                where = f"{path}, line {lineno}"
                if len(fields) < 2:
                    raise BertPipelineError(f"{where}: expected 'TOKEN ... TAG' (at least 2 columns), got {line!r}")
                _check_tag(fields[-1], where)
                if not words:
                    start = lineno
                words.append(fields[0])
                tags.append(fields[-1])
    except FileNotFoundError:
        raise BertPipelineError(f"CoNLL file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise BertPipelineError(f"{path}: not UTF-8 ({exc})") from None
    flush()
    if not sentences:
        raise BertPipelineError(f"{path}: no sentences")
    return sentences


def to_iob2(tags: tuple[str, ...] | list[str]) -> list[str]:
    """IOB1 -> IOB2: an I- that starts an entity becomes B-; IOB2 input is unchanged."""
    out = []
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        previous = tag
    return out


def write_predictions(path: str | os.PathLike, sentences: list[Sentence], predicted: list[list[str]]) -> None:
    """`TOKEN GOLD PREDICTED` lines (conlleval's input), blank line between sentences; atomic."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for sentence, tags in zip(sentences, predicted, strict=True):
            for word, gold, pred in zip(sentence.words, sentence.tags, tags, strict=True):
                f.write(f"{word} {gold} {pred}\n")
            f.write("\n")
    os.replace(tmp, path)
