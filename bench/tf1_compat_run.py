"""Run a TensorFlow 1.x script (e.g. Google BERT's create_pretraining_data.py) under TensorFlow 2.

    python bench/tf1_compat_run.py path/to/create_pretraining_data.py --input_file=... [flags]

`import tensorflow as tf` in the script (and in its `tokenization` module) gets
`tensorflow.compat.v1`, which still has tf.flags, tf.gfile, tf.python_io, tf.logging and tf.app.
The script's directory goes first on sys.path so `import tokenization` finds its neighbour, and
its parent too, for the packaged layout (`from bert import tokenization`).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    script = Path(sys.argv[1]).resolve()
    import tensorflow.compat.v1 as tf1

    # Submodules already imported (tensorflow.compat, ...) stay reachable through sys.modules.
    sys.modules["tensorflow"] = tf1
    sys.path[:0] = [str(script.parent), str(script.parent.parent)]
    sys.argv = [str(script), *sys.argv[2:]]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
