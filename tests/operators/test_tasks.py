"""The DAGs' task functions that are not covered by the demo run: planning and the make-shards fan-out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError
from bert_core.io import manifest
from operators import plan_demo, plan_finetune, plan_pretraining
from operators import tasks as ops
from operators.locations import demo_data

# The DAG modules import Airflow, which configures logging and replaces the root logger's handlers: imported in a
# test, they would remove the handler caplog reads (a test that ran alone saw no warning). Imported here, before.
from pipelines import bert_demo, bert_finetune, bert_pretraining

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_plans(tmp_path, monkeypatch, minilm_dir):

    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    squad = demo_data("squad")

    def finetune(tasks, run_id=None):
        return plan_finetune.plan({"tasks": tasks}, run_id, bert_finetune.FINETUNE_SETTINGS)

    specs = finetune({"SST-2": "", "squad": squad}, "manual__2026-01-01T00:00:00+00:00")
    assert [(s.task, Path(s.data_dir).name) for s in specs] == [("sst-2", "sst2"), ("squad", "squad")]
    work = tmp_path / "home" / "finetune" / "manual__2026-01-01T00_00_00_00_00"
    assert specs[0].output == f"{work}/finetune-sst-2" and Path(specs[0].model) == minilm_dir
    assert plan_finetune.FinetuneTaskPlan.from_json(specs[0].to_json()) == specs[0]
    with pytest.raises(BertPipelineError, match="give a data directory for 'cola'"):
        finetune({"cola": ""})
    with pytest.raises(BertPipelineError, match="at least one task"):
        finetune({})
    defaults = {name: param.value for name, param in bert_pretraining.PARAMS.items()}
    plan = plan_pretraining.plan({**defaults, "work_dir": str(tmp_path / "w"), "inputs": []}, None,
                                 bert_pretraining.SHARD_SETTINGS, bert_pretraining.PRETRAIN_SETTINGS)
    assert plan.inputs == [demo_data("corpus")] and plan.vocab == str(minilm_dir / "vocab.txt")
    assert plan_pretraining.PretrainingPlan.from_json(plan.to_json()) == plan
    demo_defaults = {name: param.value for name, param in bert_demo.PARAMS.items()}
    demo = plan_demo.plan({**demo_defaults, "model": str(minilm_dir)}, "r1", bert_demo.DEMO)
    assert demo.vocab == str(minilm_dir / "vocab.txt") and demo.work_dir.endswith("/demo/r1")
    assert demo.pretrain["num_steps"] == bert_demo.DEMO.pretrain["num_steps"] == 500
    assert demo.finetune["squad"].settings["max_seq_length"] == 64
    assert plan_demo.DemoPlan.from_json(demo.to_json()) == demo


def test_single_worker_pretrain_and_rerun_finetune_register(tmp_path, monkeypatch, minilm_dir):
    """One worker pretrains in-process (its own MLflow run); a fine-tuning re-run on an up-to-date output
    logs the existing model, so both stay registrable."""
    from operators import registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    segmented = ops.segment([demo_data("corpus")], str(tmp_path / "segmented"))
    shards = ops.make_shards(segmented, str(tmp_path / "shards"), str(minilm_dir / "vocab.txt"),
                             {"max_seq_length": 64, "max_predictions_per_seq": 10, "dupe_factor": 1})
    assert ops.validate_shards(shards)["instances"] > 100
    pretrained = ops.pretrain(shards, str(tmp_path / "pretrained"),
                              {"model": "bert_2_64_2", "num_workers": 1, "num_steps": 3, "batch_size": 8},
                              vocab=str(minilm_dir / "vocab.txt"))
    assert pretrained["mlflow_run_id"]
    assert ops.register_and_promote(pretrained, str(tmp_path / "reg"), promote=False)["candidate"] == "1"

    runs = [ops.finetune("sst-2", demo_data("sst2"), pretrained["output"], str(tmp_path / "ft"),
                          dict(epochs=1, batch_size=16, lr=1e-4, max_seq_length=16))
            for _ in range(2)]
    assert runs[0]["metrics"] == runs[1]["metrics"] and runs[0]["mlflow_run_id"] != runs[1]["mlflow_run_id"]
    reports = [ops.register_and_promote(ops.evaluate(r, str(tmp_path / "eval")), str(tmp_path / "reg"))
               for r in runs]
    assert [r["candidate"] for r in reports] == ["1", "2"]
    assert reports[1]["champion_before"] == "1" or not reports[0]["promoted"]
    # A finetune() result registered without evaluate() (the Python API) meets the same chance bar and dev file tag.
    evaluated = ops.evaluate(runs[0], str(tmp_path / "eval"))
    direct = ops.register_and_promote(runs[0], str(tmp_path / "reg"))
    assert direct["chance"] == evaluated["chance"] and evaluated["chance"]["accuracy"] > 0.4
    assert registry._client(None).get_model_version("bert-sst-2", direct["candidate"]).tags[
        registry.DEV_DATA_TAG] == evaluated["dev_sha256"]
    assert not (tmp_path / "mlruns").exists()
    assert registry.model_name("sst-2") == reports[0]["name"]


def test_evaluate_rescores_every_file_finetuning_scored(tmp_path, monkeypatch):
    """The evaluate step re-scores exactly what fine-tuning scored: MNLI's two dev files, NER's CoNLL output."""
    import shutil

    from tests.tiny_bert import write_tiny_bert
    from tests.toy_tasks import write_ner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    model = write_tiny_bert(tmp_path / "tiny")
    mnli = tmp_path / "mnli"
    shutil.copytree(FIXTURES / "glue" / "MNLI", mnli)
    shutil.copyfile(mnli / "dev_matched.tsv", mnli / "train.tsv")
    for task, data in (("mnli", mnli), ("ner", write_ner(tmp_path / "ner", n_train=16, n_dev=6))):
        done = ops.finetune(task, str(data), str(model), str(tmp_path / f"ft-{task}"),
                           dict(epochs=1, batch_size=16, lr=1e-4, max_seq_length=24))
        evaluated = ops.evaluate(done, str(tmp_path / f"eval-{task}"))
        assert evaluated["metrics"] == done["metrics"], task
        # Promotion's bar for a first model: what always answering the dev file's majority label scores (MNLI),
        # what tagging every token "O" scores (NER: no entity, so 0 F1; the "O" share as token accuracy).
        if task == "mnli":
            assert set(evaluated["chance"]) == {"accuracy"}, evaluated["chance"]
            # The dev file the gates read, which promotion compares with the champion's (registry.DEV_DATA_TAG).
            assert evaluated["dev_sha256"] == manifest.sha256_file(mnli / "dev_matched.tsv")
        else:
            assert evaluated["chance"]["f1"] == 0.0 and 0 < evaluated["chance"]["accuracy"] < 1, evaluated["chance"]
        assert manifest.read(tmp_path / f"eval-{task}")["metrics"] == done["metrics"]
    assert "f1" in evaluated["metrics"]  # NER: entity-level scores of its .txt predictions
    assert "dev_mismatched/accuracy" in manifest.read(tmp_path / "eval-mnli")["metrics"]


def test_each_squad_version_is_registered_as_its_own_model(tmp_path, monkeypatch):
    """A SQuAD 2.0 model is a version of bert-squad2, gated on 2.0's metric names; a 1.1 model one of bert-squad:
    their dev files differ, so one model name could never move its champion from one version to the other."""
    from tests.tiny_bert import write_tiny_bert
    from tests.toy_tasks import write_squad

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    model = write_tiny_bert(tmp_path / "tiny")
    names = {}
    for version_2 in (False, True):
        data = write_squad(tmp_path / f"squad-{version_2}", n_train=8, n_dev=4, version_2=version_2)
        done = ops.finetune("squad", str(data), str(model), str(tmp_path / f"ft-{version_2}"),
                            dict(epochs=1, batch_size=8, lr=1e-4, max_seq_length=64, doc_stride=32,
                                 version_2=version_2))
        assert done["version_2"] is version_2
        report = ops.register_and_promote(ops.evaluate(done, str(tmp_path / f"eval-{version_2}")),
                                          str(tmp_path / "reg"))
        names[version_2] = (report["name"], report["gates"])
    assert names == {False: ("bert-squad", ["f1", "exact_match"]), True: ("bert-squad2", ["f1", "exact"])}


def test_finetune_settings_are_config_fields(tmp_path):
    """The task's settings are FinetuneConfig fields, named exactly: a misspelt one is an error naming it."""
    from bert_core.errors import BertPipelineError

    with pytest.raises(BertPipelineError, match="unknown doc_strid; known: .*doc_stride"):
        ops.finetune("squad", str(tmp_path), "model", str(tmp_path / "out"), {"doc_strid": 64})


