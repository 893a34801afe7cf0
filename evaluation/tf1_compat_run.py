"""Run a TensorFlow 1.x script (e.g. Google BERT's create_pretraining_data.py) under TensorFlow 2.

    python -m evaluation.tf1_compat_run path/to/create_pretraining_data.py --input_file=... [flags]

`import tensorflow as tf` in the script (and in its `tokenization` module) gets
`tensorflow.compat.v1`, which still has tf.flags, tf.gfile, tf.python_io, tf.logging and tf.app.
evaluation.make_shards runs the reference this way (`--reference-script`).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if len(sys.argv) >= 2 else 2)
    script = Path(sys.argv[1]).resolve()
    if not script.is_file():
        raise SystemExit(f"{script}: no such script (the first argument: the TF1 script to run)")
    try:
        import tensorflow.compat.v1 as tf1
    except ImportError:
        raise SystemExit("a TF1 script needs TensorFlow: install the `tf` extra (pip install 'bert-pipeline[tf]')") \
            from None

    # Submodules already imported (tensorflow.compat, ...) stay reachable through sys.modules.
    sys.modules["tensorflow"] = tf1
    # Google's script is not a package: it imports its neighbour as `import tokenization` (or, in the packaged
    # layout, `from bert import tokenization`), which only resolves with its own directory (and its parent) on
    # sys.path, as when it is run as `python create_pretraining_data.py`. This is the external script's
    # import path, never ours.
    sys.path[:0] = [str(script.parent), str(script.parent.parent)]
    sys.argv = [str(script), *sys.argv[2:]]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
