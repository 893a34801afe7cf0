"""The `validate-shards` step: a great-expectations suite over the shards of `make-shards` and their manifest.

Each shard is turned into small pandas DataFrames of derived values (one row per array, per
instance, per shard) and validated with GX 1.x expectations on an ephemeral context:

* `arrays` (per shard): keys, dtypes and shapes of ARCHITECTURE §5, shapes matching the manifest's
  max_seq_length / max_predictions_per_seq.
* `instances` (per shard): ids inside the vocabulary; [CLS] at 0; exactly two [SEP], the last at the
  end of the valid length; A and B non-empty; segment ids 0 through the first [SEP], 1 after, 0 in
  padding; padding all 0; predictions sorted, unique, inside the valid length, never on [CLS]/[SEP];
  their count as Google's rule gives it; [MASK] shown nowhere else; labels 0/1.
  Checks read the *original* tokens (masked ids put back): a random replacement may be any vocabulary
  id, [SEP] included, as in Google's script.
* `statistics` (one row per shard plus one for all shards): the fraction of tokens predicted against
  the configuration, the 80/10/10 split of what predicted positions show, and the random-next
  fraction, each within a tolerance of max(absolute tolerance, 4 standard deviations for that many
  draws), so that small shards are not failed for being small.
* `manifest` (one row per shard listed or present): listed, present, sha256 and instance count as
  recorded.

A violation fails the step naming the expectation, the check and the shard(s) it failed in.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bert_core.data import shard_format as shards
from bert_core.data.instances import prediction_budget
from bert_core.errors import BertPipelineError
from bert_core.io import manifest, storage

log = logging.getLogger(__name__)

STEP = "validate-shards"
_ROWS_PER_RUN = 200_000  # instances per GX run: ~25 derived columns, tens of MB
RESULT_FILE = "validation.json"
ALL = "(all shards)"


@dataclass(frozen=True)
class ValidationConfig:
    """Tolerances of the statistical checks (absolute; widened to 4 standard deviations for few draws)."""

    masked_fraction_tolerance: float = 0.01  # predicted tokens / valid tokens vs Google's rule
    mask_split_tolerance: float = 0.02  # 80% [MASK], 10% kept, 10% random
    random_next_tolerance: float = 0.05  # below one half
    # Google's algorithm gives a document's single-sentence chunks a random next only, so the fraction
    # is above one half, more so for corpora of short documents.
    max_random_next: float = 0.75
    examples: int = 5  # failing rows named per shard


# --------------------------------------------------------------------------------------------
# Derived frames
# --------------------------------------------------------------------------------------------


def arrays_frame(name: str, arrays: dict[str, np.ndarray], max_seq_length: int, predictions: int):
    import pandas as pd

    dims = {"N": None, "T": max_seq_length, "P": predictions}
    rows = []
    for key in sorted(set(arrays) | set(shards.KEYS)):
        expected = shards.SCHEMA.get(key)
        array = arrays.get(key)
        shape_ok = False
        if array is not None and expected is not None and array.ndim == len(expected[1]):
            shape_ok = True
            for dim, size in zip(expected[1], array.shape):
                if dims[dim] is None:
                    dims[dim] = size
                shape_ok &= dims[dim] == size
        rows.append({
            "shard": name, "key": key, "present": array is not None,
            "dtype": str(array.dtype) if array is not None else "missing",
            "expected_dtype": str(expected[0]) if expected else "not in the schema",
            "shape_ok": shape_ok,
        })
    return pd.DataFrame(rows)


def _original_ids(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(original ids, real-prediction mask [N,P], positions clipped into range [N,P])."""
    ids = arrays["input_ids"]
    t = ids.shape[1]
    real = arrays["masked_lm_weights"] > 0
    positions = np.clip(arrays["masked_lm_positions"], 0, t - 1)
    original = ids.copy()
    rows = np.nonzero(real)[0]
    original[rows, positions[real]] = arrays["masked_lm_ids"][real]
    return original, real, positions


