"""Every DAG file in pipelines/ imports cleanly; the DAGs have the tasks, dependencies and params of the design."""

from __future__ import annotations

import pytest

from tests.airflow_home import PIPELINES


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PIPELINES), safe_mode=False)


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"bert_demo", "bert_finetune", "bert_pretraining", "bert_nightly_regression"} <= set(dagbag.dags)


def test_every_param_has_default_and_description(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.params, dag_id
        for name, param in dag.params.items():
            param = dag.params.get_param(name)
            # None is a default only where the schema allows it ("unset: use the bundled data"); a UI form
            # treats an empty string as a missing required value.
            nullable = "null" in (param.schema.get("type") or [])
            assert param.value is not None or nullable, f"{dag_id}: param {name} has no default"
            assert param.value != "", f"{dag_id}: param {name}: use None (type null|string), not an empty string"
            assert param.description, f"{dag_id}: param {name} has no description"


def test_every_param_is_in_a_form_section(dagbag):
    """Each DAG's trigger form reads like a recipe: every Param in one of the sections of operators.params
    (data, model, optimization, ... each titled with its sentence), each section one block, in SECTIONS' order."""
    from operators.params import SECTIONS

    order = list(SECTIONS.values())
    for dag_id in ("bert_demo", "bert_pretraining", "bert_finetune", "bert_nightly_regression"):
        dag = dagbag.dags[dag_id]
        shown = [dag.params.get_param(name).schema.get("section") for name in dag.params]
        assert all(title in order for title in shown), (dag_id, set(shown) - set(order))
        blocks = [title for i, title in enumerate(shown) if i == 0 or shown[i - 1] != title]
        assert blocks == sorted(set(shown), key=order.index), f"{dag_id}: sections out of order: {blocks}"
        assert len(blocks) >= 4, f"{dag_id}: {blocks}"


def _edges(dag) -> set[tuple[str, str]]:
    """The pipeline's edges; those into the run's report (from every task) are checked by _ends_with_the_report."""
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids if d != "report"}


def test_demo_dag_shape(dagbag):
    dag = dagbag.dags["bert_demo"]
    assert dag.schedule is None or str(dag.timetable.summary) in ("None", "Never")
    assert {t.task_id for t in dag.tasks} == {
        "plan", "segment", "make_shards", "make_heldout_shards", "validate_shards", "validate_heldout_shards",
        "pretrain", "register_and_promote_pretrained",
        "finetune_sst2", "finetune_squad", "evaluate_sst2", "evaluate_squad", "register_and_promote_sst2",
        "register_and_promote_squad", "summary", "report",
    }
    chain = [("segment", "make_shards"), ("make_shards", "validate_shards"), ("validate_shards", "pretrain"),
             ("segment", "make_heldout_shards"), ("make_heldout_shards", "validate_heldout_shards"),
             ("validate_heldout_shards", "pretrain"), ("pretrain", "register_and_promote_pretrained"), ("register_and_promote_pretrained", "summary")]
    for name in ("sst2", "squad"):
        chain += [(f"finetune_{name}", f"evaluate_{name}"),
                  (f"evaluate_{name}", f"register_and_promote_{name}"), (f"register_and_promote_{name}", "summary")]
    edges = _edges(dag)
    assert set(chain) <= edges
    # plan feeds the steps (evaluate: through fine-tuning's result, which carries its task's plan); nothing else
    # links the two branches.
    assert edges - set(chain) == {("plan", t) for t in ("segment", "make_shards", "make_heldout_shards", "pretrain",
                                                         "finetune_sst2", "finetune_squad",
                                                         "register_and_promote_pretrained", "register_and_promote_sst2",
                                                         "register_and_promote_squad", "summary")}
    assert dag.params["pretrain_num_workers"] == 2
    _ends_with_the_report(dag, "summary")