def test_finetune_plan_layers_settings_and_rejects_bad_conf(tmp_path, monkeypatch, caplog, minilm_dir):
    """bert_finetune's plan: form settings < preset < per-task overrides, a search grid per task; and every
    bad conf fails this first task with a message naming the param."""
    from pipelines.bert_finetune import FINETUNE_SETTINGS, PARAMS

    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    defaults = {name: param.value for name, param in PARAMS.items()}

    def plan(**conf):
        return plan_finetune.plan({**defaults, **conf}, "r1", FINETUNE_SETTINGS, tuple(PARAMS), defaults)

    specs = plan(preset="gluonnlp", overrides={"SST-2": {"epochs": 1}}, search={"lr": [1e-4, 3e-4]})
    sst2, squad = specs
    assert (sst2.settings["batch_size"], sst2.settings["epochs"], sst2.settings["lr"]) == (16, 1, 2e-5)
    # The form leaves max_seq_length empty (the task kind's default); gluonnlp's values are 128 and SQuAD's 384.
    assert (defaults["max_seq_length"], sst2.settings["max_seq_length"], squad.settings["max_seq_length"]) == (
        None, 128, 384)
    assert (squad.settings["batch_size"], squad.settings["optimizer"]) == (12, "adamw")
    assert sst2.search == squad.search == {"lr": [1e-4, 3e-4]}
    assert plan()[0].settings["lr"] == 1e-4 and plan()[0].search == {}
    # A search of one task only: the others train once.
    sst2, squad = plan(search={"sst-2": {"lr": [1e-4, 3e-4]}})
    assert (sst2.search, squad.search) == ({"lr": [1e-4, 3e-4]}, {})

    # `recipe`, the form's former name of `preset`, still works (a conf sent to the REST API), with a warning.
    conf = {k: v for k, v in defaults.items() if k != "preset"}
    with caplog.at_level("WARNING"):
        old = plan_finetune.plan({**conf, "recipe": "bert-paper", "search": "recipe"}, "r1", FINETUNE_SETTINGS,
                                 tuple(PARAMS), defaults)
    new = plan(preset="bert-paper", search="preset")
    assert [(t.settings, t.search) for t in old] == [(t.settings, t.search) for t in new]
    assert "'recipe' is deprecated; write 'preset'" in caplog.text

    # `max_len`, the former name of max_seq_length for classification/NER (form or overrides), still works, and
    # never reaches SQuAD, which it did not apply to; SQuAD keeps its own default length.
    caplog.clear()
    with caplog.at_level("WARNING"):
        sst2, squad = plan_finetune.plan({**defaults, "max_len": 64}, "r1", FINETUNE_SETTINGS, tuple(PARAMS),
                                         defaults)
    assert (sst2.settings["max_seq_length"], squad.settings.get("max_seq_length")) == (64, None)
    assert "settings of sst-2: 'max_len' is deprecated (read as max_seq_length 64)" in caplog.text
    assert "settings of squad: 'max_len' is deprecated and never applied to SQuAD" in caplog.text
    sst2, squad = plan(overrides={"sst-2": {"max_len": 32}, "squad": {"max_len": 32, "max_seq_length": 96}})
    assert (sst2.settings["max_seq_length"], squad.settings["max_seq_length"]) == (32, 96)

    squad2 = tmp_path / "squad2"  # SQuAD 2.0 files only
    squad2.mkdir()
    (squad2 / "train-v2.0.json").write_text("{}", encoding="utf-8")
    bad = [
        (dict(learning_rate=1e-4), r"bert_finetune conf: unknown param\(s\) learning_rate"),
        (dict(overrides={"sst-2": {"epoch": 1}}), r"overrides.sst-2.epoch: not a fine-tuning setting"),
        (dict(overrides={"mrpc": {"epochs": 1}}), "overrides: mrpc not among the run's tasks"),
        (dict(overrides={"sst-2": 3}), "overrides: expected an object of task"),
        (dict(search={"lr": []}), r"search.lr: expected a non-empty list"),
        (dict(search={"mrpc": {"lr": [1e-4]}}), "search: mrpc not among the run's tasks"),
        (dict(model="bert_2_64_2"), "model: unknown model 'bert_2_64_2': not a directory and not a zoo name"),
        (dict(model=str(tmp_path / "no-model")), "model: no such model directory"),
        (dict(search={"squad": {"lr": 1e-4}}), r"search.squad.lr: expected a non-empty list"),
        (dict(search="preset"), "search: 'preset' needs a preset with a search protocol"),
        (dict(search={"lr": [1e-4]}, num_workers=2), "task sst-2: a search runs one worker per trial"),
        (dict(tasks={"cola": str(tmp_path)}), f"tasks.cola: {tmp_path} has no training file"),
        (dict(tasks={"cola": str(tmp_path / "nowhere")}), "tasks.cola: data directory .* does not exist"),
        (dict(tasks={"squad": str(squad2)}), r"tasks.squad: .* has no training file \(looked for train-v1.1.json, "
         r"train.json\); found train-v2.0.json: set version_2 true"),
        (dict(max_seq_length=1024), "task sst-2: max_seq_length 1024 is longer than the model's 512 positions"),
        (dict(overrides={"squad": {"max_seq_length": 1024}}),
         "task squad: max_seq_length 1024 is longer than the model's 512 positions"),
        (dict(overrides={"sst-2": {"batch_size": 0}}), "task sst-2: batch_size must be at least 1"),
        (dict(use_gpu=True), "task sst-2: use_gpu is set, but this machine has no GPU"),
        (dict(recipe="gluonnlp", preset="bert-paper"), "recipe .the deprecated name of preset. is 'gluonnlp'"),
    ]
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for conf, message in bad:
        with pytest.raises(BertPipelineError, match=message):
            plan(**conf)


