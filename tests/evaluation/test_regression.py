"""The nightly regression rule: tolerances, direction of each metric, missing values, and the report."""

from __future__ import annotations

import math

import pytest

from evaluation.regression import Tolerances, compare, median_reference, plot_history, render_report

TOL = Tolerances(quality=0.01, throughput=0.2)


def _by_key(findings):
    return {f.key: f for f in findings}


def test_drops_within_tolerance_pass_and_beyond_fail():
    reference = {"bert-sst-2/accuracy": 0.90, "bert-squad/f1": 80.0, "throughput/minilm/train": 1.40}
    current = {"bert-sst-2/accuracy": 0.8911,  # -0.0089 < 1% of 0.90 (0.009)
               "bert-squad/f1": 79.1,  # -0.9 > 1% of 80 (0.8)
               "throughput/minilm/train": 1.13}  # -0.27 < 20% of 1.40 (0.28)
    found = _by_key(compare(current, reference, TOL))
    assert not found["bert-sst-2/accuracy"].regressed
    assert found["bert-squad/f1"].regressed and math.isclose(found["bert-squad/f1"].allowed_drop, 0.8)
    assert not found["throughput/minilm/train"].regressed
    assert _by_key(compare({"throughput/minilm/train": 1.11}, reference, TOL, ["throughput/minilm/train"])) \
        ["throughput/minilm/train"].regressed


def test_time_to_accuracy_has_its_own_tolerance():
    reference = {"time_to_accuracy/bert_2_128_2": 3.0, "throughput/pretrain_step/bert_12_768_12": 1.5}
    tolerances = Tolerances(throughput=0.2, time_to_accuracy=0.3)
    found = _by_key(compare({"time_to_accuracy/bert_2_128_2": 2.2,  # -0.8 < 30% of 3.0 (0.9)
                             "throughput/pretrain_step/bert_12_768_12": 1.1}, reference, tolerances))  # -0.4 > 0.3
    assert not found["time_to_accuracy/bert_2_128_2"].regressed
    assert math.isclose(found["time_to_accuracy/bert_2_128_2"].allowed_drop, 0.9)
    assert found["throughput/pretrain_step/bert_12_768_12"].regressed
    # Ours never reaching the peer's accuracy is a ratio of 0: a regression against any night that got there.
    assert _by_key(compare({"time_to_accuracy/bert_2_128_2": 0.0}, reference, tolerances))[
        "time_to_accuracy/bert_2_128_2"].regressed


def test_speed_is_judged_against_the_median_of_recent_nights():
    key = "throughput/pretrain_step/bert_12_768_12"
    # The same code on one machine, one lucky night (2.19x) last: against it alone, a slow-phase 1.73x is a 21% drop.
    nights = [{key: 2.19}, {key: 1.96, "other": 1.0}, {key: float("nan")}, {}, {key: 1.92}, {key: 2.03}]
    reference = median_reference(nights, [key, "other", "never"])
    assert reference == {key: pytest.approx(1.995), "other": 1.0}  # NaN and absent nights do not count; a key no night has is absent
    assert not compare({key: 1.73}, reference, TOL, [key])[0].regressed  # -13% < 20%
    assert compare({key: 1.73}, {key: 2.19}, TOL, [key])[0].regressed
    assert compare({key: 1.55}, reference, TOL, [key])[0].regressed  # a real 22% drop still fails
    assert median_reference([], [key]) == {}


def test_improvements_never_regress_and_loss_is_lower_is_better():
    found = _by_key(compare({"m/accuracy": 0.99, "m/loss": 2.5}, {"m/accuracy": 0.5, "m/loss": 2.0}, TOL))
    assert not found["m/accuracy"].regressed
    assert found["m/loss"].regressed  # loss went up by 25%
    assert not _by_key(compare({"m/loss": 1.0}, {"m/loss": 2.0}, TOL))["m/loss"].regressed


def test_missing_or_nan_tonight_is_a_regression_and_no_reference_is_not():
    found = _by_key(compare({"a/f1": float("nan")}, {"a/f1": 50.0, "b/f1": 40.0, "c/f1": float("nan")}, TOL))
    assert found["a/f1"].regressed and found["a/f1"].note == "no value tonight"
    assert found["b/f1"].regressed
    assert not found["c/f1"].regressed and found["c/f1"].note == "no reference value"


