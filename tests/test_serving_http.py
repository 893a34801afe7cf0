"""Registered models serve their task for real: fine-tune -> register -> promote (which runs the registered
pyfunc on the scored dev examples) -> `mlflow models serve -m models:/bert-<task>@champion --env-manager local`
on loopback -> HTTP requests with raw text, answered exactly as `bert-pipeline predict` answers them; bad
requests get a 400 naming the field, and the server keeps serving."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from operators import registry
from operators import tasks as ops
from tests import toy_tasks
from tests.model_server import ModelServer, post_json
from tests.tiny_bert import write_tiny_bert

pytestmark = pytest.mark.slow

SETTINGS = dict(epochs=2, batch_size=16, lr=1e-3, max_seq_length=32, doc_stride=16, tracking=True)
SQUAD_SETTINGS = {**SETTINGS, "max_seq_length": 64}
# SST-2's tiny model learns (dev accuracy 1.0 after ~50 updates): promotion refuses a first version at chance.
SST2_SETTINGS = {**SETTINGS, "epochs": 16, "batch_size": 8}


def _predict_cli(model: str, requests: list[dict], tmp: Path, env: dict[str, str]) -> list[dict]:
    (tmp / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "predict", "--model", model,
                    str(tmp / "requests.jsonl"), "--output", str(tmp / "answers.jsonl")], env=env, check=True,
                   capture_output=True, text=True)
    return [json.loads(line) for line in (tmp / "answers.jsonl").read_text().splitlines()]


def test_champions_serve_raw_text_over_http(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # As in an activated venv: mlflow starts `uvicorn` from PATH.
    # Temp files of this test's processes (and of promotion, in this one) go to a folder of its own:
    # downloads of registered models must not be left there.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    tiny = write_tiny_bert(tmp_path / "tiny")
    data = {"sst-2": toy_tasks.write_sst2(tmp_path / "sst2", n_train=64, n_dev=16),
            "squad": toy_tasks.write_squad(tmp_path / "squad-data", n_train=16, n_dev=6)}
    reports = {}
    for task, data_dir in data.items():
        trained = ops.finetune(task, str(data_dir), str(tiny), str(tmp_path / f"ft-{task}"),
                               SQUAD_SETTINGS if task == "squad" else SST2_SETTINGS)
        reports[task] = ops.register_and_promote(trained, str(tmp_path / "reports"), floors={})
        # Promotion loaded the registered pyfunc and it answered the scored dev examples as scored.
        assert reports[task]["promoted"], reports[task]["reasons"]
        assert reports[task]["serving_check"] == {"examples": 8, "problems": []}

    sentences = [{"text": "the concert was wonderful ."}, {"text": "the hotel was dreadful ."},
                 {"text": " ".join(["the meal was lovely ."] * 2500)}]  # 10,000 words: cut to max_seq_length tokens
    with ModelServer("models:/bert-sst-2@champion", env, tmp_path / "serve-sst2.log") as server:
        status, body = post_json(f"{server.url}/invocations", {"dataframe_records": sentences})
        assert status == 200, body
        served = body["predictions"]
        assert [set(a) for a in served] == [{"label", "probabilities"}] * 3
        assert served == _predict_cli("models:/bert-sst-2@champion", sentences, tmp_path,
                                      {**env, "TMPDIR": str(scratch)})
        assert not [p.name for p in scratch.iterdir() if p.name.startswith(("tmp", "bert-"))]
        assert served == _predict_cli(str(tmp_path / "ft-sst-2"), sentences, tmp_path, env)

        status, body = post_json(f"{server.url}/invocations", {"dataframe_records": [{"sentence": "no text field"}]})
        assert status == 400 and "text" in body["message"], body
        status, body = post_json(f"{server.url}/invocations", {"dataframe_records": [{"text": "  "}]})
        assert status == 400 and "row 0: field 'text' is empty" in body["message"], body
        # The server gives every row every column, NaN where a row had none: the NaN is no field given (it was
        # `field 'text' is missing (fields: text)`); `sentence` is not in the signature, so MLflow dropped it.
        status, body = post_json(f"{server.url}/invocations",
                                 {"dataframe_records": [{"text": "the film was lovely ."}, {"sentence": "no text"}]})
        assert status == 400 and "row 1: field 'text' is missing (fields: none)" in body["message"], body
        status, body = post_json(f"{server.url}/invocations", {"inputs": {"text": []}})
        assert (status, body) == (200, {"predictions": []})  # docs/serving.md: an empty batch in columns
        status, body = post_json(f"{server.url}/invocations", {"inputs": {"text": ["the show was superb ."]}})
        assert status == 200 and body["predictions"][0]["label"] in ("0", "1"), body  # still serving

    context = "Hana lives in Quito and works as a tailor near the old harbour."
    questions = [{"question": "Where does Hana live?", "context": context},
                 {"question": "What is the job of Hana?", "context": " ".join([context] * 40)}]
    with ModelServer("models:/bert-squad@champion", env, tmp_path / "serve-squad.log") as server:
        status, body = post_json(f"{server.url}/invocations", {"dataframe_records": questions})
        assert status == 200, body
        served = body["predictions"]
        assert served == _predict_cli("models:/bert-squad@champion", questions, tmp_path, env)
        for question, answer in zip(questions, served):
            assert question["context"][answer["start"]:answer["end"]] == answer["answer"] != ""
        status, body = post_json(f"{server.url}/invocations", {"dataframe_records": [{"question": "Where?"}]})
        assert status == 400 and "context" in body["message"], body


def test_promotion_refuses_a_model_that_serves_other_answers_than_were_scored(tmp_path, monkeypatch):
    """The registered artifact must answer as evaluation scored it: a version whose served model differs
    (here its weights were changed after scoring) is registered but never becomes champion."""
    from safetensors.torch import load_file, save_file

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tiny = write_tiny_bert(tmp_path / "tiny")
    data = toy_tasks.write_sst2(tmp_path / "sst2", n_train=32, n_dev=16)
    output = tmp_path / "ft"
    trained = ops.finetune("sst-2", str(data), str(tiny), str(output), SST2_SETTINGS)
    weights = load_file(output / "model" / "model.safetensors")
    weights["classifier.weight"] = weights["classifier.weight"] * 0  # always label "0", with certainty
    weights["classifier.bias"] = weights["classifier.bias"].new_tensor([10.0, -10.0])
    save_file(weights, output / "model" / "model.safetensors")
    # Log the changed directory as this run's model, as a buggy export or copy step would.
    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.io.tracking import MlflowTracker

    tracker = MlflowTracker("bert-finetune/sst-2", pyfunc=pyfunc_spec)
    tracker.log_model_dir(output / "model")
    tracker.end()
    report = ops.register_and_promote({**trained, "mlflow_run_id": tracker.run_id}, str(tmp_path / "r"), floors={})
    assert not report["promoted"] and report["serving_check"]["problems"]
    assert any("does not answer as its evaluation did" in r for r in report["reasons"])
    assert registry.latest_versions("bert-sst-2")["champion"] is None
