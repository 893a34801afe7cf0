"""Text inputs for the data steps: expanding globs/directories/s3 URIs, and streaming UTF-8 lines.

Compressed inputs (.gz, .bz2) are recognised by their magic bytes, not their names, and read as
streams, so memory does not grow with file size. s3:// objects are fetched to the local cache
first (under a temporary name, then renamed) so that hashing and reading see the same bytes.
Undecodable bytes are an error naming the file, line and byte offset, unless the caller asks for
replacement, which is then counted and reported.
"""

from __future__ import annotations

import bz2
import fnmatch
import glob
import gzip
import io
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from bert_core.errors import BertPipelineError
from bert_core.io import storage

log = logging.getLogger(__name__)

COMPRESSED_SUFFIXES = (".gz", ".bz2")
_GLOB_CHARS = set("*?[")
# Files a step writes beside its data; never read back as text when a directory is given as input.
_SKIPPED_NAMES = {"manifest.json", "validation.json"}


def _has_glob(text: str) -> bool:
    return any(c in _GLOB_CHARS for c in text)


def _s3_matches(pattern: str) -> list[str]:
    bucket, key = storage.split_s3(pattern)
    if not _has_glob(key):
        client = storage.s3_client()
        if key and not key.endswith("/"):
            try:
                client.head_object(Bucket=bucket, Key=key)
                return [pattern]
            except client.exceptions.ClientError:
                pass  # not an object: a prefix, listed below
        base = pattern.rstrip("/")
        return [storage.join(base, name) for name in storage.list_files(base)
                if Path(name).name not in _SKIPPED_NAMES and not Path(name).name.startswith(".")]
    # List from the longest literal directory prefix, then match the whole key.
    literal = key[: min(key.index(c) for c in _GLOB_CHARS if c in key)]
    prefix = literal[: literal.rfind("/") + 1]
    names = storage.list_files(f"s3://{bucket}/{prefix}".rstrip("/"))
    return [f"s3://{bucket}/{prefix}{name}" for name in names
            if fnmatch.fnmatchcase(prefix + name, key) and Path(name).name not in _SKIPPED_NAMES]


def resolve_inputs(patterns: Sequence[str]) -> list[str]:
    """Files named by paths, globs, directories (every visible file inside) or s3:// URIs/globs/prefixes.

    Order is the order of the patterns, each pattern's matches sorted, so that it does not depend on
    the file system; a file named twice is read once. A pattern that matches nothing is an error.
    """
    if not patterns:
        raise BertPipelineError("no input given")
    if all(storage.local_path(p).name in _SKIPPED_NAMES for p in patterns if not storage.is_s3(p)) and not any(
            storage.is_s3(p) for p in patterns):
        raise BertPipelineError(f"input {', '.join(patterns)}: a step's manifest, not text; give the data files "
                                "(or their directory) instead")
    result: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        if storage.is_s3(pattern):
            matches = sorted(_s3_matches(pattern))
        else:
            path = storage.local_path(pattern)
            if path.is_dir():
                matches = sorted(
                    str(p) for p in path.rglob("*")
                    if p.is_file() and p.name not in _SKIPPED_NAMES
                    and not any(part.startswith(".") for part in p.relative_to(path).parts)
                )
            elif _has_glob(str(path)):
                # `seg/*` over a step's output must not pick up the step's own manifest as corpus text.
                matches = sorted(p for p in glob.glob(str(path), recursive=True)
                                 if os.path.isfile(p) and Path(p).name not in _SKIPPED_NAMES)
            elif path.is_file():
                if path.name in _SKIPPED_NAMES:
                    # The shell expands `seg/*` before we see it: the step's own manifest arrives by name.
                    log.info("input %s: skipped (a step's %s, not text)", pattern, path.name)
                    continue
                matches = [str(path)]
            else:
                raise BertPipelineError(f"input {pattern}: no such file or directory")
        if not matches:
            raise BertPipelineError(f"input {pattern}: matches no file")
        for match in matches:
            key = match if storage.is_s3(match) else str(Path(match).absolute())
            if key not in seen:
                seen.add(key)
                result.append(key)
    return result


