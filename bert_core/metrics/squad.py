"""SQuAD v1.1 / v2.0 scoring, equal to the official ``evaluate-v1.1.py`` and ``evaluate-v2.0.py``.

The scoring functions below keep the official scripts' structure on purpose: the same dict insertion
order, the same int/bool/float mix in the sums and the same ``100.0 * sum(...) / total`` arithmetic,
so the printed JSON is identical byte for byte (checked against golden outputs in the tests).

What is added around them is input checking, with errors that name the file and the field, where
the official scripts would crash with a KeyError or a traceback:

- v1.1 scores a question without a prediction 0 and says so on stderr, as the official script does.
- v2.0: the official script prints ``Missing prediction for ID`` and then fails with a KeyError; we
  print the same lines (to stderr, since stdout carries the JSON) and raise a clear error instead.
- Prediction ids that are not in the dataset are ignored by both official scripts. We ignore them
  too and say on stderr how many, or raise when ``strict`` is set (the CLI's --strict).
"""

from __future__ import annotations

import collections
import json
import logging
import re
import string
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.tasks.squad import V1, V2, detect_version, normalize_version

logger = logging.getLogger(__name__)

MAX_IDS_SHOWN = 5

# Official regex and punctuation set; compiled once (the official scripts recompile per call, same result).
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


# ---------------------------------------------------------------------------------------------
# Normalisation and per-answer metrics (shared by both official scripts)
# ---------------------------------------------------------------------------------------------


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (official order)."""
    text = s.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


# --- evaluate-v1.1.py ---


def f1_score_v1(prediction: str, ground_truth: str) -> float | int:
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_score_v1(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


# --- evaluate-v2.0.py ---


def get_tokens(s: str) -> list[str]:
    if not s:
        return []
    return normalize_answer(s).split()


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float | int:
    gold_toks = get_tokens(a_gold)
    pred_toks = get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise.
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


# ---------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------


def _articles(dataset: Any) -> list[dict[str, Any]]:
    """Accept the `data` list (as the official `evaluate()` does) or the whole file's object."""
    if isinstance(dataset, Mapping) and "data" in dataset:
        return dataset["data"]
    return dataset


def check_squad_dataset(dataset: Any, source: str = "dataset") -> None:
    """Raise a BertPipelineError naming the first field that is not SQuAD-shaped."""
    expected = (
        "expected SQuAD JSON: {'version': ..., 'data': [{'paragraphs': [{'qas': "
        "[{'id': str, 'answers': [{'text': str}, ...]}]}]}]}"
    )
    if not isinstance(dataset, list):
        raise BertPipelineError(f"{source}: 'data' is not a list of articles; {expected}")
    for i, article in enumerate(dataset):
        where = f"{source}: data[{i}]"
        if not isinstance(article, Mapping) or not isinstance(article.get("paragraphs"), list):
            raise BertPipelineError(f"{where} has no 'paragraphs' list; {expected}")
        for j, paragraph in enumerate(article["paragraphs"]):
            pwhere = f"{where}.paragraphs[{j}]"
            if not isinstance(paragraph, Mapping) or not isinstance(paragraph.get("qas"), list):
                raise BertPipelineError(f"{pwhere} has no 'qas' list; {expected}")
            for k, qa in enumerate(paragraph["qas"]):
                qwhere = f"{pwhere}.qas[{k}]"
                if not isinstance(qa, Mapping) or not isinstance(qa.get("id"), str):
                    raise BertPipelineError(f"{qwhere} has no string 'id'; {expected}")
                answers = qa.get("answers")
                if not isinstance(answers, list) or not all(
                    isinstance(a, Mapping) and isinstance(a.get("text"), str) for a in answers
                ):
                    raise BertPipelineError(
                        f"{qwhere} (id {qa['id']!r}): 'answers' is not a list of {{'text': str}}; {expected}"
                    )


def check_predictions(predictions: Any, source: str = "predictions") -> None:
    if not isinstance(predictions, Mapping):
        raise BertPipelineError(
            f"{source}: expected a JSON object mapping question id to answer text, "
            f"got a {type(predictions).__name__}"
        )
    for qid, text in predictions.items():
        if not isinstance(text, str):
            raise BertPipelineError(
                f"{source}: the prediction for id {qid!r} is a {type(text).__name__}, expected a string "
                '(use "" for no answer)'
            )


