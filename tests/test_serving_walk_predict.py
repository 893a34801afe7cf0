"""`bert-pipeline predict --model` and the served model's errors as a new user meets them: what a request lacks is
named without listing a null field as given, a file that is not UTF-8 is one line naming where (not a traceback),
`-` reads stdin / writes stdout, flags that --model does not use are refused (not silently dropped), `--export DIR
--quantized` runs the INT8 graph, a models:/ URI prints no MLflow download progress bar, and on a home with a
stack up a models:/ URI is read from the stack's MLflow server, as `finetune`, `run` and `report` do."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from bert_core.deploy.serving import InvalidRequest, TaskPredictor
from bert_core.finetune.step import FinetuneConfig, finetune
from bert_pipeline.cli import main
from tests import stack_fixture, toy_tasks
from tests.tiny_bert import write_tiny_bert

TINY = dict(epochs=1, lr=1e-3, batch_size=16, tracking=False, max_seq_length=32, eval_batch_size=8)
REQUESTS = [{"text": "the concert was wonderful ."}, {"text": "the hotel was dreadful ."}]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny fine-tuned SST-2 model (one text) and STS-B model (pairs): plumbing, seconds each."""
    root = tmp_path_factory.mktemp("walk")
    tiny = write_tiny_bert(root / "tiny")
    data = {"sst-2": toy_tasks.write_sst2(root / "sst2", n_train=32, n_dev=8),
            "sts-b": toy_tasks.write_stsb(root / "stsb", n_train=32, n_dev=8),
            "ner": toy_tasks.write_ner(root / "ner-data", n_train=16, n_dev=8)}
    for task, data_dir in data.items():
        finetune(FinetuneConfig(task=task, data_dir=str(data_dir), model=str(tiny), output=str(root / task), **TINY))
    return {"pretrained": tiny, **{task: root / task for task in data}}


def _message(predictor: TaskPredictor, model_input) -> str:
    with pytest.raises(InvalidRequest) as caught:
        predictor.predict(model_input)
    return str(caught.value)


def test_a_missing_field_is_not_listed_among_the_fields_given(models):
    """MLflow's server hands the model a DataFrame with every column in every row (NaN where a row had none): a row
    without `text_pair` was told `field 'text_pair' is missing (fields: text, text_pair)`."""
    pairs = TaskPredictor.from_model_dir(models["sts-b"])
    frame = pd.DataFrame([{"text": "a cat sat .", "text_pair": "a cat was sitting ."}, {"text": "a dog ran ."}])
    assert _message(pairs, frame) == "row 1: field 'text_pair' is missing (fields: text)"
    single = TaskPredictor.from_model_dir(models["sst-2"])
    assert _message(single, [{"text": None}]) == "row 0: field 'text' is missing (fields: none)"
    assert _message(single, pd.DataFrame([{"text": "fine ."}, {"txt": "x"}])) == \
        "row 1: field 'text' is missing (fields: txt)"


