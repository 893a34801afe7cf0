"""Training building blocks: optimizers and schedule, mixed precision, the optimizer step, checkpoint
state, distributed helpers, the pretraining data stream and the pretraining loop.

None of these modules imports Ray or MLflow: the Ray Train launcher (`ray_launcher`) and the tracker
(`bert_core.tracking`) are plugged in from outside, so fine-tuning reuses the same pieces.
"""
