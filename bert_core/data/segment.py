"""The `segment` step: raw documents -> one sentence per line, a blank line between documents.

Inputs are plain text (documents separated by blank lines) or JSONL (one document per line, its
text in a field), optionally .gz/.bz2, local or s3://. Each input file gives one output file.

English is split with NLTK's Punkt. A pretrained Punkt model is used when there is one (a
`punkt_tab` language directory given explicitly, or found under NLTK_DATA); otherwise Punkt's
unsupervised parameters are trained on the input itself. Either way a built-in list of common
English abbreviations is added to the model, so "Dr.", "e.g.", "U.S." do not end sentences even when
the corpus is too small for Punkt to learn them, and titles and Latin abbreviations that cannot end
a sentence ("Mr.", "e.g.") never do. Pickled `punkt` models are not loaded: unpickling runs code,
and NLTK itself stopped loading them (3.9); use `punkt_tab`.

Chinese/Japanese text is split after 。！？ (and any closing quotes or brackets that follow).
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from bert_core.data.text_inputs import DecodeReport, iter_lines, resolve_inputs, strip_suffixes
from bert_core.errors import BertPipelineError
from bert_core.io import manifest, storage

log = logging.getLogger(__name__)

STEP = "segment"
LANGUAGES = ("en", "zh")
FORMATS = ("auto", "text", "jsonl")
LINE_BREAKS = ("join", "split")
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
_PUNKT_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")

# Lower-case, without the final period, as Punkt stores abbreviation types.
ENGLISH_ABBREVIATIONS = frozenset(
    """
    mr mrs ms messrs dr prof sr jr st mt ft gen col maj lt sgt cpl capt cmdr adm gov sen rep rev hon pres
    supt insp det
    e.g i.e etc vs cf viz al approx ca dept est esp fig figs eq eqs ch sec vol vols nos pp ed eds op cit
    ibid misc min max avg incl excl
    inc ltd corp co bros mfg assn univ govt intl natl
    jan feb apr jun jul aug sept oct nov dec tue tues thu thur thurs
    ave blvd rd hwy
    u.s u.s.a u.k u.n e.u d.c n.y l.a a.m p.m ph.d m.d b.a m.a b.sc m.sc d.phil
    """.split()
)
# Abbreviations that precede what they qualify and so never end an English sentence; Punkt's
# orthographic heuristic may still split after them ("Dr. Brown" when "brown" is seen lower-case).
NEVER_FINAL = frozenset(
    "mr. mrs. ms. messrs. dr. prof. sr. gen. col. maj. lt. sgt. cpl. capt. cmdr. adm. gov. sen. rep. rev. "
    "hon. pres. supt. insp. det. e.g. i.e. cf. viz. vs.".split()
)

_CJK_SENTENCE = re.compile(r"[^。！？]*(?:[。！？]+[”’\"'」』）)》〉】〕]*|$)")


@dataclass(frozen=True)
class SegmentConfig:
    """Everything that decides the output of `segment` (recorded in its manifest)."""

    language: str = "en"
    input_format: str = "auto"  # "text", "jsonl", or "auto" from the file name (.jsonl/.ndjson/.json)
    text_field: str = "text"
    # "join": a document's lines are wrapped text (a sentence may span lines); "split": every line
    # is a paragraph of its own (a sentence never spans lines).
    line_breaks: str = "join"
    on_decode_error: str = "strict"  # "strict" (error naming file and offset) or "replace"
    punkt_model: str | None = None  # a punkt_tab language directory
    # How much input text to train Punkt on when there is no pretrained model.
    punkt_train_chars: int = 5_000_000

    def check(self) -> None:
        for name, value, allowed in (("language", self.language, LANGUAGES),
                                     ("input_format", self.input_format, FORMATS),
                                     ("line_breaks", self.line_breaks, LINE_BREAKS),
                                     ("on_decode_error", self.on_decode_error, ("strict", "replace"))):
            if value not in allowed:
                raise BertPipelineError(f"segment: {name} must be one of {allowed}, not {value!r}")
        if self.punkt_train_chars < 1:
            raise BertPipelineError("segment: punkt_train_chars must be positive")


# --------------------------------------------------------------------------------------------
# Reading documents
# --------------------------------------------------------------------------------------------


def _is_cjk(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def _join_lines(lines: list[str], language: str) -> str:
    """Wrapped lines -> one paragraph; CJK text is wrapped without spaces, so none is added there."""
    if language != "zh":
        return " ".join(lines)
    out = lines[0]
    for line in lines[1:]:
        glue = "" if out and line and (_is_cjk(out[-1]) or _is_cjk(line[0])) else " "
        out += glue + line
    return out


def _paragraphs(lines: list[str], config: SegmentConfig) -> list[str]:
    lines = [line.strip() for line in lines if line.strip()]
    if not lines:
        return []
    if config.line_breaks == "split":
        return lines
    return [_join_lines(lines, config.language)]


def file_format(uri: str, config: SegmentConfig) -> str:
    if config.input_format != "auto":
        return config.input_format
    return "jsonl" if strip_suffixes(uri).lower().endswith(_JSONL_SUFFIXES) else "text"


def iter_documents(path: Path, uri: str, config: SegmentConfig,
                   report: DecodeReport | None = None) -> Iterator[list[str]]:
    """Each document of one input as its paragraphs (a sentence never crosses a paragraph)."""
    lines = iter_lines(path, uri, config.on_decode_error, report)
    if file_format(uri, config) == "text":
        block: list[str] = []
        for line in lines:
            if line.strip():
                block.append(line)
            elif block:
                yield _paragraphs(block, config)
                block = []
        if block:
            yield _paragraphs(block, config)
        return
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BertPipelineError(f"{uri}:{lineno}: not valid JSON (column {exc.colno}: {exc.msg})") from None
        if not isinstance(record, dict):
            raise BertPipelineError(f"{uri}:{lineno}: expected a JSON object, got {type(record).__name__}")
        if config.text_field not in record:
            raise BertPipelineError(f"{uri}:{lineno}: no field {config.text_field!r} in the JSON object")
        text = record[config.text_field]
        if not isinstance(text, str):
            raise BertPipelineError(
                f"{uri}:{lineno}: field {config.text_field!r} is {type(text).__name__}, not a string"
            )
        paragraphs: list[str] = []
        for block in re.split(r"\n[ \t\r\f\v]*\n", text):
            paragraphs.extend(_paragraphs(block.split("\n"), config))
        yield paragraphs


# --------------------------------------------------------------------------------------------
# Sentence splitters
# --------------------------------------------------------------------------------------------


def load_punkt_dir(path: str | Path):
    """PunktParameters from a punkt_tab language directory (e.g. .../punkt_tab/english)."""
    from nltk.tabdata import PunktDecoder
    from nltk.tokenize.punkt import PunktParameters

    path = Path(path)
    missing = [name for name in _PUNKT_FILES if not (path / name).is_file()]
    if missing:
        raise BertPipelineError(
            f"--punkt-model {path}: not a punkt_tab language directory (missing {', '.join(missing)})"
        )
    decoder = PunktDecoder()
    params = PunktParameters()
    with open(path / "collocations.tab", encoding="utf-8") as f:
        params.collocations = set(decoder.tab2tups(f))
    with open(path / "sent_starters.txt", encoding="utf-8") as f:
        params.sent_starters = decoder.txt2set(f)
    with open(path / "abbrev_types.txt", encoding="utf-8") as f:
        params.abbrev_types = decoder.txt2set(f)
    with open(path / "ortho_context.tab", encoding="utf-8") as f:
        params.ortho_context = decoder.tab2intdict(f)
    return params


def save_punkt_dir(params, path: str | Path) -> Path:
    """Write PunktParameters as a punkt_tab language directory (the inverse of load_punkt_dir)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "collocations.tab").write_text("\n".join("\t".join(c) for c in sorted(params.collocations)),
                                           encoding="utf-8")
    (path / "sent_starters.txt").write_text("\n".join(sorted(params.sent_starters)), encoding="utf-8")
    (path / "abbrev_types.txt").write_text("\n".join(sorted(params.abbrev_types)), encoding="utf-8")
    (path / "ortho_context.tab").write_text(
        "\n".join(f"{k}\t{v}" for k, v in sorted(params.ortho_context.items())), encoding="utf-8"
    )
    return path