def strip_suffixes(name: str) -> str:
    """`corpus.jsonl.gz` -> `corpus.jsonl`."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def open_binary(path: str | os.PathLike) -> BinaryIO:
    """The decompressed byte stream of a file (gzip and bzip2 recognised by their magic bytes)."""
    raw = open(path, "rb")  # returned to the caller, who closes it
    head = raw.peek(3)[:3] if isinstance(raw, io.BufferedReader) else b""
    if head[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if head == b"BZh":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    return raw


@dataclass
class DecodeReport:
    """What replacement mode changed in one file (for the log and the manifest)."""

    replaced_bytes: int = 0
    removed_nuls: int = 0
    first_offset: int | None = None
    lines: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)


# What a strict reader's error tells the user to do, by who reads: `segment` has the flag; the steps after it read
# its output, so the bytes are mended where they came in.
SEGMENT_REMEDY = "pass --on-decode-error replace to {fix}"
SEGMENTED_REMEDY = "this reads segmented text: run `segment --on-decode-error replace` on the raw text to {fix}"


def iter_lines(path: str | os.PathLike, name: str | None = None, errors: str = "strict",
               report: DecodeReport | None = None, remedy: str = SEGMENT_REMEDY) -> Iterator[str]:
    """UTF-8 lines of a (possibly compressed) text file, without their line endings, streamed.

    errors="strict": a NUL byte (binary data) or invalid UTF-8 raises BertPipelineError naming the
    file, line and byte offset (of the decompressed stream for compressed files) and `remedy`.
    errors="replace": invalid bytes become U+FFFD and NUL bytes are dropped, counted in `report`.
    """
    if errors not in ("strict", "replace"):
        raise BertPipelineError(f"errors must be 'strict' or 'replace', not {errors!r}")
    name = name or str(path)
    report = report if report is not None else DecodeReport()
    offset = 0
    try:
        stream = open_binary(path)
    except OSError as exc:
        raise BertPipelineError(f"{name}: cannot open ({exc})") from None
    with stream:
        lineno = 0
        while True:
            try:
                raw = stream.readline()
            except (OSError, EOFError, ValueError) as exc:
                # A truncated or corrupt .gz/.bz2 ends here, not with a silently short corpus.
                raise BertPipelineError(
                    f"{name}: cannot decompress after byte {offset} of the decompressed stream ({exc})"
                ) from None
            if not raw:
                break
            lineno += 1
            length = len(raw)
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
                offset += 3
                length -= 3
            nul = raw.find(b"\0")
            if nul >= 0:
                if errors == "strict":
                    raise BertPipelineError(
                        f"{name}: binary data, not text: NUL byte at byte offset {offset + nul} (line {lineno}); "
                        + remedy.format(fix="drop such bytes")
                    )
                report.removed_nuls += raw.count(b"\0")
                report.first_offset = offset + nul if report.first_offset is None else report.first_offset
                raw = raw.replace(b"\0", b"")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if errors == "strict":
                    bad = raw[exc.start: exc.start + 1].hex()
                    raise BertPipelineError(
                        f"{name}: not UTF-8 text: invalid byte 0x{bad} at byte offset {offset + exc.start} "
                        f"(line {lineno}); " + remedy.format(fix="replace such bytes with U+FFFD")
                    ) from None
                text = raw.decode("utf-8", errors="replace")
                report.replaced_bytes += text.count("\ufffd") - raw.decode("utf-8", "ignore").count("\ufffd")
                if report.first_offset is None:
                    report.first_offset = offset + exc.start
            offset += length
            yield text.rstrip("\r\n")
        report.lines = lineno
        report.bytes = offset