def _ends_with_the_report(dag, last: str) -> None:
    """The run's report is a teardown downstream of every other task: it runs once they are all done, whatever
    their outcome (not as soon as the last task is upstream_failed while another branch still runs), and is left
    out of the DAG run's state, which `last` decides as before (Airflow's leaves: tasks whose downstream are
    teardowns only), so a report that fails does not fail a run whose work succeeded."""
    report = dag.get_task("report")
    assert report.is_teardown and not report.downstream_task_ids
    assert report.upstream_task_ids == {t.task_id for t in dag.tasks} - {"report"}
    assert report.trigger_rule == "all_done_setup_success" and not report.on_failure_fail_dagrun
    assert report.retries == 0
    from airflow.models.dagrun import DagRun

    class Ti:
        def __init__(self, task_id):
            self.task_id, self.state = task_id, "success"

    leaves = DagRun._tis_for_dagrun_state(None, dag=dag, tis=[Ti(t.task_id) for t in dag.tasks])
    assert {ti.task_id for ti in leaves} == {last}


def test_finetune_dag_maps_over_tasks(dagbag):
    dag = dagbag.dags["bert_finetune"]
    assert _edges(dag) == {("plan", "finetune"), ("finetune", "evaluate"), ("evaluate", "register_and_promote"),
                           ("register_and_promote", "summary"), ("plan", "summary")}
    _ends_with_the_report(dag, "summary")
    # Mapped per task as one group: evaluate[i] waits for finetune[i] alone, so a task that fails does not keep the
    # others from being evaluated and registered.
    mapped = {t.task_id for t in dag.tasks if t.get_closest_mapped_task_group() is not None}
    assert mapped == {"finetune", "evaluate", "register_and_promote"}
    assert set(dag.params["tasks"]) == {"sst-2", "squad"}
    # The fine-tuning settings come from FinetuneConfig (one source), but for the DAG's own named few.
    from bert_core.finetune.config import FinetuneConfig
    from pipelines.bert_finetune import DAG_DEFAULTS

    library = FinetuneConfig(task="sst-2", data_dir="d", model="m", output="o")
    for name in ("doc_stride", "num_workers", "use_gpu"):
        assert dag.params[name] == getattr(library, name), name
    # max_seq_length's default depends on the task kind: empty in the form, the library resolves it per task.
    assert dag.params["max_seq_length"] is None
    assert "Empty: 128 for classification, regression and NER, 384 for SQuAD" in \
        dag.params.get_param("max_seq_length").description
    assert all(dag.params[name] == value for name, value in DAG_DEFAULTS.items())


def test_pretraining_dag_maps_make_shards_over_input_files_and_phases(dagbag):
    dag = dagbag.dags["bert_pretraining"]
    chain = {("segment", "make_shards"), ("make_shards", "validate_shards"), ("validate_shards", "pretrain"),
             ("segment", "make_heldout_shards"), ("make_heldout_shards", "validate_heldout_shards"),
             ("validate_heldout_shards", "pretrain"),
             ("pretrain", "register_and_promote"), ("phases", "make_shards"), ("phases", "make_heldout_shards"),
             ("segment", "pretrain")}
    edges = _edges(dag)
    _ends_with_the_report(dag, "register_and_promote")
    assert chain <= edges and {e for e in edges if e[0] != "plan"} == chain
    assert {t.task_id for t in dag.tasks if t.is_mapped} == {"make_shards", "make_heldout_shards", "validate_shards",
                                                             "validate_heldout_shards"}
    assert dag.params["phases"] == []  # one phase unless the conf lists them
    # One source for the training defaults: the DAG leaves the learning rate to the library's rule.
    assert dag.params["lr"] is None
    # Its defaults are the settings measured to learn on the bundled corpus, the demo's (one source).
    from pipelines.bert_demo import DEMO

    assert all(dag.params[name] == value for name, value in DEMO.shards.items())
    assert all(dag.params[name] == DEMO.pretrain[name] for name in ("model", "num_steps", "batch_size"))
    # A production run can be started from the trigger form: precision, GPUs, workers, optimizer, warmup,
    # accumulation, masking, held-out split, starting weights, checkpoints, storage, failures.
    production = {"dtype", "use_gpu", "num_workers", "optimizer", "warmup_ratio", "adam_eps", "accumulate",
                  "masked_lm_prob", "whole_word_mask", "do_lower_case", "holdout_fraction", "pretrained",
                  "ckpt_interval", "storage", "max_failures"}
    assert production <= set(dag.params)
    # ... with the library's defaults (one source), except the DAG's own few, which it names.
    from bert_core.pretrain.config import PretrainConfig
    from pipelines.bert_pretraining import DAG_DEFAULTS

    library = PretrainConfig(data="d", output="o", model="m", num_steps=1)
    for name in ("dtype", "adam_eps", "accumulate", "ckpt_interval", "max_failures", "weight_decay"):
        assert dag.params[name] == getattr(library, name), name
    assert all(dag.params[name] == value for name, value in DAG_DEFAULTS.items())


