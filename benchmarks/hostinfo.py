"""The machine a benchmark ran on, for its report: ``lscpu``'s model name and the core count."""

from __future__ import annotations

import os
import platform
import subprocess


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model = platform.processor() or "unknown CPU"
    return f"{model} ({_flags()}), {os.cpu_count()} cores"


def _flags() -> str:
    """The vector extensions that decide the embedder's speed (AVX-512 VNNI / AMX on Intel,
    AVX2 only on some AMD machines of the same kind)."""
    try:
        have = set(open("/proc/cpuinfo").read().split("flags", 2)[1].split("\n", 1)[0].split())
    except (OSError, IndexError):
        return "flags unknown"
    shown = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8") if f in have]
    return " ".join(shown) or "no AVX2"
