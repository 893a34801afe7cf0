"""The elastic-recovery benchmark's own logic, on recorded timelines written here (the benchmark itself runs a
multi-node cluster for tens of minutes: `python -m evaluation.elastic_recovery`, docs/benchmarks-pretrain.md)."""

from __future__ import annotations

import json
import os

import pytest

from evaluation import elastic_recovery
from evaluation.elastic_recovery import recovery_figures, refigure, split_attempts, summary_lines


def _steps(attempt: str, world: int, steps: range, start: float, step_s: float) -> list[dict]:
    return [{"step": s, "world": world, "time": start + i * step_s, "attempt": attempt} for i, s in enumerate(steps)]


def killed_elastic_run() -> tuple[list[dict], dict[str, float]]:
    """Two workers at 1 s a step to step 30 (t = 29); the node lost at t = 29.5; one worker from the checkpoint of
    step 20 at 2 s a step, first step at t = 40; the node back at t = 60, a group of two from the checkpoint of
    step 30 (step 35 was the last on one worker), first step at t = 80, to step 50."""
    timeline = (_steps("a", 2, range(1, 31), 0.0, 1.0) + _steps("b", 1, range(21, 36), 40.0, 2.0)
                + _steps("c", 2, range(31, 51), 80.0, 1.0))
    return timeline, {"node_lost": 29.5, "node_back": 60.0}


def test_attempts_come_in_the_order_they_ran():
    timeline, _ = killed_elastic_run()
    attempts = split_attempts(timeline)
    assert [(a["attempt"], a["world"], a["first_step"], a["last_step"], a["records"]) for a in attempts] == [
        ("a", 2, 1, 30, 30), ("b", 1, 21, 35, 15), ("c", 2, 31, 50, 20)]
    assert (attempts[1]["start"], attempts[1]["end"]) == (40.0, 68.0)


def test_time_lost_and_steps_redone_of_a_shrink_and_a_grow():
    timeline, events = killed_elastic_run()
    figures = recovery_figures(timeline, events)
    assert figures["full_size_step_s"] == pytest.approx(1.0) and figures["span_s"] == pytest.approx(99.0)
    assert figures["steps"] == 50 and figures["step_executions"] == 65
    assert figures["steps_redone"] == 15  # 21-30 after the loss, 31-35 when the group grew
    assert figures["worlds"] == [2, 1, 2]
    shrink, grow = figures["restarts"]
    assert (shrink["resumed_from_step"], shrink["world"], shrink["steps_redone"]) == (20, 1, 10)
    assert (grow["resumed_from_step"], grow["world"], grow["steps_redone"]) == (30, 2, 5)
    assert shrink["seconds_without_steps"] == pytest.approx(11.0) and grow["seconds_without_steps"] == 12.0
    # From step 30 (t = 29) to step 31, the first beyond it (t = 60), less one 1 s step; from step 35 (t = 68) to
    # step 36 (t = 85), less one step.
    assert [(s["after_step"], s["restarts"], s["seconds"], s["seconds_lost"]) for s in figures["stalls"]] == [
        (30, 1, 31.0, 30.0), (35, 1, 17.0, 16.0)]
    # One worker took 8 s for steps 32-35, which two do in 4 s.
    assert figures["reduced_size"] == [{"world": 1, "steps": 4, "seconds": 8.0, "full_size_step_s": 1.0,
                                        "seconds_lost": 4.0}]
    assert figures["time_lost_s"] == pytest.approx(50.0)
    assert figures["first_step_after_loss_s"] == pytest.approx(10.5)  # the one-worker group's first step
    assert figures["back_where_it_was_s"] == pytest.approx(30.5)  # step 31, on one worker at t = 60
    assert "steps_during_notice" not in figures


def test_a_drain_that_trains_through_the_notice_redoes_nothing():
    # Notice at t = 10.5 after step 11; steps on to 20, a checkpoint there, the node gone at t = 25; the group of
    # one continues from step 20 at t = 35.
    timeline = _steps("a", 2, range(1, 21), 0.0, 1.0) + _steps("b", 1, range(21, 31), 35.0, 2.0)
    figures = recovery_figures(timeline, events={"notice": 10.5, "node_lost": 25.0})
    assert figures["steps_redone"] == 0 and figures["steps_during_notice"] == 9  # steps 12-20
    assert figures["restarts"] == [{"resumed_from_step": 20, "world": 1, "steps_redone": 0,
                                    "seconds_without_steps": 16.0, "at_s": 35.0}]
    assert [s["seconds_lost"] for s in figures["stalls"]] == [15.0]  # the hold and the restart
    assert figures["time_lost_s"] == pytest.approx(15.0 + 9.0)  # the restart, and steps 22-30 on one worker
    assert figures["first_step_after_loss_s"] == figures["back_where_it_was_s"] == pytest.approx(10.0)


def test_a_grow_that_throws_away_the_smaller_groups_steps_is_one_stall():
    # Lost at step 30 (t = 29.5); one worker from the checkpoint of step 20 gets to step 28 only; the node back,
    # two workers again from step 20 (no newer checkpoint), step 31 at t = 80.
    timeline = (_steps("a", 2, range(1, 31), 0.0, 1.0) + _steps("b", 1, range(21, 29), 40.0, 2.0)
                + _steps("c", 2, range(21, 41), 70.0, 1.0))
    figures = recovery_figures(timeline, {"node_lost": 29.5, "node_back": 50.0})
    assert [(s["after_step"], s["restarts"], s["seconds_lost"]) for s in figures["stalls"]] == [(30, 2, 50.0)]
    assert figures["reduced_size"] == [] and figures["time_lost_s"] == 50.0
    assert figures["steps_redone"] == 8 + 10  # 21-28 twice more than once, 21-30 once more: 18 executions
    assert figures["back_where_it_was_s"] == pytest.approx(80.0 - 29.5)


