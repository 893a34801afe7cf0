"""The CPU a benchmark ran on, named so that its figures can be compared: the same command gives other ratios on
other CPUs (docs/benchmarks-pretrain.md: medians of runs 1.86x and 2.06x by median step at BERT-base on an Intel
Xeon with AMX and an AMD EPYC of family 26), and `platform.processor()` says only "x86_64" or nothing on Linux.
The model name alone does not tell generations apart either (both AMD machines of this project called themselves
"AMD EPYC"), so the family and model numbers come with it, and the bfloat16 instruction sets torch found."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")


def cpu_name(cpuinfo: str | None = None, capabilities: Mapping[str, Any] | None = None) -> str:
    """'AMD EPYC (family 26, model 2; avx512_bf16)'. From /proc/cpuinfo's first processor and
    torch.cpu.get_capabilities() unless given (as tests give them); platform's words where there is no
    /proc/cpuinfo (macOS, Windows)."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough: every core of a machine is alike here
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    numbers = [f"{label} {fields[key]}" for key, label in (("cpu family", "family"), ("model", "model"))
               if fields.get(key)]
    if capabilities is None:
        import torch

        capabilities = torch.cpu.get_capabilities()
    from bert_core.train.precision import CPU_BF16_FEATURES

    bf16 = [feature for feature in CPU_BF16_FEATURES if capabilities.get(feature)]
    details = ", ".join(numbers)
    details += ("; " if details else "") + (", ".join(bf16) if bf16 else "no bfloat16 instructions")
    return f"{name} ({details})"