def _installed_punkt_dir() -> Path | None:
    import nltk.data

    try:
        found = nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        return None
    return Path(str(found)) if Path(str(found)).is_dir() else None


def train_punkt(paragraphs: Iterator[str], max_chars: int):
    """Punkt's unsupervised parameters learned from (at most max_chars of) the given text."""
    from nltk.tokenize.punkt import PunktTrainer

    trainer = PunktTrainer()
    batch: list[str] = []
    batch_chars = total = 0
    for paragraph in paragraphs:
        batch.append(paragraph)
        batch_chars += len(paragraph)
        total += len(paragraph)
        # Training in batches: one call per paragraph costs more in overhead than in training.
        if batch_chars >= 200_000:
            trainer.train("\n\n".join(batch), finalize=False)
            batch, batch_chars = [], 0
        if total >= max_chars:
            break
    if batch:
        trainer.train("\n\n".join(batch), finalize=False)
    trainer.finalize_training()
    return trainer.get_params(), total


def english_splitter(params) -> Callable[[str], list[str]]:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    params.abbrev_types = set(params.abbrev_types) | ENGLISH_ABBREVIATIONS
    tokenizer = PunktSentenceTokenizer(params)

    def split(paragraph: str) -> list[str]:
        sentences: list[str] = []
        glue = False
        for sentence in tokenizer.tokenize(paragraph):
            sentence = " ".join(sentence.split())
            if not sentence:
                continue
            if glue:
                sentences[-1] += " " + sentence
            else:
                sentences.append(sentence)
            glue = sentences[-1].rsplit(" ", 1)[-1].lower() in NEVER_FINAL
        return sentences

    return split