@pytest.mark.parametrize("kind", ["pretrained", "ner", "sst-2"])
def test_a_pair_sent_to_a_one_text_model_is_refused_in_process_and_by_the_pyfunc(models, tmp_path, kind):
    """A pretrained encoder answered a pair with the embedding of its first text, an NER model tagged the first text
    alone; behind `mlflow models serve` their signature had no `text_pair`, so MLflow dropped it before the model
    saw it. Now the one-text models' signatures take `text_pair` (optional), and the model refuses it, as SST-2's
    did."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from bert_core.deploy.mlflow_model import pyfunc_spec

    model_dir = models[kind] if kind == "pretrained" else models[kind] / "model"
    request = [{"text": "Lena Varga opened a bakery in Riga .", "text_pair": "She sells bread ."}]
    predictor = TaskPredictor.from_model_dir(model_dir)
    assert _message(predictor, request).startswith("row 0: field 'text_pair': this ")
    assert _message(predictor, [{"text": "fine ."}, request[0]]).startswith("row 1: ")
    mlflow.pyfunc.save_model(str(tmp_path / "pyfunc"), **pyfunc_spec(model_dir))
    served = mlflow.pyfunc.load_model(str(tmp_path / "pyfunc"))
    assert "text_pair" in served.metadata.get_input_schema().input_names()
    with pytest.raises(MlflowException, match="row 0: field 'text_pair': this .* reads one text per example"):
        served.predict(pd.DataFrame(request))
    (answer,) = served.predict(pd.DataFrame([{"text": request[0]["text"]}]))  # one text: answered as before
    assert answer == predictor([{"text": request[0]["text"]}])[0]


def _predict(*argv: str) -> int:
    return main(["predict", *argv])


def test_a_request_file_that_is_not_utf8_is_an_error_naming_the_line(models, tmp_path, capsys):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b'{"text": "fine ."}\n{"text": "caf\xe9 au lait"}\n')  # Latin-1: a traceback before
    assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "a.jsonl")) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: not UTF-8 (byte 0xe9 at offset 32)" in err and "Traceback" not in err


def test_dash_reads_requests_from_stdin_and_writes_answers_to_stdout(models, tmp_path, monkeypatch, capsys):
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "a.jsonl")) == 0
    expected = (tmp_path / "a.jsonl").read_text()
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    stdin = io.TextIOWrapper(io.BytesIO(path.read_bytes()), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    assert _predict("--model", str(models["sst-2"]), "-", "--output", "-") == 0
    stdout.flush()
    assert stdout.buffer.getvalue().decode("utf-8") == expected  # the answers alone: no "wrote ..." line in them
    assert not (tmp_path / "-").exists()  # a file named '-' was written before
    assert "wrote 2 answers to stdout" in capsys.readouterr().err


@pytest.mark.parametrize("body", [
    {"dataframe_records": REQUESTS},
    {"dataframe_split": {"columns": ["text"], "data": [[r["text"]] for r in REQUESTS]}},
    {"inputs": {"text": [r["text"] for r in REQUESTS]}},
    {"instances": REQUESTS},
])
def test_the_body_posted_to_the_server_is_a_requests_file(models, tmp_path, capsys, body):
    """What a user POSTs to `mlflow models serve`, saved to a file (pretty-printed, as people write it), answers the
    same: it was read as JSON Lines, `FILE:1: not a JSON object (Expecting property name ...)`."""
    lines = tmp_path / "requests.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    assert _predict("--model", str(models["sst-2"]), str(lines), "--output", str(tmp_path / "a.jsonl")) == 0
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body, indent=2))
    assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "b.jsonl")) == 0
    assert (tmp_path / "b.jsonl").read_text() == (tmp_path / "a.jsonl").read_text()
    # A bad row is named as the server numbers it; a broken document by its line.
    key = next(iter(body))
    if key in ("dataframe_records", "instances"):
        path.write_text(json.dumps({key: [REQUESTS[0], {"txt": "x"}]}, indent=2))
        assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "c.jsonl")) == 2
        assert f"{path}: {key} row 1: field 'text' is missing (fields: txt)" in capsys.readouterr().err
    path.write_text(json.dumps(body, indent=2)[:-3] + ",\n}")
    assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "c.jsonl")) == 2
    assert f"{path}:" in (err := capsys.readouterr().err) and "not valid JSON" in err, err


def test_one_pretty_printed_request_is_a_requests_file(models, tmp_path):
    path = tmp_path / "request.json"
    path.write_text(json.dumps(REQUESTS[0], indent=2))
    assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "a.jsonl")) == 0
    (answer,) = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert answer == TaskPredictor.from_model_dir(models["sst-2"])(REQUESTS[:1])[0]


@pytest.mark.parametrize("flags", [["--doc-stride", "64"], ["--version-2"], ["--task", "SST-2"]])
def test_flags_for_export_alone_are_refused_with_model(models, tmp_path, capsys, flags):
    """They were silently ignored: `--doc-stride 64` changed nothing, the model's task.json decides."""
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(REQUESTS[0]) + "\n")
    assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "a.jsonl"), *flags) == 2
    assert f"{flags[0]}: not used with --model" in capsys.readouterr().err
    assert not (tmp_path / "a.jsonl").exists()


def test_quantized_with_model_and_export_runs_the_int8_graph(models, tmp_path, capsys):
    """`--model DIR --export DIR --quantized` ran the fp32 graph; without --export, --quantized is refused."""
    model = str(models["sst-2"] / "model")
    assert main(["export", "--task", "classification", "--model", model, "--output", str(tmp_path / "exp"),
                 "--dynamic-batch", "--dynamic-seq", "--max-seq-length", "32", "--quantize", "int8"]) == 0
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    assert _predict("--model", model, "--export", str(tmp_path / "exp"), "--quantized", str(path),
                    "--output", str(tmp_path / "int8.jsonl")) == 0
    int8 = TaskPredictor.from_model_dir(model, export_dir=tmp_path / "exp", quantized=True)
    assert [json.loads(line) for line in (tmp_path / "int8.jsonl").read_text().splitlines()] == int8(REQUESTS)
    assert _predict("--model", model, str(path), "--quantized", "--output", str(tmp_path / "x.jsonl")) == 2
    assert "--quantized runs an export's INT8 graph: give --export DIR" in capsys.readouterr().err