def test_report_says_what_regressed_and_embeds_plots(tmp_path):
    findings = compare({"m/accuracy": 0.7}, {"m/accuracy": 0.8}, TOL)
    history = [{"label": "n1", "metrics": {"m/accuracy": 0.8}}, {"label": "tonight", "metrics": {"m/accuracy": 0.7}}]
    plots = plot_history(history, ["m/accuracy"], tmp_path)
    assert [p.name for p in plots] == ["m.png"] and plots[0].read_bytes()[:4] == b"\x89PNG"
    report = render_report("nightly", [("vs last", "why", findings)], ["a note"], ["plots/m.png"])
    assert "**FAILED: 1 regression(s)**: m/accuracy" in report
    assert "| m/accuracy | 0.7 | 0.8 | -0.1 | 0.008 | REGRESSED |" in report
    assert "![m](plots/m.png)" in report and "- a note" in report
    assert "**PASSED**" in render_report("nightly", [("vs last", "why", [])], [], [])


def test_report_lists_tonights_figures_and_says_when_nothing_was_measured():
    report = render_report("nightly", [("vs last", "why", [])], [], [], {"m/accuracy": 0.7, "throughput/x/infer": 1.5})
    assert "## Tonight's figures" in report and "| m/accuracy | 0.7 |" in report and "| throughput/x/infer | 1.5 |" in report
    assert "**PASSED**: no metric regressed" in report
    assert "**PASSED, but nothing was measured**" in render_report("nightly", [], [], [], {})


def test_history_plots_say_what_their_values_are_and_where_tonight_regresses(tmp_path, monkeypatch):
    """The plots had no y label, run-id prefixes for nights, no candidate and no tolerance: a candidate at 0.425
    against a champion at 0.925 drew as a flat, healthy line."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    from evaluation import regression

    drawn = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def keep(fig, path, *args, **kwargs):
        ax = fig.axes[0]
        drawn[Path(path).name] = {
            "ylabel": ax.get_ylabel(), "title": ax.get_title(),
            "xticks": [(t.get_text(), matplotlib.colors.to_hex(t.get_color())) for t in ax.get_xticklabels()],
            "legend": [t.get_text() for t in ax.get_legend().get_texts()],
            "hlines": sorted(round(line.get_ydata()[0], 4) for line in ax.get_lines() if line.get_linestyle() == "--")}
        return real_savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)  # the drawing as drawn, then the real PNG
    history = [{"label": "11-28 04:59", "metrics": {"m/accuracy": 0.9, "throughput/x/infer": 1.2},
                "status": "passed"},
               {"label": "11-29 04:59", "metrics": {"m/accuracy": 0.9}, "status": "failed"},
               {"label": "tonight", "metrics": {"m/accuracy": 0.9, "candidate/m/accuracy": 0.4,
                                                "throughput/x/infer": 1.1}, "status": "failed"}]
    keys = ["m/accuracy", "candidate/m/accuracy", "throughput/x/infer"]
    plots = regression.plot_history(history, keys, tmp_path, {"m/accuracy": 0.891, "candidate/m/accuracy": 0.891,
                                                             "throughput/x/infer": 0.96})
    assert [p.name for p in plots] == ["m.png", "throughput_x.png"]
    model, speed = drawn["m.png"], drawn["throughput_x.png"]
    assert model["ylabel"] == "dev metric on the pinned data"
    assert speed["ylabel"] == "tokens/s, ours / transformers (x)"
    assert model["legend"] == ["accuracy", "accuracy: tonight regresses below", "accuracy (newest candidate)"]
    assert model["hlines"] == [0.891]  # the candidate's floor is its champion's: drawn once
    assert model["xticks"] == [("11-28 04:59", "#000000"), ("11-29 04:59", "#c0392b"), ("tonight", "#c0392b")]
    assert "parity with transformers" in speed["legend"] and speed["hlines"] == [0.96]