def instances_frame(name: str, arrays: dict[str, np.ndarray], vocab: dict[str, Any], config: dict[str, Any]):
    import pandas as pd

    ids, segments = arrays["input_ids"], arrays["segment_ids"]
    lengths = arrays["valid_lengths"].astype(np.int64)
    n, t = ids.shape
    labels, weights = arrays["masked_lm_ids"], arrays["masked_lm_weights"]
    original, real, positions = _original_ids(arrays)
    cls_id, sep_id, mask_id, size = vocab["cls_id"], vocab["sep_id"], vocab["mask_id"], vocab["size"]
    column = np.arange(t)[None, :]
    clipped = np.clip(lengths, 1, t)
    inside = column < lengths[:, None]
    is_sep = (original == sep_id) & inside
    first_sep = np.where(is_sep, column, t).min(axis=1)
    predicted = np.zeros_like(inside)
    predicted[np.nonzero(real)[0], positions[real]] = True
    count = real.sum(axis=1)
    p = weights.shape[1]
    expected_count = prediction_budget(lengths, config["masked_lm_prob"], config["max_predictions_per_seq"])
    mask_label = np.where(real, labels, -1)
    return pd.DataFrame({
        "shard": name,
        "instance": np.arange(n),
        "valid_length_in_range": (lengths >= 5) & (lengths <= t),
        "ids_in_vocab": ((ids >= 0) & (ids < size)).all(axis=1)
        & np.where(real, (labels >= 0) & (labels < size), True).all(axis=1),
        "cls_ok": original[:, 0] == cls_id,
        "sep_count": is_sep.sum(axis=1),
        "ends_with_sep": original[np.arange(n), clipped - 1] == sep_id,
        "a_and_b_nonempty": (first_sep >= 2) & (lengths - first_sep >= 3),
        "segment_ids_ok": (segments == ((column > first_sep[:, None]) & inside)).all(axis=1),
        "padding_zero": ((ids == 0) | inside).all(axis=1),
        "mask_in_range": np.where(real, (arrays["masked_lm_positions"] > 0)
                                  & (arrays["masked_lm_positions"] < lengths[:, None]), True).all(axis=1),
        "mask_positions_unique": np.where(real[:, 1:], np.diff(arrays["masked_lm_positions"], axis=1) > 0,
                                          True).all(axis=1),
        "mask_not_on_cls_sep": ~np.isin(mask_label, [cls_id, sep_id]).any(axis=1),
        "weights_ok": (real == (np.arange(p)[None, :] < count[:, None])).all(axis=1)
        & np.isin(weights, [0.0, 1.0]).all(axis=1),
        "prediction_padding_zero": np.where(real, True, (arrays["masked_lm_positions"] == 0) & (labels == 0)).all(axis=1),
        "mask_shown_elsewhere": ((ids == mask_id) & inside & ~predicted).sum(axis=1),
        "prediction_count_gap": expected_count - count,
        "next_sentence_label": arrays["next_sentence_labels"].astype(np.int64),
        "segment_values_ok": np.isin(segments, [0, 1]).all(axis=1),
    })


def shard_statistics(arrays: dict[str, np.ndarray], mask_id: int, masked_lm_prob: float) -> dict[str, float]:
    original, real, positions = _original_ids(arrays)
    shown = arrays["input_ids"][np.nonzero(real)[0], positions[real]]
    labels = arrays["masked_lm_ids"][real]
    return {
        "instances": int(len(arrays["input_ids"])),
        "tokens": int(arrays["valid_lengths"].sum()),
        "predictions": int(real.sum()),
        "shown_mask": int((shown == mask_id).sum()),
        "shown_original": int(((shown == labels) & (shown != mask_id)).sum()),
        "random_next": int(arrays["next_sentence_labels"].sum()),
        "expected_predictions": int(prediction_budget(arrays["valid_lengths"], masked_lm_prob,
                                                      arrays["masked_lm_positions"].shape[1]).sum()),
    }


