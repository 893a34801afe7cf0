"""`manifest.json`: what every step wrote, from what, with which config (the contract of ARCHITECTURE §2).

A manifest records the step name, its config, input URIs with sha256, output paths (relative to
the output directory) with sha256, start/finish times and, for training/evaluation steps, metrics.
Steps are idempotent through it: `is_up_to_date` says whether an output directory already holds
the result of the same step, config and inputs, with outputs intact.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError

MANIFEST = "manifest.json"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _jsonable(config: Any) -> Any:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    return json.loads(json.dumps(config, default=str))


def _input_uris(inputs: dict[str, str]) -> dict[str, str]:
    """Inputs by the URI they were read from: a file read through the local copy of an s3:// prefix is recorded by
    its s3:// URI, which the next task, on any machine, can resolve (ARCHITECTURE §2: inputs are URIs)."""
    from bert_core.io import storage

    return {storage.source_uri(uri): digest for uri, digest in inputs.items()}


def build(step: str, config: Any, inputs: dict[str, str], out_dir: str | os.PathLike,
          outputs: list[str], started_at: str, metrics: dict[str, float] | None = None,
          extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A manifest dict; `inputs` maps URI -> sha256, `outputs` are paths relative to out_dir (hashed here)."""
    out = Path(out_dir)
    manifest: dict[str, Any] = {
        "step": step,
        "config": _jsonable(config),
        "inputs": [{"uri": uri, "sha256": digest} for uri, digest in sorted(_input_uris(inputs).items())],
        "outputs": [{"path": rel, "sha256": sha256_file(out / rel)} for rel in sorted(outputs)],
        "started_at": started_at,
        "finished_at": now(),
    }
    if metrics is not None:
        manifest["metrics"] = {k: float(v) for k, v in metrics.items()}
    if extra:
        manifest.update(_jsonable(extra))
    return manifest


def write(manifest: dict[str, Any], out_dir: str | os.PathLike) -> Path:
    """Write manifest.json atomically (temp file + rename): it is the mark of a complete output."""
    path = Path(out_dir) / MANIFEST
    tmp = path.with_name(f".{MANIFEST}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read(out_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a local output directory or an s3:// output prefix."""
    from bert_core.io import storage
    path = storage.join(str(out_dir), MANIFEST)
    try:
        data = json.loads(storage.read_text(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no manifest (the step has not completed here)") from None
    except json.JSONDecodeError as exc:
        raise BertPipelineError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    for key in ("step", "config", "inputs", "outputs"):
        if key not in data:
            raise BertPipelineError(f"{path}: manifest lacks the field {key!r}")
    return data


def verify_outputs(out_dir: str | os.PathLike, manifest: dict[str, Any] | None = None) -> list[str]:
    """Problems with the outputs a manifest lists (missing or changed files); empty when intact.

    Under an s3:// prefix every listed output must be there (one listing of the prefix); their hashes are not
    read back, which would download the whole output: the manifest is uploaded last, after every output it
    lists (storage.atomic_output_dir), and objects are written whole."""
    from bert_core.io import storage

    manifest = manifest if manifest is not None else read(out_dir)
    if storage.is_s3(str(out_dir)):
        present = set(storage.list_files(str(out_dir)))
        return [f"{entry['path']}: missing" for entry in manifest["outputs"] if entry["path"] not in present]
    out = storage.local_path(out_dir)
    problems = []
    for entry in manifest["outputs"]:
        path = out / entry["path"]
        if not path.is_file():
            problems.append(f"{entry['path']}: missing")
        elif sha256_file(path) != entry["sha256"]:
            problems.append(f"{entry['path']}: sha256 differs from the manifest")
    return problems


def is_up_to_date(out_dir: str | os.PathLike, step: str, config: Any, inputs: dict[str, str]) -> bool:
    """True when out_dir already holds this step's complete result for this config and these inputs."""
    try:
        manifest = read(out_dir)
    except (FileNotFoundError, BertPipelineError):
        return False
    same = (manifest["step"] == step and manifest["config"] == _jsonable(config)
            and {i["uri"]: i["sha256"] for i in manifest["inputs"]} == _input_uris(inputs))
    return same and not verify_outputs(out_dir, manifest)
