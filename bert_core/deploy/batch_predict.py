"""Batch predict with an export: task input files (a GLUE-style TSV, a SQuAD JSON file) in, prediction files
in fine-tuning's formats out, so the official scorers read them as they read fine-tuning's
(`bert-pipeline predict --export`, and the export's own evaluation).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from bert_core.deploy.runtime import ExportedModel
from bert_core.errors import BertPipelineError
from bert_core.finetune.config import SquadOptions

log = logging.getLogger(__name__)


def export_squad_options(model: ExportedModel) -> SquadOptions:
    """The SQuAD settings a question-answering export was fine-tuned with (export.json's `squad`, from its model's
    task.json); the defaults for an export made before they were recorded, or from a model without a card."""
    return SquadOptions(**(model.meta.get("squad") or {}))


def predict_file(model: ExportedModel, data: str | Path, output: str | Path, task: str | None = None,
                 quantized: bool = False, squad: SquadOptions | None = None) -> tuple[int, list[str]]:
    """Run the export on task input and write predictions in `finetune`'s formats.

    GLUE-style TSV (`task` names it): the submission TSV at `output`. SQuAD JSON (QA exports):
    predictions.json, nbest_predictions.json (and null_odds.json for 2.0) in the directory `output`.
    Returns (number of examples, paths written).
    """
    from bert_core.finetune.tasks import features as feats
    from bert_core.model.tokenization import BertTokenizer

    meta = model.meta
    vocab = model.directory / "vocab.txt"
    if not vocab.is_file():
        raise BertPipelineError(f"{model.directory}: the export has no vocab.txt (exported without a model?)")
    tokenizer = BertTokenizer(vocab, do_lower_case=meta.get("do_lower_case") is not False)
    # Cut (and window) at the model's own length, as serving does; the graph's longest where the export has none.
    seq = min(meta.get("model_max_seq_length") or meta["max_seq_length"], meta["max_seq_length"])
    if meta["task"] == "question_answering":
        from bert_core.finetune.tasks.squad import make_features, postprocess
        from bert_core.tasks.squad import V2, read_squad

        squad = squad or export_squad_options(model)
        version, examples = read_squad(data)
        if (version == V2) != squad.version_2:
            # As fine-tuning says of its dev file: a 2.0 file predicted as 1.1 answers every question (no "" and no
            # null_odds.json), and its scores drop, with nothing else to tell why.
            log.warning("%s is SQuAD %s but --version-2 is %s: predicting as SQuAD %s", data, version,
                        "set" if squad.version_2 else "not set", "2.0" if squad.version_2 else "1.1")
        features = make_features(examples, tokenizer, seq, squad.doc_stride, squad.max_query_length)
        arrays = feats.pad_squad_features(features, seq)
        start, end = model.run(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                               quantized=quantized)
        result = postprocess(examples, features, start, end, squad)
        written = feats.write_squad_predictions(output, result, squad.version_2)
        return len(examples), [str(Path(output) / name) for name in written]
    if not task:
        raise BertPipelineError("--task is needed to read a GLUE-style TSV (e.g. --task MRPC)")
    if Path(output).is_dir():  # checked before the run: writing it was an IsADirectoryError traceback at the end
        raise BertPipelineError(f"{output} is a directory: the predictions of a GLUE-style TSV are one submission "
                                "TSV file (e.g. --output predictions.tsv)")
    from bert_core.tasks.glue import read_examples

    examples = read_examples(task, data)
    arrays = feats.encode_examples(tokenizer, examples, seq)
    (logits,) = model.run(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                          quantized=quantized)
    if meta["task"] == "regression":
        predictions: list = [float(v) for v in logits[:, 0]]
    else:
        labels = meta["labels"]
        predictions = [labels[i] for i in np.argmax(logits, axis=-1)]
    feats.write_glue_submission(output, predictions)
    return len(examples), [str(output)]
