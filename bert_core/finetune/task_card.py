"""What a fine-tuned model directory needs to be used for its task without the run that made it.

Fine-tuning writes two small files next to `config.json`, `model.safetensors` and `vocab.txt`:

- `task.json` (the card): which task and head, and the input settings the model was trained and scored
  with (max tokens per example, SQuAD windowing and answer selection). Serving reads it, so a registered
  model tokenizes, truncates and decodes exactly as its evaluation did.
- `check_examples.json`: a few dev examples as serving requests, each with the prediction the scored
  evaluation made for it. Promotion runs the registered artifact on them and requires the same answers.

Importable without torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.finetune.config import SquadOptions, renamed_settings

CARD = "task.json"
CHECKS = "check_examples.json"
KINDS = ("classification", "regression", "squad", "ner")


@dataclass
class TaskCard:
    task: str  # canonical task name (bert_core.tasks.catalog)
    kind: str  # classification | regression | squad | ner
    # Tokens per input sequence: a classification/regression/NER example is cut to it (longest text first), a
    # SQuAD context read in windows of it. (Cards written before 2026-11 also have `max_len`: read_card.)
    max_seq_length: int
    squad: dict[str, Any] = field(default_factory=dict)  # SquadOptions fields

    def squad_options(self) -> SquadOptions:
        return SquadOptions(**self.squad)


def card_from_config(task: str, kind: str, cfg) -> TaskCard:
    """The card of a FinetuneConfig-like `cfg` (it has max_seq_length and the SquadOptions fields)."""
    return TaskCard(task=task, kind=kind, max_seq_length=cfg.max_seq_length,
                    squad=asdict(SquadOptions(**{k: getattr(cfg, k) for k in SquadOptions.__dataclass_fields__})))


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_card(model_dir: str | os.PathLike, card: TaskCard) -> None:
    _write_json(Path(model_dir) / CARD, asdict(card))


def read_card(model_dir: str | os.PathLike) -> TaskCard | None:
    """The card of a model directory; None for a directory without one (a pretrained encoder)."""
    path = Path(model_dir) / CARD
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object, got {type(data).__name__}")
        card = TaskCard(**renamed_settings(data, data.get("kind", ""), str(path)))
    except (json.JSONDecodeError, TypeError) as exc:
        raise BertPipelineError(f"{path}: not a task card written by bert-pipeline finetune ({exc})") from None
    if card.kind not in KINDS:
        raise BertPipelineError(f"{path}: field 'kind' is {card.kind!r}, expected one of {', '.join(KINDS)}")
    unknown = set(card.squad) - set(SquadOptions.__dataclass_fields__)
    if unknown:
        raise BertPipelineError(f"{path}: field 'squad' has unknown settings {sorted(unknown)}")
    return card


def write_checks(model_dir: str | os.PathLike, checks: list[dict[str, Any]]) -> None:
    """`checks`: [{"input": a serving request record, "expected": the scored prediction}, ...]."""
    _write_json(Path(model_dir) / CHECKS, checks)


def read_checks(model_dir: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(model_dir) / CHECKS
    if not path.is_file():
        return []
    return json.loads(path.read_text(encoding="utf-8"))
