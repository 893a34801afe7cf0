"""The report's figures, drawn with matplotlib (a Figure per plot, no pyplot state) and returned as PNG bytes."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

GOOD, BAD, NEUTRAL, CHANCE = "#2a7f3f", "#c0392b", "#2c5d8f", "#8a8a8a"
STATE_COLORS = {"success": GOOD, "failed": BAD, "killed": BAD}


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _figure(width: float, height: float, panels: int):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig, axes


def _xy(points: list[list[float]] | None) -> tuple[list[float], list[float]]:
    points = points or []
    return [p[0] for p in points], [p[1] for p in points]


def _chance_line(ax, value: float | None, label: str) -> None:
    if value is not None:
        ax.axhline(value, color=CHANCE, linestyle="--", linewidth=1.2, label=f"{label} ({value:.3f})")


def chance(phase: dict[str, Any], metric: str) -> float | None:
    """The chance level of `metric` (mlm_accuracy, nsp_accuracy) on the run's evaluation data: the final
    metrics' `<metric>_chance`, else the last logged `eval_<metric>_chance`."""
    value = (phase.get("metrics") or {}).get(f"{metric}_chance")
    if value is None and phase["history"].get(f"eval_{metric}_chance"):
        value = phase["history"][f"eval_{metric}_chance"][-1][1]
    return value


def pretraining(phase: dict[str, Any]) -> bytes:
    return _png(pretraining_figure(phase))


def pretraining_figure(phase: dict[str, Any]):
    """Loss, masked-LM accuracy and next-sentence accuracy against steps; held-out points as markers, the chance
    level of each accuracy as a dashed line."""
    history = phase["history"]
    on = "held-out" if phase.get("metrics_on") == "data_eval" else "evaluation"
    fig, (loss, mlm, nsp) = _figure(11, 3.2, 3)
    loss.plot(*_xy(history.get("loss")), color=NEUTRAL, label="training (window mean)")
    loss.plot(*_xy(history.get("eval_loss")), "o-", color=GOOD, label=on)
    loss.set_title("loss")
    mlm.plot(*_xy(history.get("mlm_accuracy")), color=NEUTRAL, alpha=0.6, label="training")
    mlm.plot(*_xy(history.get("eval_mlm_accuracy")), "o-", color=GOOD, label=on)
    _chance_line(mlm, chance(phase, "mlm_accuracy"), "chance: most frequent token")
    mlm.set_title("masked-LM accuracy")
    nsp.plot(*_xy(history.get("eval_nsp_accuracy")), "o-", color=GOOD, label=on)
    _chance_line(nsp, chance(phase, "nsp_accuracy"), "chance: majority label")
    nsp.set_title("next-sentence accuracy")
    for ax in (mlm, nsp):  # accuracies from 0, so a curve's distance from chance reads true
        ax.set_ylim(0, min(1.0, max([ax.get_ylim()[1], 0.05]) * 1.05))
    for ax in (loss, mlm, nsp):
        ax.set_xlabel("step")
        ax.legend(fontsize=7, loc="best")
    return fig


def finetuning(runs: list[dict[str, Any]]) -> bytes:
    return _png(finetuning_figure(runs))


def finetuning_figure(runs: list[dict[str, Any]]):
    """One task: its dev metrics and training loss per epoch (a search: every trial's main metric, the best
    trial's line bold), the best epoch starred."""
    from matplotlib.ticker import MaxNLocator

    fig, (dev, loss) = _figure(9, 3.0, 2)
    searched = len(runs) > 1
    for run in runs:
        epochs = [e["epoch"] for e in run["epochs"]]
        metrics = [run["main_metric"]] if searched else [k for k in run["epochs"][0] if k not in ("epoch", "train_loss")]
        for metric in metrics:
            label = f"{run['trial']}: {metric}" if searched else metric
            width = 2.4 if run["best"] else 1.0
            dev.plot(epochs, [e.get(metric) for e in run["epochs"]], "o-", linewidth=width, label=label)
        loss.plot(epochs, [e.get("train_loss") for e in run["epochs"]], "o-", linewidth=2.4 if run["best"] else 1.0,
                  label=run["trial"] or "train loss")
        best = next((e for e in run["epochs"] if e["epoch"] == run.get("best_epoch")), None)
        if run["best"] and best is not None and run["main_metric"] in best:
            dev.plot([best["epoch"]], [best[run["main_metric"]]], "*", markersize=16, color="#d4a017",
                     label=f"best epoch ({best['epoch']})", zorder=5)
    dev.set_title(f"{runs[0]['task']}: dev metrics")
    loss.set_title(f"{runs[0]['task']}: training loss")
    for ax in (dev, loss):
        ax.set_xlabel("epoch")
        # Whole epochs only, even where the axis holds a single one (the default asks for two integers in view).
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.legend(fontsize=7, loc="best")
    return fig


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def timeline(tasks: list[dict[str, Any]]) -> bytes:
    """The tasks as bars over the run's wall-clock time (seconds from the first task's start), one row per try,
    coloured by outcome."""
    start = min(_time(t["started_at"]) for t in tasks)
    fig, (ax,) = _figure(11, 0.9 + 0.32 * len(tasks), 1)
    labels = []
    for row, task in enumerate(tasks):
        begin = (_time(task["started_at"]) - start).total_seconds()
        width = max(task.get("duration_s") or 0.0, 0.05)
        ax.barh(row, width, left=begin, height=0.6, color=STATE_COLORS.get(task["state"], NEUTRAL))
        took = f" {width:.1f} s" if task.get("duration_s") is not None else f" {task['state']}, its end unknown"
        ax.text(begin + width, row, took, va="center", fontsize=7)
        labels.append(task_label(task))
    ax.set_yticks(range(len(tasks)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run's first task started")
    right = max((_time(t["started_at"]) - start).total_seconds() + (t.get("duration_s") or 0) for t in tasks)
    ax.set_xlim(0, right * 1.12 + 1)
    return _png(fig)


def task_label(task: dict[str, Any]) -> str:
    label = task["task_id"] + (f"[{task['map_index']}]" if task.get("map_index", -1) >= 0 else "")
    return label + (f" (try {task['try_number']})" if (task.get("try_number") or 1) > 1 else "")