def _callable(dag, task_id):
    task = dag.get_task(task_id)
    return getattr(task, "python_callable", None) or task.partial_kwargs["python_callable"]


def test_only_the_plan_task_reads_the_conf(dagbag):
    """Each DAG plans its run once: no task after `plan` takes the run's params."""
    import inspect

    for dag_id in ("bert_demo", "bert_finetune", "bert_pretraining"):
        dag = dagbag.dags[dag_id]
        for task in dag.tasks:
            reads_conf = "params" in inspect.signature(_callable(dag, task.task_id)).parameters
            assert reads_conf == (task.task_id == "plan"), f"{dag_id}.{task.task_id}"


def test_later_tasks_run_the_plan_they_are_given(dagbag, tmp_path, monkeypatch):
    """A plan edited between the plan task and the next is what the next runs (nothing is planned twice)."""
    from operators import tasks as ops

    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unused")  # no lookup of an Airflow connection for S3
    calls: dict[str, list] = {}

    def record(name, result):
        return lambda *args, **kwargs: calls.setdefault(name, []).append((args, kwargs)) or result(args)

    monkeypatch.setattr(ops, "make_shards", record("make_shards", lambda a: a[1]))
    monkeypatch.setattr(ops, "pretrain", record("pretrain", lambda a: {"output": a[1], "metrics": {},
                                                                       "mlflow_run_id": None}))
    monkeypatch.setattr(ops, "finetune", record("finetune", lambda a: {}))

    def planned(dag_id, **conf):
        dag = dagbag.dags[dag_id]
        params = {name: dag.params[name] for name in dag.params}
        return dag, _callable(dag, "plan")(params={**params, "work_dir": str(tmp_path / dag_id), **conf},
                                           run_id="r1")

    dag, plan = planned("bert_pretraining", phases=[{"num_steps": 5}, {"num_steps": 3}])
    plan["vocab"] = "/edited/vocab.txt"
    plan["phases"][0]["shards"]["dupe_factor"] = 9
    plan["phases"][1]["pretrain"]["num_steps"] = 7
    _callable(dag, "make_shards")(segmented_file="/s/part-a.txt", phase=plan["phases"][0], plan=plan)
    (args, kwargs), = calls["make_shards"]
    assert args[1:3] == (f"{tmp_path}/bert_pretraining/shards/phase1/part-a", "/edited/vocab.txt")
    assert args[3]["dupe_factor"] == 9
    _callable(dag, "pretrain")(validated=[], heldout=[], segmented_files=["/s/part-a.txt"], plan=plan)
    first, second = calls["pretrain"]
    assert (first[0][2]["num_steps"], second[0][2]["num_steps"]) == (5, 7)
    assert second[0][2]["pretrained"] == first[0][1] and second[1]["vocab"] == "/edited/vocab.txt"

    dag, specs = planned("bert_finetune")
    specs[0]["settings"]["lr"] = 0.5
    _callable(dag, "finetune")(spec=specs[0])
    assert calls["finetune"][-1][0][4]["lr"] == 0.5

    dag, plan = planned("bert_demo")
    plan["finetune"]["squad"]["settings"]["epochs"] = 7
    plan["pretrain"]["num_steps"] = 11
    _callable(dag, "finetune_squad")("squad", plan)
    assert calls["finetune"][-1][0][4]["epochs"] == 7
    _callable(dag, "pretrain")({"shards_dir": "/s"}, {"shards_dir": "/h"}, plan)
    assert calls["pretrain"][-1][0][2]["num_steps"] == 11 and calls["pretrain"][-1][1]["data_eval"] == "/h"


