"""The run report from synthetic records: what it gathers from a run directory, what the page shows (decisions
and why, curves with chance lines, epochs, timeline, serve commands), and that it is self-contained. The report of
a real run, opened in Chromium, is checked in tests/test_demo.py."""

from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser

import pytest

from bert_core.errors import BertPipelineError
from operators.report import collect as collecting
from operators.report import plots
from operators.report.collect import collect
from operators.report.publish import mlflow_run_id
from operators.report.render import SECTIONS, render

RUN = "manual__2026-11-24T10:00:00+00:00"
EXAMPLE = {"dataframe_split": {"columns": ["text"], "data": [["it's a wonderful film"]]}}


def _history(steps, start, end):
    return [[s, start + (end - start) * i / (len(steps) - 1)] for i, s in enumerate(steps)]


def phase(name: str, nsp: float) -> dict:
    steps = list(range(10, 110, 10))
    return {
        "phase": name, "output": f"/runs/1/pretrained/{name}", "mlflow_run_id": "a" * 32,
        "metrics": {"loss": 3.1, "mlm_accuracy": 0.31, "mlm_accuracy_chance": 0.12, "nsp_accuracy": nsp,
                    "nsp_accuracy_chance": 0.55, "mlm_accuracy_over_chance": 0.19},
        "metrics_on": "data_eval", "steps": 100, "world_size": 2, "tokens": 123456, "resumed_from": None,
        "recipe": {"optimizer": "adamw", "lr": 2e-3, "warmup_ratio": 0.1, "chosen_by_rule": ["lr"]},
        "learning_check": {"status": "warned", "problems": ["next-sentence accuracy 0.550 is at chance"],
                           "checked_at": [25, 50, 100]},
        "config": {"model": "bert_2_64_2", "batch_size": 32, "accumulate": 1, "dtype": "float32"},
        "started_at": "2026-11-24T10:00:10+00:00", "finished_at": "2026-11-24T10:01:10+00:00",
        "history": {"loss": _history(steps, 9.0, 3.0), "mlm_accuracy": _history(steps, 0.05, 0.35),
                    "eval_loss": [[50, 4.0], [100, 3.1]], "eval_mlm_accuracy": [[50, 0.2], [100, 0.31]],
                    "eval_nsp_accuracy": [[50, 0.55], [100, nsp]], "eval_mlm_accuracy_chance": [[100, 0.12]],
                    "eval_nsp_accuracy_chance": [[100, 0.55]]},
        "history_note": None,
    }


def finetuned(task: str, trial: str | None, best: bool, scores: list[float]) -> dict:
    return {"task": task, "trial": trial, "best": best, "output": f"/runs/1/finetune-{task}", "main_metric": "accuracy",
            "best_epoch": scores.index(max(scores)) + 1, "dev": {"accuracy": max(scores)},
            "epochs": [{"epoch": i + 1, "train_loss": 0.7 - 0.1 * i, "accuracy": s} for i, s in enumerate(scores)],
            "mlflow_run_id": "b" * 32, "started_at": None, "finished_at": None}


def decision(name: str, version: str, promoted: bool, before: str | None, metrics: dict, champion: dict | None,
             reasons: list[str], floors: dict) -> dict:
    return {"name": name, "candidate": version, "champion_before": before, "promoted": promoted,
            "champion_after": version if promoted else before, "previous_after": before if promoted else None,
            "gates": ["accuracy"] if name != "bert-pretrained" else ["mlm_accuracy"], "floors": floors,
            "candidate_metrics": metrics, "champion_metrics": champion, "reasons": reasons,
            "decided_at": "2026-11-24T10:05:00+00:00", "serving_check": {"examples": 8, "problems": []},
            "serving_example": EXAMPLE if promoted else None}


def task(task_id: str, start: int, seconds: float, state: str = "success", map_index: int = -1, try_number: int = 1,
         error: str | None = None) -> dict:
    return {"dag_id": "bert_demo", "run_id": RUN, "task_id": task_id, "map_index": map_index,
            "try_number": try_number, "state": state, "started_at": f"2026-11-24T10:0{start // 60}:{start % 60:02d}+00:00",
            "finished_at": f"2026-11-24T10:0{(start + int(seconds)) // 60}:{(start + int(seconds)) % 60:02d}+00:00",
            "duration_s": seconds, "hostname": "worker-1", "error": error, "tracking_uri": "sqlite:///m.db"}