def statistics_frame(per_shard: dict[str, dict[str, float]], config: dict[str, Any], tol: ValidationConfig):
    """One row per shard and one for all shards: observed minus expected, in units of the allowed tolerance."""
    import pandas as pd

    total = {key: sum(s[key] for s in per_shard.values()) for key in next(iter(per_shard.values()))}
    rows = []
    for name, s in [*per_shard.items(), (ALL, total)]:
        def deviation(observed: float, expected: float, n: int, absolute: float) -> float:
            if n == 0:
                return 0.0
            sigma = math.sqrt(max(expected * (1 - expected), 1e-12) / n)
            return (observed / n - expected) / max(absolute, 4 * sigma)

        predictions, tokens, instances = s["predictions"], s["tokens"], s["instances"]
        expected_fraction = s["expected_predictions"] / tokens if tokens else 0.0
        if config.get("whole_word_mask"):
            # Whole words that would exceed the budget are skipped: a little under the budget is normal.
            expected_fraction *= 0.97
        random_next = s["random_next"] / instances if instances else 0.5
        random_tol = max(tol.random_next_tolerance, 4 * math.sqrt(0.25 / max(instances, 1)))
        rows.append({
            "shard": name,
            "masked_fraction_deviation": deviation(predictions, expected_fraction, tokens,
                                                   tol.masked_fraction_tolerance),
            "shown_mask_deviation": deviation(s["shown_mask"], 0.8, predictions, tol.mask_split_tolerance),
            "shown_original_deviation": deviation(s["shown_original"], 0.1, predictions, tol.mask_split_tolerance),
            "random_next_fraction": random_next,
            "random_next_low": 0.5 - random_tol,
            "random_next_high": max(tol.max_random_next, 0.5 + random_tol),
        })
    return pd.DataFrame(rows)


def manifest_frame(directory: Path, recorded: dict[str, Any], counts: dict[str, int]):
    import pandas as pd

    listed = {entry["path"]: entry for entry in recorded.get("shards", [])}
    outputs = {entry["path"]: entry["sha256"] for entry in recorded.get("outputs", [])}
    present = {p.name for p in shards.list_shards(directory)}
    rows = []
    for name in sorted(set(listed) | present):
        entry = listed.get(name, {})
        exists = name in present
        digest = manifest.sha256_file(directory / name) if exists else None
        rows.append({
            "shard": name, "listed": name in listed, "present": exists,
            "sha256_matches": exists and digest == entry.get("sha256") == outputs.get(name, entry.get("sha256")),
            "count_matches": exists and counts.get(name) == entry.get("instances"),
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# Suites
# --------------------------------------------------------------------------------------------


def _suites(gx, seq_config: dict[str, Any]) -> dict[str, list]:
    E = gx.expectations
    whole_word = bool(seq_config.get("whole_word_mask"))

    def is_true(column: str, check: str) -> Any:
        return E.ExpectColumnValuesToBeInSet(column=column, value_set=[True], meta={"check": check})

    return {
        "arrays": [
            E.ExpectColumnValuesToBeInSet(column="key", value_set=list(shards.KEYS),
                                          meta={"check": "no key outside the schema"}),
            is_true("present", "every key of the schema present"),
            E.ExpectColumnPairValuesToBeEqual(column_A="dtype", column_B="expected_dtype",
                                              meta={"check": "dtypes of the schema"}),
            is_true("shape_ok", "shapes [N,T]/[N]/[N,P] consistent, T and P as configured"),
        ],
        "instances": [
            is_true("valid_length_in_range", "valid length between 5 and max_seq_length"),
            is_true("ids_in_vocab", "ids inside the vocabulary"),
            is_true("cls_ok", "[CLS] at position 0"),
            E.ExpectColumnValuesToBeInSet(column="sep_count", value_set=[2], meta={"check": "exactly two [SEP]"}),
            is_true("ends_with_sep", "[SEP] at the end of the valid length"),
            is_true("a_and_b_nonempty", "segments A and B non-empty"),
            is_true("segment_ids_ok", "segment ids 0 through the first [SEP], 1 after, 0 in padding"),
            E.ExpectColumnValuesToBeInSet(column="segment_values_ok", value_set=[True],
                                          meta={"check": "segment ids are 0 or 1"}),
            is_true("padding_zero", "input ids 0 in padding"),
            is_true("mask_in_range", "masked positions inside the valid length, never position 0"),
            is_true("mask_positions_unique", "masked positions sorted and unique"),
            is_true("mask_not_on_cls_sep", "no prediction on [CLS]/[SEP]"),
            is_true("weights_ok", "masked_lm_weights 1.0 for predictions, then 0.0"),
            is_true("prediction_padding_zero", "masked_lm_positions/ids 0 after the predictions"),
            E.ExpectColumnValuesToBeBetween(column="mask_shown_elsewhere", min_value=0, max_value=0,
                                            meta={"check": "[MASK] only at predicted positions"}),
            E.ExpectColumnValuesToBeBetween(
                column="prediction_count_gap", min_value=0,
                max_value=int(seq_config["max_predictions_per_seq"]) if whole_word else 0,
                meta={"check": "predictions = min(max_predictions_per_seq, max(1, round(length * masked_lm_prob)))"
                      + (" or fewer (whole words)" if whole_word else "")}),
            E.ExpectColumnValuesToBeInSet(column="next_sentence_label", value_set=[0, 1],
                                          meta={"check": "next sentence labels 0/1"}),
        ],
        "statistics": [
            E.ExpectColumnValuesToBeBetween(column="masked_fraction_deviation", min_value=-1, max_value=1,
                                            meta={"check": "fraction of tokens predicted as configured"}),
            E.ExpectColumnValuesToBeBetween(column="shown_mask_deviation", min_value=-1, max_value=1,
                                            meta={"check": "80% of predictions shown as [MASK]"}),
            E.ExpectColumnValuesToBeBetween(column="shown_original_deviation", min_value=-1, max_value=1,
                                            meta={"check": "10% of predictions shown unchanged"}),
            E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="random_next_fraction", column_B="random_next_low",
                                                      or_equal=True, meta={"check": "random next about half"}),
            E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="random_next_high", column_B="random_next_fraction",
                                                      or_equal=True, meta={"check": "random next not far above half"}),
        ],
        "manifest": [
            is_true("listed", "every shard present is listed in manifest.json"),
            is_true("present", "every shard listed in manifest.json is present"),
            is_true("sha256_matches", "shard sha256 as recorded in manifest.json"),
            is_true("count_matches", "shard instance count as recorded in manifest.json"),
        ],
    }


