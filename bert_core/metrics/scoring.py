"""One entry point for the official scorers, as fine-tuning and the registry gates call them:
`score_predictions(task, gold, predictions)` reads the same files `bert-pipeline evaluate` reads."""

from __future__ import annotations

from pathlib import Path

from bert_core.metrics import glue, ner, squad
from bert_core.tasks import catalog


def score_predictions(task: str, gold: str | Path, predictions: str | Path,
                      na_prob_file: str | Path | None = None, language: str | None = None) -> dict[str, float]:
    """`language`: XNLI rows of the original multi-language file (default zh), as fine-tuning read them."""
    info = catalog.get(task)
    if info.kind == "squad":
        result = squad.evaluate_squad_file(gold, predictions, na_prob_file=na_prob_file, strict=True)
        return {k: float(v) for k, v in result.items() if isinstance(v, int | float)}
    if info.kind == "ner":
        return ner.evaluate_ner_files(gold, predictions)
    gold_task = "mnli-mm" if info.name == "mnli" and "mismatched" in Path(gold).name else info.name
    return glue.evaluate_glue_files(gold_task, gold, predictions, language=language)


# What chance_metrics scores, per task kind, in words: the answer of a model that ignores its input.
CHANCE_ANSWERS = {"classification": "always the dev set's most frequent label", "regression": "a constant score",
                  "squad": "no answer to any question", "ner": "no entity at all"}


def chance_answer(task: str) -> str:
    """CHANCE_ANSWERS of `task`'s kind."""
    return CHANCE_ANSWERS[catalog.get(task).kind]


def chance_metrics(task: str, gold: str | Path, language: str | None = None) -> dict[str, float]:
    """What a model that ignores its input scores on the gold file, by the task's own scorer: always the dev set's
    most frequent label for classification (accuracy, F1 and MCC of that constant answer: MRPC's majority scores
    F1 81), 0 for a regression's correlations (a constant has none), no answer to any SQuAD question (0 on v1.1;
    on v2.0 its share of unanswerable questions, about half of the official dev set), no entity for NER (0 F1,
    but the share of "O" tags as token accuracy)."""
    from collections import Counter

    from bert_core.tasks.conll import read_conll

    info = catalog.get(task)
    if info.kind == "squad":
        data = squad.load_squad_dataset(gold)
        silent = {qa["id"]: "" for article in data["data"] for paragraph in article["paragraphs"]
                  for qa in paragraph["qas"]}
        if squad.detect_version(data, str(gold)) == squad.V1:
            return squad.evaluate_squad_v1(data["data"], silent)
        result = squad.evaluate_squad_v2(data["data"], silent)
        return {k: float(v) for k, v in result.items() if isinstance(v, int | float) and not k.endswith("total")}
    if info.kind == "ner":
        tags = [sentence.tags for sentence in read_conll(gold)]
        return ner.ner_metrics(tags, [["O"] * len(t) for t in tags])
    gold_task = "mnli-mm" if info.name == "mnli" and "mismatched" in Path(gold).name else info.name
    golds = glue.read_gold_labels(gold_task, gold, language=language)
    metrics = glue.TASK_METRICS[glue.task_key(gold_task)]
    if info.kind == "regression":
        return {name: 0.0 for name in metrics}
    majority = Counter(golds).most_common(1)[0][0]
    return glue.glue_metrics(gold_task, golds, [majority] * len(golds))