def test_pretraining_phases_are_checked_before_any_work(tmp_path):
    from pipelines.bert_pretraining import PARAMS, PRETRAIN_SETTINGS, SHARD_SETTINGS

    defaults = {name: param.value for name, param in PARAMS.items()}

    def plan(**conf):
        return plan_pretraining.plan({**defaults, "work_dir": str(tmp_path), **conf}, "r1", SHARD_SETTINGS,
                                     PRETRAIN_SETTINGS, tuple(PARAMS))

    (single,) = plan().phases
    assert (single.name, single.output, single.shard_dir("/s/part-a.txt")) == (
        "", f"{tmp_path}/pretrained", f"{tmp_path}/shards/part-a")
    first, second = plan(phases=[{"max_seq_length": 128, "num_steps": 9},
                                 {"max_seq_length": 512, "num_steps": 1}]).phases
    assert second.shard_dir("/s/part-a.txt") == f"{tmp_path}/shards/phase2/part-a"
    assert (first.pretrain["num_steps"], second.pretrain["num_steps"], second.shards["max_seq_length"]) == (9, 1, 512)
    # The second phase starts from the first one's output: the plan says so, the task does not work it out.
    assert "model" not in second.pretrain and second.pretrain["pretrained"] == first.output
    bad = [
        (dict(phases=[{"max_seq_length": 128}, {"max_seq_length": 1024}]),
         r"phases\[1\]: max_seq_length 1024 is longer than the model's 512 positions"),
        (dict(phases=[{"seq_len": 128}]), r"phases\[0\].seq_len: not a make-shards or pretrain setting"),
        (dict(phases=[{}, {"model": "bert_4_256_4"}]), r"phases\[1\]: a later phase starts from the previous"),
        (dict(phases=[{"batch_size": 0, "num_workers": 2}]), r"phases\[0\]: batch_size must be at least 1"),
        (dict(phases="seq 128 then 512"), "phases: expected a list of objects"),
        (dict(seq=128), r"bert_pretraining conf: unknown param\(s\) seq"),
    ]
    for conf, message in bad:
        with pytest.raises(BertPipelineError, match=message):
            plan(**conf)