RECORDS = {
    "format": 1, "run_dir": "/runs/1", "dag_id": "bert_demo", "dag_run_id": RUN, "tracking_uri": "sqlite:////runs/m.db",
    "collected_at": "2026-11-24T10:06:00+00:00",
    "pretraining": [{**phase("phase1", 0.71), "config": {**phase("phase1", 0.71)["config"], "dtype": "auto"},
                     "precision": {"dtype": "bfloat16", "requested": "auto",
                                   "reason": "the CPU has native bfloat16 (AVX512-BF16)"}},
                    phase("phase2", 0.55)],
    "finetuning": [finetuned("sst-2", "lr=0.0001", False, [0.6, 0.7]), finetuned("sst-2", "lr=0.001", True, [0.8, 0.9]),
                   finetuned("squad", None, True, [0.3, 0.2])],
    "registry": [
        decision("bert-pretrained", "2", False, "1", {"mlm_accuracy": 0.31, "mlm_accuracy_over_chance": 0.019,
                                                       "nsp_accuracy": 0.55, "nsp_accuracy_chance": 0.55},
                 {"mlm_accuracy": 0.4}, ["mlm_accuracy_over_chance: 0.019 is below the floor 0.05",
                                         "mlm_accuracy: 0.31 is worse than the champion's 0.4"],
                 {"mlm_accuracy_over_chance": 0.05}),
        decision("bert-sst-2", "3", True, "2", {"accuracy": 0.9}, {"accuracy": 0.85},
                 ["every gate metric is no worse than the champion's"], {"accuracy": 0.5}),
    ],
    "tasks": [task("plan", 0, 1.2), task("make_shards", 2, 20.0, map_index=0), task("make_shards", 3, 25.0, map_index=1),
              task("pretrain", 30, 40.0, "failed", error="ConnectionError: S3 endpoint reset"),
              task("pretrain", 75, 60.0, try_number=2)],
}


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.images, self.tags, self.text = [], [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "img":
            self.images.append(attrs)

    def handle_data(self, data):
        self.text.append(data)


def test_the_page_shows_decisions_curves_epochs_timeline_and_serve_commands():
    from PIL import Image

    html = render(RECORDS)
    page = Page()
    page.feed(html)
    assert list(SECTIONS) == [i for i in page.ids if i in SECTIONS]
    # Self-contained: every image is an embedded PNG, nothing is fetched, nothing runs.
    assert len(page.images) == 2 + 2 + 1  # pretraining phases, fine-tuned tasks, timeline
    for image in page.images:
        assert image["src"].startswith("data:image/png;base64,") and image["alt"]
        png = Image.open(io.BytesIO(base64.b64decode(image["src"].split(",", 1)[1])))
        assert png.format == "PNG" and png.size[0] > 400 and png.size[1] > 100
    assert not [t for t, a in page.tags if t == "script" or (t == "link" and a.get("href", "").startswith("http"))]
    assert "http://" not in html and "https://" not in html
    text = " ".join(" ".join(page.text).split())
    # The registry's decision per model, and why.
    assert "bert-pretrained v2 not promoted champion before: v1 → after: v1 ; previous: none" in text
    assert "mlm_accuracy_over_chance: 0.019 is below the floor 0.05" in text
    assert "bert-sst-2 v3 promoted to champion champion before: v2 → after: v3 ; previous: v2" in text
    assert "accuracy gate and floor 0.9 0.85 0.5 passes" in text
    assert "mlm_accuracy gate 0.31 0.4 — 0.31 is worse than the champion's 0.4" in text
    assert "Next-sentence accuracy is at chance: 0.550, where always answering the majority label scores 0.550" in text
    # The precision a phase computed in, and why (its dtype flag was auto); a record without the choice: its flag.
    assert "batch 32 x accumulate 1, bfloat16 (dtype auto: the CPU has native bfloat16 (AVX512-BF16))." in text
    assert "batch 32 x accumulate 1, float32." in text
    # Pretraining's final figures against chance; fine-tuning's best epoch; a search's winner.
    assert "masked-LM accuracy 0.31 0.12 always predicting the most frequent masked token +19.0 points above chance" in text
    assert "next-sentence accuracy 0.55 0.55 always answering the majority label at chance: did not learn" in text
    assert "Search over 2 trials; the best was lr=0.001" in text and "Best epoch 1: dev accuracy 0.3" in text
    # ... registered where the run registered its model (sst-2), kept only where it did not (squad: a failed run).
    assert "dev accuracy 0.9; this epoch's model is the one evaluated and registered." in text
    assert "dev accuracy 0.3; this epoch's model is the one kept; this run did not register it" in text
    # The timeline names the failed try and its error, and the retry.
    assert "pretrain failed +30.0 s 40.0 s ConnectionError: S3 endpoint reset" in text
    assert "pretrain (try 2) success" in text and "make_shards[1] success" in text
    # Serve commands for the promoted model only, with its example request.
    assert "mlflow models serve -m models:/bert-sst-2@champion --env-manager local -h 127.0.0.1 -p 5001" in text
    assert "models:/bert-pretrained@champion" not in text
    assert "bert-pretrained v2 was not promoted: the champion is still v1." in text
    assert "export MLFLOW_TRACKING_URI=sqlite:////runs/m.db" in text
    assert """-d '{"dataframe_split": {"columns": ["text"], "data": [["it'"'"'s a wonderful film"]]}}'""" in text


def test_pretraining_curves_draw_each_accuracys_chance_level():
    fig = plots.pretraining_figure(RECORDS["pretraining"][0])
    loss, mlm, nsp = fig.axes
    chance = {ax.get_title(): [(line.get_label(), set(line.get_ydata())) for line in ax.get_lines()
                               if line.get_label().startswith("chance")] for ax in (mlm, nsp)}
    assert chance == {"masked-LM accuracy": [("chance: most frequent token (0.120)", {0.12})],
                      "next-sentence accuracy": [("chance: majority label (0.550)", {0.55})]}
    held_out = [line for line in mlm.get_lines() if line.get_label() == "held-out"][0]
    assert list(held_out.get_xdata()) == [50, 100] and mlm.get_ylim()[0] == 0


def _write(root, rel, value):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value))