def test_nightly_dag_is_scheduled_daily_and_maps_over_models(dagbag):
    dag = dagbag.dags["bert_nightly_regression"]
    assert dag.schedule == "@daily" and dag.timetable.expression == "0 0 * * *" and not dag.catchup
    assert _edges(dag) == {("work_dir", "evaluate"), ("plan", "evaluate"), ("work_dir", "throughput"),
                           ("work_dir", "compare_and_report"), ("evaluate", "compare_and_report"),
                           ("throughput", "compare_and_report"), ("work_dir", "pretrain_speed"),
                           ("pretrain_speed", "compare_and_report")}
    assert {t.task_id for t in dag.tasks if t.is_mapped} == {"evaluate"}
    assert dag.get_task("compare_and_report").trigger_rule == "none_failed"
    # The defaults are evaluation.settings.NIGHTLY's (the one copy; operators.nightly uses it too).
    from evaluation.settings import NIGHTLY

    assert (dag.params["quality_tolerance"], dag.params["throughput_tolerance"]) == (
        NIGHTLY.tolerances.quality, NIGHTLY.tolerances.throughput) == (0.01, 0.2)
    assert (dag.params["throughput_configs"], dag.params["throughput_steps"], dag.params["throughput_batch_size"],
            dag.params["throughput_max_seq_length"]) == (list(NIGHTLY.throughput.configs), NIGHTLY.throughput.steps,
                                                         NIGHTLY.throughput.batch_size,
                                                         NIGHTLY.throughput.max_seq_length)
    assert dag.params["time_to_accuracy_tolerance"] == NIGHTLY.tolerances.time_to_accuracy
    assert dag.params["speed_reference_nights"] == NIGHTLY.speed_reference_nights == 5
    assert (dag.params["pretrain_step_configs"], dag.params["pretrain_step_max_predictions"]) == (
        list(NIGHTLY.pretrain_throughput.configs), NIGHTLY.pretrain_throughput.max_predictions) == (
        ["bert_12_768_12"], 20)
    assert (dag.params["convergence_config"], dag.params["convergence_steps"], dag.params["convergence_peer_lrs"]) == (
        NIGHTLY.convergence.config, NIGHTLY.convergence.steps, list(NIGHTLY.convergence.peer_lrs))


def test_nightly_fails_a_misspelt_param_at_its_first_task(dagbag, tmp_path):
    """A night run with `quality_tolerence` ran on the default tolerance without a word: its first task names it."""
    from airflow.sdk.exceptions import AirflowFailException

    dag = dagbag.dags["bert_nightly_regression"]
    params = {name: dag.params[name] for name in dag.params}
    work_dir = dag.get_task("work_dir").python_callable
    misspelt = (r"bert_nightly_regression conf: unknown param\(s\) quality_tolerence "
                r"\(did you mean quality_tolerance\?\); the DAG's params are ")
    with pytest.raises(AirflowFailException, match=misspelt):
        work_dir(params={**params, "quality_tolerence": 0.1}, run_id="manual__1")
    # The deprecated name is still a known key (the throughput task moves it to its current name).
    assert work_dir(params={**params, "throughput_seq_len": 16, "work_dir": str(tmp_path / "night")},
                    run_id="manual__1") == str(tmp_path / "night")
    # A misspelt architecture too: the speed tasks refused it only after minutes of benchmarks.
    with pytest.raises(AirflowFailException, match=r"throughput_configs\[0\]: unknown model 'bert_base'"):
        work_dir(params={**params, "throughput_configs": ["bert_base"]}, run_id="manual__1")


def test_nightly_throughput_reads_the_former_name_of_its_length(dagbag, caplog, monkeypatch):
    """`throughput_seq_len` shipped in the nightly's form: a conf naming it still sets the benchmark's length."""
    from airflow.sdk.exceptions import AirflowFailException

    from operators import nightly

    dag = dagbag.dags["bert_nightly_regression"]
    params = {name: dag.params[name] for name in dag.params}
    seen = {}
    monkeypatch.setattr(nightly, "throughput", lambda work, configs, steps, batch, length: seen.update(length=length))
    throughput = dag.get_task("throughput").python_callable
    with caplog.at_level("WARNING"):
        throughput("work", params={**params, "throughput_seq_len": 16})
    assert seen == {"length": 16}
    assert "'throughput_seq_len' is deprecated; write 'throughput_max_seq_length'" in caplog.text
    with pytest.raises(AirflowFailException, match="give throughput_max_seq_length only"):  # @bert_task's verdict
        throughput("work", params={**params, "throughput_seq_len": 16, "throughput_max_seq_length": 32})