def test_pretrain_phases_runs_the_plan_it_is_given(monkeypatch):
    """The pretrain task does not plan again: an edited plan is what it runs, phase by phase."""
    calls = []

    def fake_pretrain(shards, output, settings, vocab=None, data_eval=None):
        calls.append((shards, output, settings, vocab, data_eval))
        return {"output": output, "metrics": {"loss": 1.0}, "mlflow_run_id": f"run-{len(calls)}"}

    monkeypatch.setattr(ops, "pretrain", fake_pretrain)
    phase = plan_pretraining.PhasePlan(name="p", index=0, shards={}, pretrain={"num_steps": 7, "model": "m"},
                                       shards_dir="/x/shards", heldout_dir="/x/held", output="/x/out")
    edited = plan_pretraining.PretrainingPlan(work_dir="/x", inputs=[], vocab="/v.txt", segmented="/x/seg",
                                              registry="/x/reg", phases=[phase])
    result = ops.pretrain_phases(edited, ["/x/seg/a.txt", "/x/seg/b.txt"])
    assert calls == [("/x/shards/a,/x/shards/b", "/x/out", {"num_steps": 7, "model": "m"}, "/v.txt", "/x/held")]
    assert result["phases"] == [{"phase": "p", "output": "/x/out", "metrics": {"loss": 1.0}, "mlflow_run_id": "run-1"}]


