"""evaluation.machine: the CPU a benchmark ran on, named so that figures from different machines are told apart."""

from __future__ import annotations

from evaluation.machine import CPUINFO, cpu_name

ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu avx512_bf16

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC (a second core that would say otherwise is not read)
"""


def test_cpu_name_gives_the_family_model_and_bfloat16_instructions():
    assert cpu_name(ZEN5, {"avx512_bf16": True, "amx_bf16": False}) == "AMD EPYC (family 26, model 2; avx512_bf16)"
    xeon = "cpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    assert cpu_name(xeon, {"avx512_bf16": True, "amx_bf16": True}) == (
        "Intel(R) Xeon(R) Platinum 8480+ (family 6, model 143; avx512_bf16, amx_bf16)")
    assert cpu_name(xeon, {}).endswith("(family 6, model 143; no bfloat16 instructions)")


def test_cpu_name_without_proc_cpuinfo_falls_back_to_platform():
    name = cpu_name("", {})
    assert name.endswith("(no bfloat16 instructions)") and not name.startswith(" (")


def test_cpu_name_of_this_machine_reads_its_cpuinfo():
    text = CPUINFO.read_text() if CPUINFO.exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), None)
    name = cpu_name()
    assert name.endswith(")") and (model is None or name.startswith(f"{model} ("))
