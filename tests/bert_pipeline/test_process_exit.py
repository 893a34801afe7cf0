"""The command's orderly exit: Python's shutdown work runs (threading's exit hooks, threads joined, atexit
handlers, streams flushed), the status is the command's, and the interpreter's teardown is skipped."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys, threading, time
from pathlib import Path
from bert_pipeline.process_exit import run_and_exit

marks = Path(sys.argv[1])
atexit.register(lambda: marks.write_text(marks.read_text() + "atexit\\n"))

def exiting() -> bool:
    # Whether the main thread has left main() and is in exit_process (joining this thread).
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_code.co_name == "exit_process":
            return True
        frame = frame.f_back
    return False

def late():
    # Still running when main() has returned: the mark is written only once the exit is under way.
    deadline = time.monotonic() + 30
    while not exiting():
        if time.monotonic() > deadline:
            raise SystemExit("main() never reached exit_process")
        time.sleep(0.01)
    marks.write_text(marks.read_text() + "thread\\n")

def main():
    marks.write_text("")
    threading.Thread(target=late).start()
    # A thread pool kept alive, as MLflow keeps its artifact transfers' pool: its idle workers end at exit.
    global POOL
    from concurrent.futures import ThreadPoolExecutor
    POOL = ThreadPoolExecutor(2)
    POOL.submit(time.sleep, 0).result()
    sys.stdout.write("unflushed output")  # no newline: still in the buffer at exit
    {body}

run_and_exit(main)
"""


@pytest.mark.parametrize("body, status, stderr", [
    ("return 0", 0, ""),
    ("return 3", 3, ""),
    ("return None", 0, ""),
    ("raise SystemExit(4)", 4, ""),
    ("sys.exit('bad flag')", 1, "bad flag"),
    ("raise ValueError('boom')", 1, "ValueError: boom"),
])
def test_status_output_threads_and_atexit(tmp_path, body, status, stderr):
    marks = tmp_path / "marks"
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM.replace("{body}", body))
    done = subprocess.run([sys.executable, str(script), str(marks)], capture_output=True, text=True, timeout=60)
    assert done.returncode == status, done.stderr
    assert done.stdout == "unflushed output"
    assert stderr in done.stderr
    # The non-daemon thread finished before the atexit handlers ran, as in a normal interpreter exit.
    assert marks.read_text() == "thread\natexit\n"


def test_an_idle_thread_pool_does_not_hold_the_exit(tmp_path):
    # A pool kept alive to the end (as MLflow keeps its artifact repositories' pools): its idle workers are
    # non-daemon threads that stop only when the threading module's exit hooks tell them to.
    script = tmp_path / "pool.py"
    script.write_text("import concurrent.futures\n"
                      "from bert_pipeline.process_exit import run_and_exit\n"
                      "pool = concurrent.futures.ThreadPoolExecutor(2)\n"
                      "run_and_exit(lambda: pool.submit(print, 'done').result())\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    # `bert-pipeline zoo | head -3`: stdout's reader closes the pipe while the command still writes.
    script = tmp_path / "many_lines.py"
    script.write_text("import sys\n"
                      "from bert_pipeline.process_exit import run_and_exit\n"
                      "def main():\n"
                      "    for i in range(100000):\n"
                      "        print(f'line {i}')\n"
                      "run_and_exit(main)\n")
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout.readline() == b"line 0\n"
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        status = proc.wait(timeout=60)
    assert status == 1 and stderr == "", stderr