def test_demo_params_are_the_library_fields_and_keep_the_old_names(tmp_path, monkeypatch, caplog, minilm_dir):
    """bert_demo's Params come from the configs (the demo's values written once); its old conf keys still work."""
    from pipelines.bert_demo import DEMO, PARAMS

    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    defaults = {name: param.value for name, param in PARAMS.items()}
    assert defaults["pretrain_num_steps"] == DEMO.pretrain["num_steps"] == 500
    assert "Library default: 2e-05" in PARAMS["finetune_lr"].description

    def plan(**conf):
        return plan_demo.plan({**defaults, "model": str(minilm_dir), **conf}, "r1", DEMO, tuple(PARAMS), defaults)

    with caplog.at_level("WARNING"):
        old = plan(pretrain_steps=8, finetune_workers=0)
    assert old.pretrain["num_steps"] == 8 and old.finetune["sst-2"].settings["num_workers"] == 0
    assert "'pretrain_steps' is deprecated; write 'pretrain_num_steps'" in caplog.text
    assert plan(squad_epochs=1).finetune["squad"].settings["epochs"] == 1
    # The seed is in the form at the library's default (not a second copy of it), and reaches pretraining.
    from bert_core.pretrain.config import PretrainConfig

    library_seed = next(f.default for f in dataclasses.fields(PretrainConfig) if f.name == "seed")
    assert defaults["pretrain_seed"] == library_seed and "seed" not in DEMO.pretrain
    assert plan(pretrain_seed=3).pretrain["seed"] == 3
    assert plan(squad_epochs=1).finetune["sst-2"].settings["epochs"] == DEMO.finetune["epochs"]
    # One length per task, as the demo sizes them: SST-2 sentences 32 tokens, SQuAD windows 64.
    demo = plan()
    assert (demo.finetune["sst-2"].settings["max_seq_length"], demo.finetune["squad"].settings["max_seq_length"]) == (
        32, 64)
    assert "SQuAD's own: squad_max_seq_length" in PARAMS["finetune_max_seq_length"].description
    for conf, message in [(dict(pretrain_step=8), r"bert_demo conf: unknown param\(s\) pretrain_step"),
                          (dict(pretrain_batch_size=0), "bert_demo params: pretrain_batch_size must be at least 1"),
                          (dict(pretrain_num_workers="two"), "bert_demo params: pretrain_num_workers: expected a "
                                                             "number N or a range"),
                          (dict(pretrain_model="bert_2_128_two"), "bert_demo params: pretrain_model: unknown model"),
                          (dict(corpus=str(tmp_path / "nope.txt")), "bert_demo params: corpus: input .*nope.txt: "
                                                                    "no such file or directory"),
                          (dict(finetune_lr=-1.0), "task sst-2: finetune_lr must be positive"),
                          (dict(squad_epochs=0), "task squad: squad_epochs must be at least 1"),
                          (dict(pretrain_steps=8, pretrain_num_steps=9), "give pretrain_num_steps only")]:
        with pytest.raises(BertPipelineError, match=message):
            plan(**conf)


def test_the_summary_lists_models_in_the_plan_order_whatever_order_the_tasks_finished(tmp_path):
    """A mapped task's results reach the next task in the order they finished (seen under the CeleryExecutor)."""
    finished = [{"name": "bert-squad", "promoted": True}, {"name": "bert-sst-2", "promoted": False}]
    summary = ops.summarize(finished, str(tmp_path / "summary.json"), ["bert-sst-2", "bert-squad"])
    assert [m["name"] for m in summary["models"]] == ["bert-sst-2", "bert-squad"]
    assert json.loads((tmp_path / "summary.json").read_text())["models"] == summary["models"]