def cjk_split(paragraph: str) -> list[str]:
    sentences = []
    for match in _CJK_SENTENCE.finditer(paragraph):
        sentence = " ".join(match.group().split())
        if sentence:
            sentences.append(sentence)
    return sentences


def make_splitter(config: SegmentConfig, inputs: list[tuple[str, Path]]) -> tuple[Callable[[str], list[str]],
                                                                                  dict[str, Any]]:
    """The sentence splitter for this run, and a description of where its model came from."""
    if config.language == "zh":
        return cjk_split, {"splitter": "cjk-punctuation"}
    if config.punkt_model:
        params = load_punkt_dir(storage.local_path(config.punkt_model))
        info = {"splitter": "punkt", "model": str(config.punkt_model)}
    elif (installed := _installed_punkt_dir()) is not None:
        params = load_punkt_dir(installed)
        info = {"splitter": "punkt", "model": str(installed)}
    else:
        def sample() -> Iterator[str]:
            for uri, path in inputs:
                for document in iter_documents(path, uri, config):
                    yield from document

        params, chars = train_punkt(sample(), config.punkt_train_chars)
        log.info(
            "no pretrained Punkt model (no --punkt-model, no tokenizers/punkt_tab/english under NLTK_DATA): "
            "trained Punkt's unsupervised parameters on %d characters of the input (%d abbreviations, "
            "%d collocations, %d sentence starters learned), plus %d built-in English abbreviations",
            chars, len(params.abbrev_types), len(params.collocations), len(params.sent_starters),
            len(ENGLISH_ABBREVIATIONS),
        )
        info = {"splitter": "punkt", "model": "trained-on-input", "trained_chars": chars,
                "learned_abbreviations": len(params.abbrev_types)}
    return english_splitter(params), info


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def output_names(uris: list[str]) -> list[str]:
    """`dir/a.jsonl.gz` -> `a.txt`; names that collide get -2, -3, ... in input order."""
    names: list[str] = []
    used: set[str] = set()
    for uri in uris:
        base = strip_suffixes(uri.rstrip("/").rsplit("/", 1)[-1])
        stem = base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base
        name, n = f"{stem}.txt", 1
        while name in used:
            n += 1
            name = f"{stem}-{n}.txt"
        used.add(name)
        names.append(name)
    return names


def segment_file(path: Path, uri: str, out: TextIO, split: Callable[[str], list[str]],
                 config: SegmentConfig) -> dict[str, int]:
    stats = {"documents": 0, "sentences": 0, "dropped_empty_documents": 0}
    report = DecodeReport()
    for document in iter_documents(path, uri, config, report):
        sentences = [s for paragraph in document for s in split(paragraph)]
        if not sentences:
            stats["dropped_empty_documents"] += 1
            continue
        if stats["documents"]:
            out.write("\n")
        out.write("\n".join(sentences))
        out.write("\n")
        stats["documents"] += 1
        stats["sentences"] += len(sentences)
    if report.replaced_bytes or report.removed_nuls:
        log.warning("%s: replaced %d undecodable byte sequence(s) with U+FFFD and dropped %d NUL byte(s) "
                    "(first at byte offset %s)", uri, report.replaced_bytes, report.removed_nuls,
                    report.first_offset)
        stats["replaced_bytes"] = report.replaced_bytes
        stats["removed_nul_bytes"] = report.removed_nuls
    if report.bytes == 0:
        log.warning("%s: empty input; its output is empty", uri)
    elif not stats["documents"]:
        log.warning("%s: no text in the input; its output is empty", uri)
    return stats


def segment(inputs: list[str], output: str, config: SegmentConfig | None = None,
            overwrite: bool = False) -> dict[str, Any]:
    """Run the step: segment every input into `output` (a directory or s3:// prefix); return the manifest."""
    config = config or SegmentConfig()
    config.check()
    started = manifest.now()
    uris = resolve_inputs(inputs)
    local = [(uri, storage.local_file(uri)) for uri in uris]
    hashes = {uri: manifest.sha256_file(path) for uri, path in local}
    if manifest.is_up_to_date(output, STEP, config, hashes):
        log.info("%s already holds the segmentation of these inputs with this config: nothing to do", output)
        return manifest.read(output)
    split, splitter_info = make_splitter(config, local)
    names = output_names(uris)
    files = []
    with storage.atomic_output_dir(output, overwrite=overwrite) as tmp:
        for (uri, path), name in zip(local, names):
            with open(tmp / name, "w", encoding="utf-8", newline="\n") as out:
                stats = segment_file(path, uri, out, split, config)
            log.info("%s -> %s: %d documents, %d sentences", uri, name, stats["documents"], stats["sentences"])
            files.append({"input": uri, "output": name, **stats})
        totals = {key: sum(f[key] for f in files) for key in ("documents", "sentences", "dropped_empty_documents")}
        result = manifest.build(STEP, config, hashes, tmp, names, started,
                                extra={"sentence_splitter": splitter_info, "files": files, "totals": totals})
        manifest.write(result, tmp)
    return result