def check_na_probs(na_probs: Any, source: str = "na-prob file") -> None:
    if not isinstance(na_probs, Mapping):
        raise BertPipelineError(
            f"{source}: expected a JSON object mapping question id to no-answer probability, "
            f"got a {type(na_probs).__name__}"
        )
    for qid, p in na_probs.items():
        if isinstance(p, bool) or not isinstance(p, int | float):
            raise BertPipelineError(f"{source}: the value for id {qid!r} is {p!r}, expected a number")


def _dataset_ids(dataset: list[dict[str, Any]]) -> list[str]:
    return [qa["id"] for article in dataset for p in article["paragraphs"] for qa in p["qas"]]


def _shown(ids: list[str]) -> str:
    head = ", ".join(repr(i) for i in ids[:MAX_IDS_SHOWN])
    return head + (f" and {len(ids) - MAX_IDS_SHOWN} more" if len(ids) > MAX_IDS_SHOWN else "")


def _check_unknown_ids(
    dataset: list[dict[str, Any]], predictions: Mapping[str, str], strict: bool, source: str
) -> None:
    known = set(_dataset_ids(dataset))
    unknown = [qid for qid in predictions if qid not in known]
    if not unknown:
        return
    if strict:
        raise BertPipelineError(
            f"{source}: {len(unknown)} prediction id(s) are not in the dataset: {_shown(unknown)} "
            "(wrong data file? the official scripts ignore them; leave out --strict to do the same)"
        )
    # stdout carries only the scores, as the official scripts' does: the count goes to stderr.
    print(f"{source}: {len(unknown)} prediction id(s) are not in the dataset and are ignored, as the official "
          f"script does: {_shown(unknown)}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# evaluate-v1.1.py
# ---------------------------------------------------------------------------------------------


def metric_max_over_ground_truths(
    metric_fn: Callable[[str, str], float | int | bool], prediction: str, ground_truths: list[str]
) -> float | int | bool:
    return max(metric_fn(prediction, ground_truth) for ground_truth in ground_truths)


def evaluate_squad_v1(
    dataset: Any, predictions: Mapping[str, str], *, strict: bool = False, source: str = "predictions"
) -> dict[str, float]:
    """Official v1.1 `evaluate()`: ``{'exact_match': ..., 'f1': ...}`` in percent.

    Questions without a prediction score 0 and are reported on stderr in the official words.
    """
    dataset = _articles(dataset)
    check_squad_dataset(dataset)
    check_predictions(predictions, source)
    _check_unknown_ids(dataset, predictions, strict, source)
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    message = "Unanswered question " + qa["id"] + " will receive score 0."
                    print(message, file=sys.stderr)
                    continue
                ground_truths = [x["text"] for x in qa["answers"]]
                if not ground_truths:
                    # The official script fails here with "max() arg is an empty sequence".
                    raise BertPipelineError(
                        f"question {qa['id']!r} has no gold answers, which SQuAD v1.1 scoring cannot "
                        "handle (a v2.0 file? score it with version 2.0)"
                    )
                prediction = predictions[qa["id"]]
                exact_match += metric_max_over_ground_truths(exact_match_score_v1, prediction, ground_truths)
                f1 += metric_max_over_ground_truths(f1_score_v1, prediction, ground_truths)
    if total == 0:
        raise BertPipelineError("the dataset has no questions")
    exact_match = 100.0 * exact_match / total
    f1 = 100.0 * f1 / total
    return {"exact_match": exact_match, "f1": f1}


# ---------------------------------------------------------------------------------------------
# evaluate-v2.0.py
# ---------------------------------------------------------------------------------------------


def make_qid_to_has_ans(dataset: list[dict[str, Any]]) -> dict[str, bool]:
    qid_to_has_ans = {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid_to_has_ans[qa["id"]] = bool(qa["answers"])
    return qid_to_has_ans


def get_raw_scores(
    dataset: list[dict[str, Any]], preds: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, float | int]]:
    exact_scores: dict[str, int] = {}
    f1_scores: dict[str, float | int] = {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
                if not gold_answers:
                    # For unanswerable questions, only correct answer is empty string.
                    gold_answers = [""]
                if qid not in preds:
                    # Official wording; stderr because our stdout carries only the JSON.
                    print(f"Missing prediction for {qid}", file=sys.stderr)
                    continue
                a_pred = preds[qid]
                # Take max over all gold answers.
                exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
                f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def apply_no_ans_threshold(
    scores: Mapping[str, float | int],
    na_probs: Mapping[str, float | int],
    qid_to_has_ans: Mapping[str, bool],
    na_prob_thresh: float,
) -> dict[str, float | int]:
    new_scores: dict[str, float | int] = {}
    for qid, s in scores.items():
        pred_na = na_probs[qid] > na_prob_thresh
        if pred_na:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = s
    return new_scores


def make_eval_dict(
    exact_scores: Mapping[str, float | int],
    f1_scores: Mapping[str, float | int],
    qid_list: list[str] | None = None,
) -> collections.OrderedDict[str, Any]:
    if not qid_list:
        total = len(exact_scores)
        return collections.OrderedDict(
            [
                ("exact", 100.0 * sum(exact_scores.values()) / total),
                ("f1", 100.0 * sum(f1_scores.values()) / total),
                ("total", total),
            ]
        )
    total = len(qid_list)
    return collections.OrderedDict(
        [
            ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
            ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
            ("total", total),
        ]
    )


def merge_eval(main_eval: dict[str, Any], new_eval: Mapping[str, Any], prefix: str) -> None:
    for k in new_eval:
        main_eval[f"{prefix}_{k}"] = new_eval[k]


def find_best_thresh(
    preds: Mapping[str, str],
    scores: Mapping[str, float | int],
    na_probs: Mapping[str, float | int],
    qid_to_has_ans: Mapping[str, bool],
) -> tuple[float, float | int]:
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score: float | int = num_no_ans
    best_score = cur_score
    best_thresh: float | int = 0.0
    # Stable sort over the na-prob file's own key order: ties resolve as in the official script.
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def find_all_best_thresh(
    main_eval: dict[str, Any],
    preds: Mapping[str, str],
    exact_raw: Mapping[str, int],
    f1_raw: Mapping[str, float | int],
    na_probs: Mapping[str, float | int],
    qid_to_has_ans: Mapping[str, bool],
) -> None:
    best_exact, exact_thresh = find_best_thresh(preds, exact_raw, na_probs, qid_to_has_ans)
    best_f1, f1_thresh = find_best_thresh(preds, f1_raw, na_probs, qid_to_has_ans)
    main_eval["best_exact"] = best_exact
    main_eval["best_exact_thresh"] = exact_thresh
    main_eval["best_f1"] = best_f1
    main_eval["best_f1_thresh"] = f1_thresh


def evaluate_squad_v2(
    dataset: Any,
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float | int] | None = None,
    na_prob_thresh: float = 1.0,
    *,
    strict: bool = False,
    source: str = "predictions",
    na_prob_source: str = "na-prob file",
) -> collections.OrderedDict[str, Any]:
    """Official v2.0 `main()`: exact/f1/total, HasAns_*/NoAns_* and, with `na_probs`, best_* thresholds."""
    dataset = _articles(dataset)
    check_squad_dataset(dataset)
    check_predictions(predictions, source)
    _check_unknown_ids(dataset, predictions, strict, source)
    has_na_prob_file = na_probs is not None
    if na_probs is None:
        na_probs = {k: 0.0 for k in predictions}
    else:
        check_na_probs(na_probs, na_prob_source)
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    if not qid_to_has_ans:
        raise BertPipelineError("the dataset has no questions")
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    exact_raw, f1_raw = get_raw_scores(dataset, predictions)

    missing = [qid for qid in qid_to_has_ans if qid not in exact_raw]
    if missing:
        raise BertPipelineError(
            f"{source}: {len(missing)} of {len(qid_to_has_ans)} questions have no prediction: "
            f"{_shown(missing)}; the official evaluate-v2.0.py cannot score such a file (it fails with a "
            'KeyError), so predict "" for the questions the model leaves unanswered'
        )
    no_prob = [qid for qid in exact_raw if qid not in na_probs]
    if no_prob:
        raise BertPipelineError(
            f"{na_prob_source}: {len(no_prob)} question(s) have no no-answer probability: {_shown(no_prob)}"
        )

    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out_eval = make_eval_dict(exact_thresh, f1_thresh)
    if has_ans_qids:
        has_ans_eval = make_eval_dict(exact_thresh, f1_thresh, qid_list=has_ans_qids)
        merge_eval(out_eval, has_ans_eval, "HasAns")
    if no_ans_qids:
        no_ans_eval = make_eval_dict(exact_thresh, f1_thresh, qid_list=no_ans_qids)
        merge_eval(out_eval, no_ans_eval, "NoAns")
    if has_na_prob_file:
        find_all_best_thresh(out_eval, predictions, exact_raw, f1_raw, na_probs, qid_to_has_ans)
    return out_eval


# ---------------------------------------------------------------------------------------------
# Files, version detection and output
# ---------------------------------------------------------------------------------------------


def _load_json(path: str | Path, what: str) -> Any:
    try:
        # utf-8-sig: tolerate a byte order mark, which json.load would reject.
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except FileNotFoundError as exc:
        raise BertPipelineError(f"{what} not found: {path}") from exc
    except json.JSONDecodeError as exc:
        raise BertPipelineError(
            f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BertPipelineError(f"cannot read {what} {path}: {exc}") from exc


def load_squad_dataset(path: str | Path) -> dict[str, Any]:
    data = _load_json(path, "SQuAD data file")
    if not isinstance(data, Mapping) or "data" not in data:
        raise BertPipelineError(
            f"SQuAD data file {path}: expected a JSON object with a 'data' list of articles "
            "(SQuAD v1.1/v2.0 format, e.g. dev-v1.1.json)"
        )
    check_squad_dataset(data["data"], f"SQuAD data file {path}")
    return data


@dataclass(frozen=True)
class SquadScore:
    version: str  # "1.1" or "2.0"
    result: dict[str, Any]


def score_squad_file(
    data_json: str | Path,
    pred_json: str | Path,
    na_prob_file: str | Path | None = None,
    na_prob_thresh: float = 1.0,
    version: str | None = None,
    *,
    strict: bool = False,
) -> SquadScore:
    """Score prediction files; also return the SQuAD version used (for `format_like_official`)."""
    data = load_squad_dataset(data_json)
    used = normalize_version(version) if version is not None else detect_version(data, str(data_json))
    predictions = _load_json(pred_json, "prediction file")
    source = f"prediction file {pred_json}"
    if used == V1:
        if na_prob_file is not None or na_prob_thresh != 1.0:
            raise BertPipelineError(
                f"a no-answer probability file or threshold applies to SQuAD v2.0 only; {data_json} is "
                "scored as v1.1 (force v2.0 with --version 2.0)"
            )
        if "version" in data and data["version"] != V1:
            # The official v1.1 script warns and scores anyway.
            print(
                "Evaluation expects v-" + V1 + ", but got dataset with v-" + str(data["version"]),
                file=sys.stderr,
            )
        return SquadScore(V1, evaluate_squad_v1(data["data"], predictions, strict=strict, source=source))
    na_probs = None
    na_source = "na-prob file"
    if na_prob_file is not None:
        na_probs = _load_json(na_prob_file, "na-prob file")
        na_source = f"na-prob file {na_prob_file}"
    result = evaluate_squad_v2(
        data["data"],
        predictions,
        na_probs,
        na_prob_thresh,
        strict=strict,
        source=source,
        na_prob_source=na_source,
    )
    return SquadScore(V2, result)


def evaluate_squad_file(
    data_json: str | Path,
    pred_json: str | Path,
    na_prob_file: str | Path | None = None,
    na_prob_thresh: float = 1.0,
    version: str | None = None,
    *,
    strict: bool = False,
) -> dict[str, Any]:
    """Score files the way the official script for the data file's version does."""
    return score_squad_file(data_json, pred_json, na_prob_file, na_prob_thresh, version, strict=strict).result


def format_like_official(result: Mapping[str, Any], version: str) -> str:
    """Exactly what the official script prints to stdout, trailing newline included."""
    if normalize_version(version) == V1:
        return json.dumps(result) + "\n"
    return json.dumps(result, indent=2) + "\n"