def test_the_make_shards_fan_out_skips_inputs_with_no_document(tmp_path):
    """segment writes an empty output for an empty input; the DAG's make-shards task of that one file failed the
    whole run ("every document of .../empty.txt was held out; lower --holdout-fraction"), where make-shards of
    the directory only warns. The fan-out leaves such files out."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("The first document. It has two sentences.\n\nThe second one.\n")
    (tmp_path / "raw" / "empty.txt").write_text("")
    segmented = ops.segment([str(tmp_path / "raw")], str(tmp_path / "segmented"))
    assert sorted(p.name for p in (tmp_path / "segmented").glob("*.txt")) == ["a.txt", "empty.txt"]
    assert ops.segmented_files(segmented) == [str(tmp_path / "segmented" / "a.txt")]


def test_a_file_whose_every_document_is_held_out_gives_no_training_shards(tmp_path, monkeypatch, minilm_dir):
    """One article per file, bert_pretraining's tasks as its DAG runs them: article-00's one document is drawn into
    the held-out side (default holdout_fraction 0.1). Its make_shards task failed the run ("every document of
    .../article-00.txt was held out; lower --holdout-fraction", a flag the DAG has not); now that file gives no
    training shards, recorded as such, validate_shards passes it and the run trains on the other files (which hold
    out nothing: the symmetric case). Only an empty side of the whole corpus is an error, naming the Param and the
    files."""
    from bert_core.data.instances import is_heldout
    from bert_core.data.make_shards import iter_documents
    from tests.corpus_text import documents

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    raw = tmp_path / "raw"
    raw.mkdir()
    for i, doc in enumerate(documents(6, seed=7, min_sentences=4, max_sentences=8)):
        (raw / f"article-{i:02d}.txt").write_text("\n".join(doc) + "\n")
    defaults = {name: param.value for name, param in bert_pretraining.PARAMS.items()}
    plan = plan_pretraining.plan({**defaults, "work_dir": str(tmp_path / "w"), "inputs": [str(raw)],
                                  "model": "bert_2_64_2", "num_workers": 1, "num_steps": 2, "batch_size": 4},
                                 "r1", bert_pretraining.SHARD_SETTINGS, bert_pretraining.PRETRAIN_SETTINGS)
    phase, = plan.phases
    assert phase.shards["holdout_fraction"] == 0.1
    files = ops.segmented_files(ops.segment(plan.inputs, plan.segmented))
    held = [f for f in files if all(is_heldout(d, 0.1) for d in iter_documents(Path(f), f))]
    assert len(files) == 6 and [Path(f).name for f in held] == ["article-00.txt"]

    ops.make_shards(files, phase.heldout_dir, plan.vocab, phase.shards, split="heldout")
    validated = [ops.validate_shards(ops.make_shards(f, phase.shard_dir(f), plan.vocab, phase.shards, split="train"))
                 for f in files]
    assert [v["instances"] == 0 for v in validated] == [f in held for f in files]
    empty = manifest.read(phase.shard_dir(held[0]))
    assert empty["shards"] == [] and empty["totals"]["instances"] == 0
    assert empty["totals"]["other_side_documents"] == 1 and "on the train side" in empty["empty_side"]
    result = ops.pretrain_phases(plan, files)
    assert result["steps"] == 2 and result["phases"][0]["files_all_held_out"] == held

    # The whole corpus's sides, in the DAG's terms: no held-out document, or nothing left to train on.
    names = r"article-00\.txt, article-01\.txt, .*, \.\.\. \(6 files\)"
    with pytest.raises(BertPipelineError, match=rf"holdout_fraction 0\.001 held out none of the 6 document\(s\) of "
                                                rf"the input file\(s\) {names}: .* raise the Param holdout_fraction"):
        ops.make_shards(files, str(tmp_path / "h1"), plan.vocab, {**phase.shards, "holdout_fraction": 0.001},
                        split="heldout")
    greedy = dataclasses.replace(phase, shards={**phase.shards, "holdout_fraction": 0.999},
                                 shards_dir=str(tmp_path / "all-held"))
    with pytest.raises(BertPipelineError, match=rf"holdout_fraction 0\.999 held out every one of the 6 document\(s\) "
                                                rf"of the input file\(s\) {names}: none is left to train on; lower the "
                                                "Param holdout_fraction"):
        ops.make_shards(files, str(tmp_path / "h2"), plan.vocab, greedy.shards, split="heldout")
    for f in files:  # each file's own training task passes; pretraining then has nothing to train on
        ops.make_shards(f, greedy.shard_dir(f), plan.vocab, greedy.shards, split="train")
    with pytest.raises(BertPipelineError, match=rf"holdout_fraction 0\.999 held out every document of the input "
                                                rf"file\(s\) {names}: none is left to train on"):
        ops.pretrain_phases(dataclasses.replace(plan, phases=[greedy]), files)
