"""The benchmarks' --help shows a default where it tells the reader something."""

from __future__ import annotations

import argparse

from evaluation.cli_help import DefaultsHelpFormatter


def test_defaults_shown_only_where_they_say_something():
    parser = argparse.ArgumentParser(prog="bench", formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=800, help="optimizer steps")
    parser.add_argument("--no-ours", dest="ours", action="store_false", help="train only the peer")
    parser.add_argument("--peer-configs", nargs="*", default=None, help="peer sizes (default: all of --configs)")
    parser.add_argument("--plot", default=None, help="PNG of the curves")
    text = " ".join(parser.format_help().split())
    assert "optimizer steps (default: 800)" in text
    assert "train only the peer --peer-configs" in text  # no "(default: True)" for a switch
    assert "(default: all of --configs) --plot" in text  # its own words, not "(default: None)" after them
    assert "PNG of the curves" in text and "None" not in text
