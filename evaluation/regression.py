"""The regression judgment of the nightly benchmark: tonight's numbers against a reference, within tolerances,
and the Markdown report with plots that the `bert_nightly_regression` DAG logs to MLflow.

Pure functions on plain dicts (no MLflow, no Airflow), so the rule itself is unit-tested.

Metric keys are `<model>/<metric>` for quality (e.g. `bert-sst-2/accuracy`) and `throughput/<config>/<mode>`
for speed, whose value is the ratio of our tokens/s to the transformers peer measured in the same run: the
ratio, not the absolute rate, is what stays comparable from one night (and machine load) to the next.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Lower is better for these metric names; every other metric is higher-is-better.
LOWER_IS_BETTER = frozenset({"loss", "mlm_loss", "nsp_loss", "eval_loss"})


@dataclass(frozen=True)
class Tolerances:
    """How far a metric may fall below its reference before it counts as a regression.

    quality: relative drop allowed for task metrics (0.01 = 1% of the reference value; scale-free, so it
    suits accuracy in [0, 1] and SQuAD F1 in [0, 100] alike). quality_abs: a floor on the allowed drop, so
    tiny references do not make noise a regression. throughput: relative drop allowed for speed ratios
    (`throughput/...`: fine-tuning and pretraining steps). time_to_accuracy: relative drop allowed for the
    time-to-accuracy ratio (`time_to_accuracy/...`), which also moves with where an evaluation point falls.
    The field defaults are the nightly's tolerances (evaluation.settings.NIGHTLY takes them from here).
    """

    quality: float = 0.01
    quality_abs: float = 1e-6
    throughput: float = 0.2
    time_to_accuracy: float = 0.3

    def allowed_drop(self, key: str, reference: float) -> float:
        if key.startswith("throughput/"):
            return self.throughput * abs(reference)
        if key.startswith("time_to_accuracy/"):
            return self.time_to_accuracy * abs(reference)
        return max(self.quality * abs(reference), self.quality_abs)


@dataclass(frozen=True)
class Finding:
    key: str
    current: float | None
    reference: float | None
    delta: float | None  # current - reference
    allowed_drop: float | None
    regressed: bool
    note: str = ""


def median_reference(nights: list[dict[str, float]], keys: Iterable[str]) -> dict[str, float]:
    """Per key, the median of its values over `nights` (a night without the key, or with NaN, does not count; a
    key no night has is left out). The reference of the speed ratios: one night's ratio moves with the machine's
    phase (the BERT-base pretraining step's went 1.73x-2.19x on one machine within an hour), so the last good
    night alone fails a slow night after a lucky one, and lets every lucky night raise the bar for the next."""
    reference = {}
    for key in keys:
        values = [n[key] for n in nights if key in n and not math.isnan(n[key])]
        if values:
            reference[key] = statistics.median(values)
    return reference


def metric_name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def compare(current: dict[str, float], reference: dict[str, float], tolerances: Tolerances,
            keys: list[str] | None = None) -> list[Finding]:
    """One finding per key of `reference` (or `keys`): regressed when the current value is worse than the
    reference by more than the allowed drop, or missing/NaN where the reference has a value."""
    findings = []
    for key in keys if keys is not None else sorted(reference):
        ref = reference.get(key)
        cur = current.get(key)
        if ref is None or (isinstance(ref, float) and math.isnan(ref)):
            findings.append(Finding(key, cur, None, None, None, False, "no reference value"))
            continue
        allowed = tolerances.allowed_drop(key, ref)
        if cur is None or math.isnan(cur):
            findings.append(Finding(key, cur, ref, None, allowed, True, "no value tonight"))
            continue
        delta = cur - ref
        worse_by = delta if metric_name(key) in LOWER_IS_BETTER else -delta
        findings.append(Finding(key, cur, ref, delta, allowed, worse_by > allowed))
    return findings


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def _table(findings: list[Finding]) -> list[str]:
    lines = ["| metric | tonight | reference | change | allowed drop | status |", "| --- | --- | --- | --- | --- | --- |"]
    for f in findings:
        change = "-" if f.delta is None else f"{f.delta:+.4g}"
        status = "REGRESSED" if f.regressed else ("ok" if not f.note else f.note)
        lines.append(f"| {f.key} | {_fmt(f.current)} | {_fmt(f.reference)} | {change} | {_fmt(f.allowed_drop)} "
                     f"| {status} |")
    return lines


def render_report(title: str, sections: list[tuple[str, str, list[Finding]]], notes: list[str],
                  plots: list[str], tonight: dict[str, float] | None = None) -> str:
    """Markdown: a verdict line, tonight's figures (`tonight`, when given: every value measured, compared or not),
    one table per comparison (heading, explanation, findings), notes, plots (paths relative to the report)."""
    regressions = [f for _, _, findings in sections for f in findings if f.regressed]
    if regressions:
        verdict = f"**FAILED: {len(regressions)} regression(s)**: " + ", ".join(sorted({f.key for f in regressions}))
    elif tonight is not None and not tonight:
        verdict = ("**PASSED, but nothing was measured**: no model was scored and no speed benchmark ran tonight "
                   "(see Notes)")
    else:
        verdict = "**PASSED**: no metric regressed beyond its tolerance"
    lines = [f"# {title}", "", verdict, ""]
    if tonight:
        lines += ["## Tonight's figures", "", "Every value measured tonight (a model's dev metric on the pinned data; "
                  "a speed figure as the ratio ours / transformers), whether or not it had a reference.", "",
                  "| metric | tonight |", "| --- | --- |"]
        lines += [f"| {key} | {_fmt(value)} |" for key, value in sorted(tonight.items())]
        lines.append("")
    for heading, explanation, findings in sections:
        lines += [f"## {heading}", "", explanation, ""]
        lines += _table(findings) if findings else ["(nothing to compare)"]
        lines.append("")
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    if plots:
        lines += ["## History", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(lines)


CANDIDATE = "candidate/"


def _group(key: str) -> str:
    """The plot a key is drawn in: its model's (a candidate's metric beside its champion's) or its speed group."""
    return key.removeprefix(CANDIDATE).rsplit("/", 1)[0]


def y_label(group: str) -> str:
    """What a history plot's values are, in words and units."""
    if group.startswith("throughput"):
        return "tokens/s, ours / transformers (x)"
    if group.startswith("time_to_accuracy"):
        return "peer's time / ours' to its accuracy (x)"
    return "dev metric on the pinned data"


def plot_history(history: list[dict[str, Any]], keys: list[str], out_dir: Path,
                 floors: dict[str, float] | None = None) -> list[Path]:
    """One PNG per metric group (model or throughput): each key's value over the nights in `history`
    (oldest first; items {"label": night label, "metrics": {key: value}, "status": "passed"/"failed" (optional)});
    a failed night's label is red. A `candidate/<model>/<metric>` key is drawn in its model's plot as a red square.
    `floors`: per key, the value tonight's would regress below (the reference less the allowed drop; above it for
    a lower-is-better metric), drawn as a dashed line. The speed plots have a line at parity with transformers.
    Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floors = floors or {}
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(_group(key), []).append(key)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    labels = [str(h["label"]) for h in history]
    for group, group_keys in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(7.5, 3.4), dpi=100)
        for key in group_keys:
            values = [h["metrics"].get(key, float("nan")) for h in history]
            if key.startswith(CANDIDATE):
                line = ax.plot(range(len(values)), values, marker="s", linestyle="none", color="#c0392b",
                               markersize=7, label=f"{metric_name(key)} (newest candidate)")
            else:
                line = ax.plot(range(len(values)), values, marker="o", label=metric_name(key))
            # A candidate's floor (its champion's figure less the drop) is the champion's own floor when the
            # champion held tonight: drawn once.
            champion_floor = floors.get(key.removeprefix(CANDIDATE)) if key.startswith(CANDIDATE) else None
            if key in floors and not (champion_floor is not None and math.isclose(champion_floor, floors[key])):
                worse = "above" if metric_name(key) in LOWER_IS_BETTER else "below"
                ax.axhline(floors[key], color=line[0].get_color(), linestyle="--", linewidth=1,
                           label=f"{metric_name(key)}: tonight regresses {worse}")
        if group.startswith(("throughput", "time_to_accuracy")):
            ax.axhline(1.0, color="#6b7785", linestyle=":", linewidth=1, label="parity with transformers")
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        for tick, night in zip(ax.get_xticklabels(), history):
            if night.get("status") == "failed":
                tick.set_color("#c0392b")
        ax.set_title(group + " (nights, UTC; red: a night that failed)", fontsize=10)
        ax.set_ylabel(y_label(group), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / (group.replace("/", "_") + ".png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def findings_json(findings: list[Finding]) -> list[dict[str, Any]]:
    return [asdict(f) for f in findings]
