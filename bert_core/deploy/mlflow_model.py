"""The MLflow face of a model directory: a pyfunc that serves its task (bert_core.deploy.serving), with a
signature and an input example, so `mlflow models serve -m models:/bert-<task>@champion` answers raw text.

`pyfunc_spec(model_dir)` is what a tracker's `log_model_dir` passes to `mlflow.pyfunc.log_model`. Bad
requests raise MLflow's INVALID_PARAMETER_VALUE, which the scoring server returns as HTTP 400 with our
message (any other exception would be a 400 with a generic message).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# What the logged model needs installed to load; inferring it would import and probe the whole environment.
PIP_REQUIREMENTS = ["bert-pipeline", "torch", "safetensors", "numpy", "pandas"]

# MLflow's "models from code" file: logged with every model and run when it loads (no CloudPickle of an object).
PYFUNC_CODE = Path(__file__).with_name("mlflow_pyfunc_entry.py")


def __getattr__(name: str):
    # Models logged before the class moved to bert_core.deploy.mlflow_pyfunc were pickled by reference to
    # `bert_core.deploy.mlflow_model.BertTaskModel`: they still load. (Imported here on demand, so that importing
    # this module does not import mlflow.)
    if name == "BertTaskModel":
        from bert_core.deploy.mlflow_pyfunc import BertTaskModel

        return BertTaskModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_served(pyfunc_model) -> tuple[int, list[str]]:
    """Run a loaded pyfunc (mlflow.pyfunc.load_model of a registered version) on the dev examples its
    evaluation scored (check_examples.json in the model directory) and compare with the scored answers.

    Returns (examples checked, differences). A model with no check examples (a pretrained encoder) answers
    its input example instead, and must give one well-formed answer."""
    import math

    from bert_core.finetune import task_card
    from bert_core.finetune.tasks.outputs import same_answer

    model = pyfunc_model.unwrap_python_model()
    if not hasattr(model, "predictor"):
        return 0, [f"the registered model is a {type(model).__name__}, not bert-pipeline's task pyfunc: it cannot "
                   "answer text (logged before serving existed?)"]
    checks = getattr(model, "checks", None) or task_card.read_checks(model.model_dir)
    if not checks:
        example = model.predictor.input_example()
        answers = pyfunc_model.predict(example)
        values = [v for a in answers for v in (a.get("embedding") or [])]
        if len(answers) != len(example) or (values and not all(math.isfinite(v) for v in values)):
            return len(example), [f"the input example got {answers!r}"]
        return len(example), []
    answers = pyfunc_model.predict([c["input"] for c in checks])
    problems = []
    for i, (check, answer) in enumerate(zip(checks, answers)):
        difference = same_answer(check["expected"], answer)
        if difference:
            problems.append(f"check example {i}: {difference}")
    if len(answers) != len(checks):
        problems.append(f"{len(checks)} check examples got {len(answers)} answers")
    return len(checks), problems


def _input_schema(predictor):
    from mlflow.types.schema import ColSpec, Schema

    required = {"text_pair": predictor.pair}
    names = list(predictor.fields)
    if predictor.kind != "squad" and "text_pair" not in names:
        # Optional, so that a pair sent to a one-text model (NER, a pretrained encoder) reaches the model and is
        # refused naming the field: without the column MLflow's server dropped it and answered the first text alone.
        names.append("text_pair")
    return Schema([ColSpec("string", name, required=required.get(name, True)) for name in names])


def pyfunc_spec(model_dir: str | Path, export_dir: str | Path | None = None, quantized: bool = False) -> dict[str, Any]:
    """Keyword arguments for mlflow.pyfunc.log_model: the task pyfunc, the directory as its artifact, the
    signature (input fields of the task; outputs inferred from a real answer of this very model to the
    input example, which also proves the directory loads and answers before it is logged).

    export_dir: an export of the same model (`bert-pipeline export`, best with --dynamic-batch --dynamic-seq),
    logged beside it; the served model then runs that graph on ONNX Runtime instead of eager PyTorch.
    quantized: it runs the export's INT8 graph. INT8 answers differ a little from the scored fp32/PyTorch
    ones (activations are quantised per batch at run time), so the answers promotion checks the served
    artifact against are the INT8 graph's own to the model's check examples, computed here and logged in
    the model's config; the metrics to register are the export's INT8 evaluation."""
    import pandas as pd
    from mlflow.models import ModelSignature, infer_signature

    from bert_core.deploy.serving import TaskPredictor
    from bert_core.finetune import task_card

    artifacts = {"model_dir": str(model_dir)}
    if export_dir is not None:
        artifacts["export_dir"] = str(export_dir)
    spec = {"python_model": str(PYFUNC_CODE), "artifacts": artifacts, "pip_requirements": PIP_REQUIREMENTS}
    if not (Path(model_dir) / "vocab.txt").is_file():
        # Logged all the same (a run's weights are never dropped), but it cannot read text: loading it says so,
        # and promotion, which loads it, refuses it.
        log.warning("%s has no vocab.txt: the logged model cannot tokenize text, so it cannot be served", model_dir)
        return spec
    predictor = TaskPredictor.from_model_dir(model_dir, export_dir=export_dir, quantized=quantized)
    if quantized:
        checks = task_card.read_checks(model_dir)
        answers = predictor.predict([c["input"] for c in checks]) if checks else []
        spec["model_config"] = {"quantized": True,
                                "checks": [{"input": c["input"], "expected": a} for c, a in zip(checks, answers)]}
    example = predictor.input_example()
    with warnings.catch_warnings():  # "integer columns cannot hold missing values": outputs, never inputs
        warnings.simplefilter("ignore", UserWarning)
        outputs = infer_signature(pd.DataFrame(example), predictor.predict(example)).outputs
    return {**spec, "signature": ModelSignature(inputs=_input_schema(predictor), outputs=outputs),
            "input_example": pd.DataFrame(example)}