def test_records_are_gathered_from_a_run_directory(tmp_path, monkeypatch):
    """The layout the plans write: phases, a fine-tuning search (best trial from search.json), registry reports
    (the run summary beside them skipped), the tasks' records; the store the tasks recorded is the one read."""
    run = tmp_path / "run"
    for name in ("phase2", "phase1"):
        _write(run, f"pretrained/{name}/manifest.json", {"step": "pretrain", "metrics": {"mlm_accuracy": 0.3},
                                                         "training": {"steps": 10, "metrics_on": "data_eval"},
                                                         "precision": {"dtype": "bfloat16", "requested": "auto",
                                                                       "reason": "r"}})
    _write(run, "shards/part-a/manifest.json", {"step": "make-shards"})
    for trial, score in (("lr=0.001", 0.9), ("lr=0.0001", 0.7)):
        _write(run, f"finetune-sst-2/{trial}/metrics.json", {"main_metric": "accuracy", "best_epoch": 1,
                                                              "dev": {"accuracy": score},
                                                              "epochs": [{"epoch": 1, "accuracy": score}]})
        _write(run, f"finetune-sst-2/{trial}/manifest.json", {"step": "finetune", "task": "sst-2"})
    _write(run, "finetune-sst-2/search.json", {"best": "lr=0.001"})
    _write(run, "registry/bert-sst-2-v4.json", RECORDS["registry"][1])
    _write(run, "registry/bert-pretrained-v2.json", RECORDS["registry"][0])
    _write(run, "registry/summary.json", {"tracking_uri": "x", "models": []})
    for record in reversed(RECORDS["tasks"]):
        _write(run, f"tasks/{record['task_id']}-{record['map_index']}.try{record['try_number']}.json", record)
    asked = []
    monkeypatch.setattr(collecting, "_serving_example", lambda name, version, uri: asked.append((name, uri)) or EXAMPLE)

    records = collect(str(run) + "/")
    assert records["run_dir"] == str(run) and (records["dag_id"], records["dag_run_id"]) == ("bert_demo", RUN)
    assert records["tracking_uri"] == "sqlite:///m.db"  # the tasks' store
    assert [p["phase"] for p in records["pretraining"]] == ["phase1", "phase2"]
    assert records["pretraining"][0]["precision"]["dtype"] == "bfloat16"
    assert records["pretraining"][0]["history_note"].startswith("the run was not tracked")
    assert [(f["trial"], f["best"]) for f in records["finetuning"]] == [("lr=0.0001", False), ("lr=0.001", True)]
    assert [d["name"] for d in records["registry"]] == ["bert-pretrained", "bert-sst-2"]
    assert asked == [("bert-sst-2", "sqlite:///m.db")]  # an example request for the promoted model only
    assert [t["task_id"] for t in records["tasks"]] == ["plan", "make_shards", "make_shards", "pretrain", "pretrain"]
    assert collect(str(run), tracking_uri="http://mlflow:5000")["tracking_uri"] == "http://mlflow:5000"
    assert "<section id=\"timeline\">" in render(records)

    _write(run, "registry/bert-squad-v1.json", "{not json")
    with pytest.raises(BertPipelineError, match=r"registry/bert-squad-v1.json: not valid JSON \(line 1"):
        collect(str(run))
    _write(tmp_path / "other", "notes.txt", "nothing of a run")
    with pytest.raises(BertPipelineError, match="holds none of a DAG run's records"):
        collect(str(tmp_path / "other"))
    with pytest.raises(BertPipelineError, match="no such run directory"):
        collect(str(tmp_path / "missing"))