def test_load_drift_is_no_loss():
    # Steps slow down from 0.5 s to 1.5 s halfway through an undisturbed run: nothing was lost.
    timeline = _steps("a", 2, range(1, 21), 100.0, 0.5) + _steps("a", 2, range(21, 41), 111.0, 1.5)
    figures = recovery_figures(timeline)
    assert figures["time_lost_s"] == 0.0 and figures["steps_redone"] == 0
    assert figures["restarts"] == figures["stalls"] == figures["reduced_size"] == []
    assert "first_step_after_loss_s" not in figures


def test_no_records_is_a_clear_error():
    with pytest.raises(ValueError, match="no step records"):
        recovery_figures([])


def test_refigure_recomputes_from_the_saved_results_and_plots(tmp_path, capsys):
    timeline, events = killed_elastic_run()

    def saved(label: str, loss: str | None, records: list[dict], events: dict) -> dict:
        return {"case": {"key": label, "num_workers": "1:2", "loss": loss}, "label": label, "events_s": events,
                "figures": {"stale": True}, "timeline": [
                    [r["time"], r["step"], r["world"], "abc".index(r["attempt"])] for r in records]}

    results = {"settings": {}, "cases": {
        "elastic-kill": saved("elastic 1:2, killed", "kill", timeline, events),
        "undisturbed": saved("fixed 2, undisturbed", None, _steps("a", 2, range(1, 51), 0.0, 1.0), {})}}
    out = tmp_path / "er.json"
    out.write_text(json.dumps(results))
    again = elastic_recovery.main(["--refigure", "--out-json", str(out)])
    figures = again["cases"]["elastic-kill"]["figures"]
    assert figures["steps_redone"] == 15 and figures["time_lost_s"] == pytest.approx(50.0)
    assert figures["span_over_undisturbed_s"] == pytest.approx(99.0 - 49.0)
    assert json.loads(out.read_text())["cases"]["elastic-kill"]["figures"] == figures
    assert (tmp_path / "er.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    umask = os.umask(0)
    os.umask(umask)
    assert {(tmp_path / name).stat().st_mode & 0o777 for name in ("er.json", "er.png")} == {0o666 & ~umask}
    assert summary_lines(again)[0] == (
        "elastic 1:2, killed: 99 s for 50 steps, time lost 50 s (stalls 30 s + 16 s, smaller group 4 s), steps "
        "redone 15; restarts: 1 worker(s) from step 20 after 11 s without steps, 10 redone; 2 worker(s) from step "
        "30 after 12 s without steps, 5 redone")
    assert refigure(json.loads(out.read_text()))["cases"]["elastic-kill"]["figures"] == figures


def test_the_loss_must_come_before_the_end(capsys):
    with pytest.raises(SystemExit):
        elastic_recovery.parse_args(["--steps", "100", "--loss-step", "100"])
    assert "need 0 < --loss-step < --steps" in capsys.readouterr().err


def test_update_replaces_a_case_only_when_its_run_finishes(tmp_path, monkeypatch):
    """--update keeps the saved cases; a case run again replaces its entry once it finishes, and one that fails
    keeps the old entry (run_case stands in for the cluster runs; the S3 server is real)."""
    from evaluation import pretrain_convergence

    timeline, events = killed_elastic_run()
    old = {"case": {"key": "x", "num_workers": "2", "loss": "kill"}, "label": "old", "events_s": events,
           "figures": recovery_figures(timeline, events), "date": "then", "timeline": [[r["time"], r["step"], r["world"], "abc".index(r["attempt"])]
                                                       for r in timeline]}
    corpus, vocab, shards = tmp_path / "corpus.txt", tmp_path / "vocab.txt", tmp_path / "shards"
    for path in (corpus, vocab):
        path.write_text("text\n")
    shards.mkdir()
    (shards / "part-00000.npz").write_bytes(b"0")
    args = ["--corpus", str(corpus), "--vocab", str(vocab), "--work-dir", str(tmp_path / "work"),
            "--out-json", str(tmp_path / "er.json")]
    settings = {k: v for k, v in vars(elastic_recovery.parse_args(args)[1]).items()
                if k not in ("out_json", "plot", "ray_logs", "refigure", "update", "cases")}
    (tmp_path / "er.json").write_text(json.dumps({"settings": settings, "cases": {
        "fixed-kill": {**old, "label": "old fixed"}, "undisturbed": {**old, "label": "old undisturbed"}}}))
    monkeypatch.setattr(pretrain_convergence, "prepare_data", lambda *a: (str(shards), str(shards)))

    def run_case(case, args, data, data_eval):
        if case.key == "undisturbed":
            raise RuntimeError("the node's memory ran out")
        return {**old, "label": "new " + case.key, "date": "now"}

    monkeypatch.setattr(elastic_recovery, "run_case", run_case)
    with pytest.raises(RuntimeError, match="memory ran out"):
        elastic_recovery.main([*args, "--cases", "fixed-kill", "undisturbed", "--update"])
    saved = json.loads((tmp_path / "er.json").read_text())["cases"]
    assert {k: v["label"] for k, v in saved.items()} == {"fixed-kill": "new fixed-kill",
                                                         "undisturbed": "old undisturbed"}
