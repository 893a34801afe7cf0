"""Exceptions that mean "the input is wrong", as opposed to a bug.

The CLI prints these as one line (exit code 2); everything else keeps its traceback.
"""


class BertPipelineError(ValueError):
    """Bad input: a file, field or value that is not what a step expects. The message names it."""


class ModelNotFoundError(BertPipelineError, FileNotFoundError):
    """A model name or directory whose files are not where they are expected."""


class CheckpointMismatchError(BertPipelineError):
    """Weights that do not fit the architecture (missing, unexpected or mis-shaped parameters)."""