# Logs `MODEL_DIR` to the MLflow store of $MLFLOW_TRACKING_URI and registers it as bert-sst-2 version 1.
REGISTER = textwrap.dedent("""
    import sys
    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.io.tracking import MlflowTracker
    from operators import registry

    tracker = MlflowTracker("bert-finetune/sst-2", pyfunc=pyfunc_spec)
    tracker.log_model_dir(sys.argv[1])
    tracker.end()
    print(registry.register(tracker.run_id, "bert-sst-2")["version"])
""")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI",
                                                            "BERT_PIPELINE_HOME", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _register(model_dir: Path, tracking_uri: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-c", REGISTER, str(model_dir)], cwd=cwd, capture_output=True, text=True,
                          env=_env(MLFLOW_TRACKING_URI=tracking_uri), timeout=300)
    assert done.returncode == 0 and done.stdout.split()[-1] == "1", done.stderr[-3000:]


def _predict_process(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "predict", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_predict_of_a_registered_model_prints_no_download_progress_bar(models, tmp_path):
    """`Downloading artifacts: 100%|...` came before the one line `predict` prints, a dozen frames of it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _register(models["sst-2"] / "model", uri, tmp_path)
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    done = _predict_process(["--model", "models:/bert-sst-2/1", str(path), "--output", str(tmp_path / "a.jsonl")],
                            _env(MLFLOW_TRACKING_URI=uri, BERT_PIPELINE_HOME=str(tmp_path / "home")), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Downloading artifacts" not in done.stderr, done.stderr[-3000:]
    assert done.stdout == f"wrote 2 answers to {tmp_path / 'a.jsonl'}\n"
    answers = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert answers == TaskPredictor.from_model_dir(models["sst-2"])(REQUESTS)
    # --tracking-uri names the store when the environment does not.
    done = _predict_process(["--model", "models:/bert-sst-2/1", str(path), "--output", str(tmp_path / "b.jsonl"),
                             "--tracking-uri", uri], _env(BERT_PIPELINE_HOME=str(tmp_path / "home")), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "b.jsonl").read_text() == (tmp_path / "a.jsonl").read_text()


@pytest.mark.slow
def test_predict_reads_a_registered_model_from_the_stacks_mlflow_server(models, tmp_path):
    """With a stack up on the home, its MLflow server is the home's MLflow (`finetune`, `run`, `report` use it):
    `predict --model models:/...` read the sqlite file under it instead, which cannot reach the artifacts the
    server keeps at mlflow-artifacts:/."""
    from mlflow import MlflowClient

    home = tmp_path / "stack-home"
    with stack_fixture.mlflow_only_stack(home) as url:
        # The experiment as the server makes it (a run triggered in the stack's Airflow): at mlflow-artifacts:/N.
        experiment_id = MlflowClient(url).create_experiment("bert-finetune/sst-2")
        assert MlflowClient(url).get_experiment(experiment_id).artifact_location.startswith("mlflow-artifacts:/")
        _register(models["sst-2"] / "model", url, tmp_path)
        path = tmp_path / "requests.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
        done = _predict_process(["--model", "models:/bert-sst-2/1", str(path), "--output",
                                 str(tmp_path / "a.jsonl")], _env(BERT_PIPELINE_HOME=str(home)), tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        answers = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
        assert answers == TaskPredictor.from_model_dir(models["sst-2"])(REQUESTS)


def test_output_that_is_a_directory_is_an_error_and_leaves_nothing(models, tmp_path, capsys):
    """`--output DIR` (as `--export` takes for SQuAD) was an IsADirectoryError traceback, and left `.DIR.tmp-PID`."""
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(REQUESTS[0]) + "\n")
    (tmp_path / "answers").mkdir()
    assert _predict("--model", str(models["sst-2"]), str(path), "--output", str(tmp_path / "answers")) == 2
    assert f"--output {tmp_path / 'answers'} is a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers", "requests.jsonl"]


def test_export_predictions_of_a_tsv_into_a_directory_is_an_error(models, tmp_path, capsys):
    """`predict --export DIR --task SST-2 dev.tsv --output EXISTING_DIR` ran the whole file, then failed with an
    IsADirectoryError traceback and left `.EXISTING_DIR.tmp-PID` beside it."""
    assert main(["export", "--task", "classification", "--model", str(models["sst-2"] / "model"), "--output",
                 str(tmp_path / "exp"), "--dynamic-batch", "--dynamic-seq", "--max-seq-length", "32"]) == 0
    (tmp_path / "pred").mkdir()
    dev = models["sst-2"].parent / "sst2" / "dev.tsv"
    assert _predict("--export", str(tmp_path / "exp"), "--task", "SST-2", str(dev), "--output",
                    str(tmp_path / "pred")) == 2
    assert f"{tmp_path / 'pred'} is a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp", "pred"]
