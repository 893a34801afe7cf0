"""Entrypoint of a Ray job that runs one pipeline step: `python -m operators.step_runner STEP KWARGS_JSON`.

It calls the same task function (operators.tasks) that the in-process path calls and prints its JSON
result on one marked line, which operators.ray_jobs reads back from the job's log.
"""

from __future__ import annotations

import json
import logging
import sys

from operators.ray_jobs import IN_JOB_ENV, RESULT_MARKER

# The steps that may run as Ray jobs: the ones that use a cluster's compute.
STEPS = ("make_shards", "pretrain", "finetune")


def main(argv: list[str] | None = None) -> int:
    import os

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in STEPS:
        print(f"usage: python -m operators.step_runner {{{','.join(STEPS)}}} KWARGS_JSON", file=sys.stderr)
        return 2
    os.environ[IN_JOB_ENV] = "1"  # the step runs here; it must not submit itself again
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from operators import tasks

    result = getattr(tasks, args[0])(**json.loads(args[1]))
    sys.stdout.flush()
    print(RESULT_MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