def _import_gx():
    """great_expectations, without its chatter: hundreds of INFO lines at import ("Skipping registering
    function ...") and more per context. Its modules set their loggers to INFO themselves, so the
    level is lowered on each after import, and logging is muted during the import."""
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        import great_expectations as gx
    finally:
        logging.disable(previous)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("great_expectations"):
            logging.getLogger(name).setLevel(logging.WARNING)
    return gx


class _Validator:
    """One GX ephemeral context with a suite per frame kind; runs a frame and collects failures."""

    def __init__(self, seq_config: dict[str, Any], examples: int) -> None:
        gx = _import_gx()
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        source = self.context.data_sources.add_pandas(name="bert-shards")
        self.definitions = {}
        for kind, expectations in _suites(gx, seq_config).items():
            suite = self.context.suites.add(gx.ExpectationSuite(name=f"bert-shards-{kind}"))
            for expectation in expectations:
                suite.add_expectation(expectation)
            batch = source.add_dataframe_asset(name=kind).add_batch_definition_whole_dataframe(f"{kind}-frame")
            self.definitions[kind] = self.context.validation_definitions.add(
                gx.ValidationDefinition(data=batch, suite=suite, name=f"validate-{kind}"))
        self.examples = examples
        self.checks: dict[tuple[str, str], dict[str, Any]] = {}

    def run(self, kind: str, frame, row_label: str = "instance") -> bool:
        result = self.definitions[kind].run(batch_parameters={"dataframe": frame},
                                            result_format={"result_format": "COMPLETE"})
        for item in result.results:
            config = item.expectation_config
            column = config.kwargs.get("column") or f"{config.kwargs.get('column_A')} vs {config.kwargs.get('column_B')}"
            key = (config.type, str(config.meta.get("check")))
            check = self.checks.setdefault(key, {
                "expectation": config.type, "column": column, "check": config.meta.get("check"),
                "suite": f"bert-shards-{kind}", "success": True, "failures": []})
            if item.success:
                continue
            check["success"] = False
            check["failures"].extend(self._failures(frame, item.result, row_label))
        return bool(result.success)

    def _failures(self, frame, result: dict[str, Any], row_label: str) -> list[dict[str, Any]]:
        indexes = result.get("unexpected_index_list")
        if not indexes:  # a table-level expectation (row count): the frame's shard(s)
            return [{"shard": shard, "observed": _plain(result.get("observed_value"))}
                    for shard in dict.fromkeys(frame["shard"])]
        failures: dict[str, dict[str, Any]] = {}
        for index in indexes:
            index = index if isinstance(index, int) else next(iter(index.values()), index)
            row = frame.iloc[int(index)]
            entry = failures.setdefault(str(row["shard"]), {"shard": str(row["shard"]), "count": 0, "examples": []})
            entry["count"] += 1
            if len(entry["examples"]) < self.examples and row_label in frame.columns:
                entry["examples"].append(_plain(row[row_label]))
            elif len(entry["examples"]) < self.examples and "key" in frame.columns:
                entry["examples"].append(str(row["key"]))
        return list(failures.values())


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def _describe(check: dict[str, Any]) -> str:
    where = []
    for failure in check["failures"]:
        text = failure["shard"]
        if "count" in failure:
            text += f" ({failure['count']} row(s), e.g. {', '.join(map(str, failure['examples']))})"
        elif failure.get("observed") is not None:
            text += f" (observed {failure['observed']})"
        where.append(text)
    return f"{check['expectation']} on {check['column']} [{check['check']}] failed in {'; '.join(where)}"