def test_mlflow_run_references():
    run = "0123456789abcdef0123456789abcdef"
    assert mlflow_run_id(f"runs:/{run}") == (run, None)
    assert mlflow_run_id(run) == (run, None)
    assert mlflow_run_id(f"http://mlflow:5000/#/experiments/3/runs/{run}") == (run, "http://mlflow:5000")
    with pytest.raises(BertPipelineError, match="not a run directory, nor an MLflow run"):
        mlflow_run_id("runs:/short")


def test_a_failed_run_says_so_at_the_top_naming_the_failed_task_and_its_error():
    """A run whose task failed for good (its last try): the page opens with that, before the sections that are
    empty because of it; a try that failed and was retried successfully is no failure of the run."""
    failed = {**RECORDS, "registry": [], "pretraining": [], "finetuning": [],
              "tasks": [task("plan", 0, 1.2), task("segment", 2, 3.0, "failed", error="AirflowFailException: "
                                                   "/data/latin1.txt: not UTF-8 text")]}
    page = Page()
    page.feed(render(failed))
    text = " ".join(" ".join(page.text).split())
    assert text.index("This run failed: segment: AirflowFailException: /data/latin1.txt: not UTF-8 text") < \
        text.index("Models: the registry's decisions")
    assert ("div", {"class": "note failed"}) in page.tags

    # Pretrain failed once, then succeeded; an earlier build's report task failed (a teardown: no part of the run's
    # outcome, and in the records of a report built again).
    retried = {**RECORDS, "tasks": [*RECORDS["tasks"], task("report", 140, 2.0, "failed", error="MLflow is down")]}
    page = Page()
    page.feed(render(retried))
    assert "This run failed" not in " ".join(page.text) and ("div", {"class": "note failed"}) not in page.tags


def test_a_one_epoch_fine_tuning_has_its_epoch_as_the_only_tick():
    """One epoch (a quick run): the epoch axis shows epoch 1, not 0.96 ... 1.04."""
    fig = plots.finetuning_figure([finetuned("sst-2", None, True, [0.6])])
    for ax in fig.axes:
        fig.canvas.draw()
        assert [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]] == [1.0], ax.get_title()


