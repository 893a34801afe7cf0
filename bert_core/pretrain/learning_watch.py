"""Watch a pretraining run for the two signs that it is not learning, early enough to matter.

A run that "finishes green" with a model at chance level wastes the whole budget and, worse, gets
registered. Two signs, checked once `CHECK_FRACTION` of the steps are done (and again at twice that,
and at the end):

- the training loss has stopped improving: its mean over the latest window is less than
  `MIN_IMPROVEMENT` (relative) below its mean over the window ending at half the steps done so far;
- masked-LM accuracy is at chance: no more than `CHANCE_MARGIN` above the majority baseline (always
  predicting the most frequent masked token of the evaluation data), measured on held-out data when
  the run has it, else on the latest training window. NSP is checked against its majority label at
  the end only (it learns later than masked-LM on small models).

The verdict is plain data (`Verdict`); the training loop logs the warnings, tags the MLflow run and
writes the verdict into the manifest. Its `summary` states the final figures against chance and, separately,
what the check points saw earlier (a run can be at chance at step 75 and well above it at the end: both true,
neither contradicting the other). Nothing here knows about MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CHECK_FRACTION = 0.25
MIN_IMPROVEMENT = 0.01
CHANCE_MARGIN = 0.02
# Each pretraining accuracy: what the skill is called, and what scores chance on the same evaluation data.
CHANCE = {"mlm_accuracy": ("masked-LM prediction", "always the most frequent masked token"),
          "nsp_accuracy": ("next-sentence prediction", "always the majority label")}


def at_chance(value: float, chance: float) -> bool:
    return value <= chance + CHANCE_MARGIN


def chance_findings(metrics: dict[str, float]) -> list[tuple[str, float, float, str]]:
    """(skill, value, chance, what scores chance) for each accuracy of CHANCE in `metrics` that is at chance
    (its `<name>_chance` beside it, as a pretraining run's final metrics have)."""
    found = []
    for name, (skill, baseline) in CHANCE.items():
        if name in metrics and f"{name}_chance" in metrics and at_chance(metrics[name], metrics[f"{name}_chance"]):
            found.append((skill, float(metrics[name]), float(metrics[f"{name}_chance"]), baseline))
    return found


@dataclass(frozen=True)
class Baseline:
    """Accuracy of always answering the majority class on the evaluation data."""

    mlm: float
    nsp: float


@dataclass
class Verdict:
    # "learning"; "warned" (a check point found a problem the end no longer shows, or NSP alone is at chance);
    # "not_learning" (masked-LM accuracy at chance at the end); "too_short" (ended before the first check point)
    status: str = "learning"
    problems: list[str] = field(default_factory=list)  # every problem found, as reported when found
    checked_at: list[int] = field(default_factory=list)
    earlier: list[str] = field(default_factory=list)  # the check points' problems, told in the past tense
    summary: str = ""  # set by finish(): the final figures against chance, then what was seen earlier

    def as_dict(self) -> dict:
        return {"status": self.status, "problems": list(self.problems), "checked_at": list(self.checked_at),
                "summary": self.summary}


class LearningWatch:
    """Feed it each logged training window and each held-out evaluation; ask `due(step)` / `check(step)`."""

    def __init__(self, total_steps: int, baseline: Baseline, fraction: float = CHECK_FRACTION):
        self.total_steps = total_steps
        self.baseline = baseline
        self.fraction = fraction
        self.points = sorted({max(1, math.ceil(total_steps * f)) for f in (fraction, 2 * fraction)})
        self._losses: list[tuple[int, float]] = []  # (step, mean training loss of the window ending there)
        self._train_mlm: float | None = None
        self._eval: tuple[int, dict[str, float]] | None = None
        self._done: set[int] = set()
        self._final_on = "held-out"  # what the evaluations fed to observe_eval were computed on
        self.verdict = Verdict()
        self._kinds: set[str] = set()

    def skip_until(self, step: int) -> None:
        """A resumed run: the check points it already passed were checked (or not) by the first attempt."""
        self._done.update(p for p in self.points if p <= step)

    def observe_train(self, step: int, metrics: dict[str, float]) -> None:
        self._losses.append((step, float(metrics["loss"])))
        self._train_mlm = float(metrics["mlm_accuracy"])

    def observe_eval(self, step: int, metrics: dict[str, float]) -> None:
        self._eval = (step, dict(metrics))

    def due(self, step: int) -> bool:
        """True when a check point has been reached and not yet checked (the caller may evaluate first)."""
        return any(p <= step and p not in self._done for p in self.points)

    def check(self, step: int) -> list[str]:
        """Run the checks that are due at `step`; returns the new problems (each kind reported once)."""
        for p in self.points:
            if p <= step:
                self._done.add(p)
        self.verdict.checked_at.append(step)
        found = {"loss_plateau": self._plateau(step), "mlm_at_chance": self._mlm_at_chance(step)}
        new = self._add({kind: f[0] if f else None for kind, f in found.items()})
        self.verdict.earlier += [f[1] for f in found.values() if f and f[0] in new]
        return new

    def finish(self, step: int, final: dict[str, float], heldout: bool = True) -> Verdict:
        """The end-of-run checks on the final evaluation (on held-out data, or on training data when the run
        has none); returns the verdict."""
        too_short = not self.verdict.checked_at and step < min(self.points)
        self.observe_eval(step, final)
        self._final_on = "held-out" if heldout else "training"
        self.verdict.checked_at.append(step)
        nsp = final.get("nsp_accuracy")
        nsp_problem = None
        if nsp is not None and at_chance(nsp, self.baseline.nsp):
            nsp_problem = f"next-sentence accuracy {nsp:.3f} is at chance (majority label {self.baseline.nsp:.3f})"
        mlm_found = self._mlm_at_chance(step)
        mlm_problem = mlm_found[0] if mlm_found else None
        self._add({"final_mlm_at_chance": mlm_problem, "nsp_at_chance": nsp_problem})
        # The verdict is the state at the end: masked-LM at chance there is a run that did not learn; a
        # warning at a check point that the run has since outgrown (or NSP alone at chance) is "warned".
        if mlm_problem:
            self.verdict.status = "not_learning"
        elif self.verdict.problems:
            self.verdict.status = "warned"
        elif too_short:
            self.verdict.status = "too_short"
        self.verdict.summary = self._summary(step, final)
        return self.verdict

    def _summary(self, step: int, final: dict[str, float]) -> str:
        figures = [self._against_chance("masked-LM accuracy", final["mlm_accuracy"], self.baseline.mlm,
                                        CHANCE["mlm_accuracy"][1])]
        if final.get("nsp_accuracy") is not None:
            figures.append(self._against_chance("next-sentence accuracy", final["nsp_accuracy"], self.baseline.nsp,
                                                CHANCE["nsp_accuracy"][1]))
        head = "this run did not learn" if self.verdict.status == "not_learning" else "learning check"
        text = f"{head}: at the end ({self._final_on}, step {step}), {'; '.join(figures)}."
        if self.verdict.status == "too_short":
            text += f" The run ended before the first check point (step {min(self.points)})."
        if self.verdict.earlier:
            text += " Seen earlier: " + "; ".join(self.verdict.earlier) + "."
        return text

    @staticmethod
    def _against_chance(label: str, value: float, chance: float, meaning: str) -> str:
        if at_chance(value, chance):
            return f"{label} {value:.3f} is at chance ({meaning} scores {chance:.3f})"
        return f"{label} {value:.3f}, {value - chance:.3f} above chance ({meaning} scores {chance:.3f})"

    # ------------------------------------------------------------------ the checks

    def _add(self, found: dict[str, str | None]) -> list[str]:
        new = []
        for kind, problem in found.items():
            if problem and kind not in self._kinds:
                self._kinds.add(kind)
                new.append(problem)
        if new:
            self.verdict.status = "warned"
            self.verdict.problems.extend(new)
        return new

    def _window_mean(self, end: int, width: int) -> float | None:
        values = [loss for s, loss in self._losses if end - width < s <= end]
        return sum(values) / len(values) if values else None

    def _plateau(self, step: int) -> tuple[str, str] | None:
        """(the problem as reported now, the same told in the past tense), or None."""
        if len(self._losses) < 2:
            return None
        width = max(1, step // 8, self._losses[0][0])
        half = step // 2
        now, before = self._window_mean(step, width), self._window_mean(half, width)
        if now is None or before is None or half <= self._losses[0][0]:
            return None
        if now > before * (1.0 - MIN_IMPROVEMENT):
            figures = (f"{before:.4f} around step {half}, {now:.4f} around step {step} "
                       f"(less than {MIN_IMPROVEMENT:.0%} lower)")
            return f"training loss stopped improving: {figures}", f"the training loss had stalled: {figures}"
        return None

    def _mlm_at_chance(self, step: int) -> tuple[str, str] | None:
        """(the problem as reported now, the same told in the past tense), or None."""
        if self._eval is not None and self._eval[0] == step:
            accuracy, where = self._eval[1]["mlm_accuracy"], self._final_on
        elif self._train_mlm is not None:
            accuracy, where = self._train_mlm, "training"
        else:
            return None
        if at_chance(accuracy, self.baseline.mlm):
            what = f"masked-LM accuracy {accuracy:.3f} ({where}, step {step})"
            chance = f"{CHANCE['mlm_accuracy'][1]} scores {self.baseline.mlm:.3f}"
            return f"{what} is at chance: {chance}", f"{what} was at chance ({chance})"
        return None
