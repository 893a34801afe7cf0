"""What pretraining and fine-tuning share: optimizers and schedule, mixed precision, the optimizer step,
training-state checkpoints, distributed helpers, and the StepSpec a launcher runs a step by.

None of these modules imports Ray or MLflow: the launcher (bert_core.launch) and the tracker
(bert_core.io.tracking) are plugged in from outside.
"""