def _pretrain_manifest(train: list, heldout, steps: int, batch: int, accumulate: int) -> dict:
    """A pretrain manifest as bert_core.pretrain.step writes it: its config's data and data_eval, and as inputs
    the shard files with their hashes (ShardSet.sha256, as the step's preflight records them)."""
    from bert_core.pretrain.stream import ShardSet

    data, data_eval = ",".join(str(d) for d in train), str(heldout)
    inputs = {**ShardSet(data).sha256(), **ShardSet(data_eval).sha256()}
    return {"step": "pretrain", "config": {"data": data, "data_eval": data_eval, "model": "bert_2_64_2",
                                           "batch_size": batch, "accumulate": accumulate, "num_steps": steps},
            "inputs": [{"uri": uri, "sha256": digest} for uri, digest in sorted(inputs.items())],
            "outputs": [], "metrics": {"mlm_accuracy": 0.3, "mlm_accuracy_chance": 0.12},
            "training": {"steps": steps, "total_steps": steps, "world_size": 1, "metrics_on": "data_eval"}}


def test_the_data_section_says_what_each_phase_trained_on_from_the_data_steps_records(tmp_path):
    """A two-phase bert_pretraining run directory, its data made by the real steps (segment, make-shards per
    segmented file and a held-out side per phase, validate-shards): the report's records and page give the
    documents and sentences, the training and held-out instances and documents, each shard directory's files,
    size and validate-shards result (what it checked, what failed), and per phase its sequence length, max
    predictions, batch and steps, all as those steps recorded them; so does the text summary logged to MLflow."""
    from bert_core.data.instances import ShardConfig
    from bert_core.data.make_shards import heldout_config, make_shards
    from bert_core.data.segment import segment
    from bert_core.data.validate_shards import validate_shards
    from bert_core.io import manifest
    from operators.locations import default_model_dir, demo_data
    from operators.report.publish import _summary

    run = tmp_path / "run"
    corpus = [f"{demo_data('corpus')}/part-a.txt", f"{demo_data('corpus')}/part-b.txt"]
    segmented = segment(corpus, str(run / "segmented"))
    files = [str(run / "segmented" / o["path"]) for o in segmented["outputs"]]
    vocab = f"{default_model_dir()}/vocab.txt"
    made = {}
    for phase, seq, predictions, steps in (("phase1", 64, 10, 90), ("phase2", 128, 20, 10)):
        config = ShardConfig(max_seq_length=seq, max_predictions_per_seq=predictions, dupe_factor=2,
                             holdout_fraction=0.1, split="train")
        train = [run / "shards" / phase / name for name in ("part-a", "part-b")]
        for file, directory in zip(files, train):
            made[directory] = make_shards([file], str(directory), vocab, config, progress=False)
        heldout = run / "shards-heldout" / phase
        made[heldout] = make_shards(files, str(heldout), vocab, heldout_config(config), progress=False)
        _write(run, f"pretrained/{phase}/manifest.json", _pretrain_manifest(train, heldout, steps, 32, 2))
    for directory in (run / "shards" / "phase1" / "part-a", run / "shards" / "phase1" / "part-b"):
        assert validate_shards(str(directory))["success"]
    # A validation that failed, as validate_shards writes one (its failed checks, each with its message).
    failed = json.loads((run / "shards/phase1/part-a/validation.json").read_text())
    failed["success"] = False
    failed["checks"][0]["success"] = False
    failed["failed"] = [{**failed["checks"][0], "message": "expect_column_values_to_be_in_set on ids_in_vocab "
                                                            "[ids inside the vocabulary] failed in part-00000.npz"}]
    _write(run, "shards/phase2/part-a/validation.json", failed)

    records = collect(str(run))
    data = records["data"]
    json.dumps(records)  # report_data.json
    assert data["text"][0]["documents"] == segmented["totals"]["documents"] == 225
    assert data["text"][0]["sentences"] == segmented["totals"]["sentences"]
    one, two = data["phases"]
    train1 = [made[run / "shards/phase1" / n] for n in ("part-a", "part-b")]
    held1 = made[run / "shards-heldout/phase1"]
    assert (one["phase"], one["max_seq_length"], one["max_predictions_per_seq"], one["batch_size"],
            one["accumulate"], one["steps"]) == ("phase1", 64, 10, 32, 2, 90)
    assert (two["max_seq_length"], two["max_predictions_per_seq"], two["steps"]) == (128, 20, 10)
    assert one["instances"] == sum(m["totals"]["instances"] for m in train1)
    assert one["heldout_instances"] == held1["totals"]["instances"] and one["heldout_documents"] > 0
    assert one["documents"] + one["heldout_documents"] == 225  # every document on one side of the split
    assert one["train"] == ["shards/phase1/part-a", "shards/phase1/part-b"] and one["heldout"] == [
        "shards-heldout/phase1"]
    sets = {s["dir"]: s for s in data["shard_sets"]}
    part_a = sets["shards/phase1/part-a"]
    assert part_a["shards"] == len(made[run / "shards/phase1/part-a"]["shards"])
    assert part_a["bytes"] == sum(p.stat().st_size for p in (run / "shards/phase1/part-a").glob("*.npz"))
    assert part_a["phases"] == ["phase1"] and sets["shards-heldout/phase2"]["side"] == "heldout"
    assert part_a["validation"]["success"] and part_a["validation"]["checks"] == 30
    assert sets["shards/phase2/part-a"]["validation"]["success"] is False
    assert sets["shards/phase2/part-b"]["validation"] is None

    page = Page()
    page.feed(render(records))
    text = " ".join(" ".join(page.text).split())
    assert text.index("Data: what the model trained on") < text.index("Pretraining")
    held_docs = one["heldout_documents"]
    assert (f"225 documents ({segmented['totals']['sentences']:,} sentences) from 2 input file(s), split into "
            f"sentences by punkt (trained on this text): {225 - held_docs} for training, {held_docs}") in text
    assert (f"phase1 64 10 32 x 2 90 {one['instances']:,} ({225 - held_docs} documents) "
            f"{90 * 64 / one['instances']:.4g} {one['heldout_instances']} ({held_docs} documents)") in text
    assert f"phase2 128 20 32 x 2 10 {two['instances']:,} ({two['documents']} documents)" in text
    assert (f"shards/phase1/part-a training phase1 {part_a['shards']} {part_a['bytes'] / 1024:.1f} KiB "
            f"{part_a['documents']} {part_a['tokens']:,} {part_a['instances']:,} {part_a['masked']:,} "
            "passed (30 checks)") in text
    assert "shards/phase2/part-a training phase2" in text and "failed: 1 of 30 checks" in text
    assert "shards-heldout/phase1 held-out phase1" in text and "not validated" in text
    assert "failed in 1 of the 3 directories it validated" in text
    assert "ids inside the vocabulary] failed in part-00000.npz" in text
    assert "What it checked: 30 checks in 4 suites" in text and "[CLS] at position 0" in text
    assert "masked copies of each document (dupe factor) 2 (training), 1 (held-out)" in text

    summary = _summary(records)
    assert f"- text: 225 documents, {segmented['totals']['sentences']:,} sentences from 2 input file(s)" in summary
    assert (f"- pretraining phase1: {one['instances']:,} training instances ({225 - held_docs} documents), "
            f"{one['heldout_instances']} held-out instances ({held_docs} documents); sequence length 64, max "
            "predictions 10, batch 32 x accumulate 2, 90 steps") in summary
    assert "- training shards: 4 shard file(s) in 4 directories" in summary
    assert "validate-shards FAILED in 1 of 3 directories (1 not validated)" in summary
    assert manifest.read(str(run / "shards/phase1/part-a"))["step"] == "make-shards"

    # One input file's training side with no document (all held out): make-shards records an empty side, no shard.
    empty = {**sets["shards/phase2/part-b"], "shards": 0, "bytes": 0, "instances": 0, "documents": 0,
             "empty_side": "none of the 1 document(s) of the inputs is on the train side"}
    page = Page()
    page.feed(render({**records, "data": {**data, "shard_sets": [empty]}}))
    assert "shards/phase2/part-b training phase2 0 0 bytes 0" in " ".join(" ".join(page.text).split())
    assert "no shard: none of its documents is on this side" in " ".join(page.text)

    # A run that made no data (bert_finetune), and a report drawn from records logged before there was a Data
    # section, say so in the section.
    for without in ({**records, "data": {}}, {k: v for k, v in records.items() if k != "data"}):
        assert "This run made no pretraining data" in render(without)
        assert "Data:" not in _summary(without)
