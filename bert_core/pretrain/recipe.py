"""The pretraining recipe a run gets when it names no optimizer, learning rate or warmup.

The rule (measured by `python -m evaluation.pretrain_convergence`; figures in docs/benchmarks-pretrain.md):

- optimizer: `adamw` (bias-corrected Adam, decoupled weight decay). BERT's own uncorrected Adam
  (`bertadam`) takes early steps about 3x larger than Adam's at the same lr (its second moment starts
  near zero); with Google's 10,000 warmup steps that is harmless, in a short run at a small-model lr it
  stalls the model at chance level.
- learning rate: `BASE_LR * (BASE_HIDDEN / hidden_size) * sqrt(global_batch / BASE_BATCH)`, clamped
  to [MIN_LR, MAX_LR]. Adam's stable step size shrinks with the width of the matrices it updates
  (~1 / hidden), and grows about as the square root of the batch. Measured at H128 and H256 (the rule's
  lr was the best of 0.5x / 1x / 2x at both). At BERT-base width and batch 256 it gives 6.7e-4: above
  Google's 1e-4 (uncorrected Adam, 10,000 warmup steps), close to RoBERTa-base's 6e-4 (at batch 8k);
  unmeasured there, so a starting point that the learning watch checks, not a tuned value.
- warmup: 10% of the steps, at most 10,000 steps (Google's BERT: 10,000 of 1M steps; short runs
  need the larger fraction).

A value the user gives always wins; what was chosen, and why, is logged and recorded in the manifest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_OPTIMIZER = "adamw"
BASE_LR = 2e-3
BASE_HIDDEN = 128
BASE_BATCH = 64
MIN_LR = 2e-5
MAX_LR = 3e-3
WARMUP_FRACTION = 0.1
MAX_WARMUP_STEPS = 10_000
# bertadam's first steps are several times Adam's (its second moment starts near zero): above this lr it
# needs about this many warmup steps, as Google's 10,000 at 1e-4 give it.
BERTADAM_SAFE_LR = 1e-4
BERTADAM_MIN_WARMUP = 1_000


# The lr rule in words, for help texts; lr_arithmetic() gives it with a run's numbers.
LR_RULE = (f"{BASE_LR:g} x ({BASE_HIDDEN} / hidden) x sqrt(global batch / {BASE_BATCH}), "
           f"within [{MIN_LR:g}, {MAX_LR:g}]")


@dataclass(frozen=True)
class Recipe:
    optimizer: str
    lr: float
    warmup_ratio: float
    chosen: tuple[str, ...]  # the settings the rule chose (the user gave the others)
    lr_rule: str | None = None  # how the rule computed lr, when it did

    def describe(self) -> str:
        lr = f"lr {self.lr:.2e}" + (f" (rule: {self.lr_rule})" if self.lr_rule else "")
        text = f"optimizer {self.optimizer}, {lr}, warmup {self.warmup_ratio:.3g} of the steps"
        return text + (f" (by the default rule: {', '.join(self.chosen)})" if self.chosen else "")

    def as_dict(self) -> dict:
        return {"optimizer": self.optimizer, "lr": self.lr, "warmup_ratio": self.warmup_ratio,
                "chosen_by_rule": list(self.chosen)}


def default_lr(hidden_size: int, global_batch: int) -> float:
    lr = BASE_LR * (BASE_HIDDEN / hidden_size) * math.sqrt(global_batch / BASE_BATCH)
    return float(min(MAX_LR, max(MIN_LR, lr)))


def lr_arithmetic(hidden_size: int, global_batch: int) -> str:
    """The rule with one run's numbers: what a log or a form shows next to the value it gives."""
    return (f"{BASE_LR:g} x ({BASE_HIDDEN} / {hidden_size}) x sqrt({global_batch} / {BASE_BATCH}), within "
            f"[{MIN_LR:g}, {MAX_LR:g}], for hidden {hidden_size}, global batch {global_batch}")


def lr_example(hidden_size: int, global_batch: int) -> str:
    """'lr 1.41e-03 for hidden 128, global batch 32': the rule's value for one model width and batch."""
    return f"lr {default_lr(hidden_size, global_batch):.2e} for hidden {hidden_size}, global batch {global_batch}"


def default_warmup_ratio(total_steps: int) -> float:
    return min(WARMUP_FRACTION, MAX_WARMUP_STEPS / max(1, total_steps))


def resolve(optimizer: str | None, lr: float | None, warmup_ratio: float | None, hidden_size: int,
            global_batch: int, total_steps: int) -> Recipe:
    """The recipe of a run: the given settings, the rule's for those left as None."""
    chosen = tuple(name for name, value in (("optimizer", optimizer), ("lr", lr), ("warmup", warmup_ratio))
                   if value is None)
    return Recipe(
        optimizer=optimizer or DEFAULT_OPTIMIZER,
        lr=float(lr) if lr is not None else default_lr(hidden_size, global_batch),
        warmup_ratio=float(warmup_ratio) if warmup_ratio is not None else default_warmup_ratio(total_steps),
        chosen=chosen,
        lr_rule=lr_arithmetic(hidden_size, global_batch) if lr is None else None,
    )


def cautions(recipe: Recipe, total_steps: int) -> list[str]:
    """Settings known to stall a run, said before it starts (the learning watch checks the run itself)."""
    warmup_steps = math.floor(total_steps * recipe.warmup_ratio)
    if recipe.optimizer == "bertadam" and recipe.lr > BERTADAM_SAFE_LR and warmup_steps < BERTADAM_MIN_WARMUP:
        return [f"bertadam (Adam without bias correction) at lr {recipe.lr:.3g} with {warmup_steps} warmup steps: its "
                f"early steps are several times Adam's, and a small BERT trained like this stayed at chance "
                f"(lr 1e-3, 20 warmup steps: masked-LM accuracy 0.08); use --optimizer adamw, or at least "
                f"{BERTADAM_MIN_WARMUP} warmup steps"]
    return []
