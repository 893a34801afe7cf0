"""The benchmarks' `--help`: every flag's default shown, except where it says nothing (a switch's True/False, a
None that the flag's own help explains) or the help already says it."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        if (action.default is None or isinstance(action.default, bool) or action.nargs == 0
                or "default:" in (action.help or "")):
            return action.help
        return super()._get_help_string(action)