def _empty_side(recorded: dict[str, Any]) -> str | None:
    """Why a make-shards output holds no shard, when its manifest records that it has none by design: one side
    of a held-out split that none of the inputs' documents fell on (make_shards' `empty_side_ok`). None when it
    should hold shards."""
    totals = recorded.get("totals") or {}
    by_design = (recorded.get("empty_side") and not recorded.get("shards") and not recorded.get("outputs")
                 and totals.get("instances") == 0 and totals.get("other_side_documents", 0) > 0
                 and (recorded.get("config") or {}).get("split") in ("train", "heldout"))
    return str(recorded["empty_side"]) if by_design else None


def validate_shards(shards_dir: str, output: str | None = None, vocab_file: str | None = None,
                    config: ValidationConfig | None = None) -> dict[str, Any]:
    """Validate a make-shards output; write validation.json (the step's record); return the result dict.

    The result has `success`, the failed checks (expectation, check, shards), all checks, and the
    statistics. It does not raise on a failed expectation: callers decide (the CLI exits non-zero).
    """
    config = config or ValidationConfig()
    started = manifest.now()
    directory = storage.local_dir(shards_dir)
    recorded = manifest.read(directory)
    if recorded.get("step") != "make-shards":
        raise BertPipelineError(f"{shards_dir}: manifest.json is from step {recorded.get('step')!r}, not make-shards")
    seq_config = recorded["config"]
    vocab = recorded.get("vocab") or {}
    if vocab_file is not None:
        from bert_core.data.instances import Vocab
        from bert_core.model.tokenization import load_vocab

        local_vocab = storage.local_file(vocab_file)
        digest = manifest.sha256_file(local_vocab)
        if vocab.get("sha256") and digest != vocab["sha256"]:
            raise BertPipelineError(f"--vocab {vocab_file}: sha256 {digest[:12]}... differs from the vocab the "
                                    f"shards were made with ({vocab['sha256'][:12]}...)")
        table = load_vocab(local_vocab)
        ids = Vocab.from_dict(table)
        vocab = {"sha256": digest, "size": max(table.values()) + 1, "cls_id": ids.cls_id, "sep_id": ids.sep_id,
                 "mask_id": ids.mask_id}
    missing = [k for k in ("size", "cls_id", "sep_id", "mask_id") if k not in vocab]
    if missing:
        raise BertPipelineError(f"{shards_dir}: manifest.json records no vocab {', '.join(missing)}; pass --vocab")

    validator = _Validator(seq_config, config.examples)
    import pandas as pd

    per_shard: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    files = shards.list_shards(directory)
    array_frames, instance_frames, pending_rows = [], [], 0
    # Frames of many shards are validated together (a GX run has a fixed cost), up to a bounded size.
    for path in files:
        arrays = shards.read_shard(path, check=False)
        array_frames.append(arrays_frame(path.name, arrays, int(seq_config["max_seq_length"]),
                                         int(seq_config["max_predictions_per_seq"])))
        fits = all(array_frames[-1]["present"]) and all(array_frames[-1]["shape_ok"]) and len(array_frames[-1]) == len(
            shards.KEYS) and all(array_frames[-1]["dtype"] == array_frames[-1]["expected_dtype"])
        if not fits:
            log.warning("%s: schema violated; its instances are not checked", path.name)
            continue
        counts[path.name] = shards.num_instances(arrays)
        instance_frames.append(instances_frame(path.name, arrays, vocab, seq_config))
        per_shard[path.name] = shard_statistics(arrays, int(vocab["mask_id"]), float(seq_config["masked_lm_prob"]))
        pending_rows += counts[path.name]
        if pending_rows >= _ROWS_PER_RUN:
            validator.run("instances", pd.concat(instance_frames, ignore_index=True))
            instance_frames, pending_rows = [], 0
    if instance_frames:
        validator.run("instances", pd.concat(instance_frames, ignore_index=True))
    if array_frames:
        validator.run("arrays", pd.concat(array_frames, ignore_index=True), row_label="key")
    if per_shard:
        validator.run("statistics", statistics_frame(per_shard, seq_config, config), row_label="shard")
    listed = manifest_frame(directory, recorded, counts)
    if len(listed):  # none listed and none present: nothing to compare (and GX fails on a frame without rows)
        validator.run("manifest", listed, row_label="shard")

    checks = list(validator.checks.values())
    failed = [c for c in checks if not c["success"]]
    empty_side = _empty_side(recorded) if not files else None
    if not files and empty_side is None:
        failed.append({"expectation": "shards present", "column": None, "check": "at least one part-NNNNN.npz",
                       "success": False, "failures": [{"shard": str(shards_dir), "observed": 0}]})
    totals = {key: sum(s[key] for s in per_shard.values()) for key in next(iter(per_shard.values()), {})}
    statistics = dict(totals) if not empty_side else {"instances": 0}
    if totals.get("instances"):
        statistics.update(
            masked_fraction=totals["predictions"] / totals["tokens"],
            shown_mask_fraction=totals["shown_mask"] / max(totals["predictions"], 1),
            shown_original_fraction=totals["shown_original"] / max(totals["predictions"], 1),
            random_next_fraction=totals["random_next"] / totals["instances"],
        )
    result: dict[str, Any] = {
        "step": STEP,
        "config": dataclasses.asdict(config),
        "inputs": [{"uri": str(shards_dir) + "/" + manifest.MANIFEST,
                    "sha256": manifest.sha256_file(directory / manifest.MANIFEST)}],
        "outputs": [],
        "started_at": started,
        "finished_at": manifest.now(),
        "success": not failed,
        "shards": len(files),
        "failed": [{**c, "message": _describe(c)} for c in failed],
        "checks": checks,
        "statistics": statistics,
        **({"empty_side": empty_side} if empty_side else {}),
    }
    target = output or storage.join(shards_dir, RESULT_FILE)
    text = json.dumps(result, indent=2, default=_plain) + "\n"
    if storage.is_s3(target):
        tmp = Path(storage.cache_root()) / "validation-upload.json"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        storage.upload_file(tmp, target)
    else:
        path = storage.local_path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp_path = path.with_name(f".{path.name}.tmp")
        tmp_path.write_text(text)
        tmp_path.replace(path)
    result["written_to"] = target
    for check in failed:
        log.error("%s", _describe(check))
    if empty_side:
        log.info("validate-shards: %s: no shard, as its manifest records: %s", shards_dir, empty_side)
    log.info("validate-shards: %d shard(s), %d instances: %s", len(files), statistics.get("instances", 0),
             "all expectations met" if not failed else f"{len(failed)} expectation(s) failed")
    return result
