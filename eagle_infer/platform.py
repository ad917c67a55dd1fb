"""The machine the toolkit runs on: CPU model and flags, native dtype, device, free memory, cache root, the key
that makes timings comparable, the timing helper, and which operators read the device from the host. A leaf: it
imports nothing of the package but its error type.

`/proc/cpuinfo` is read here and nowhere else (the engine, the cost model and scripts/bench_engine.py ask `cpu()`).
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform as _platform
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import EagleError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class CpuInfo:
    """model: the CPU's model name; flags: its feature flags (empty where /proc/cpuinfo cannot be read)."""

    model: str
    flags: frozenset[str]

    @property
    def bf16_matmul(self) -> bool:
        """Whether this CPU multiplies bfloat16 matrices natively (AVX-512 BF16 or AMX). Without it, torch emulates
        bfloat16 matmuls of more than one row several times slower than float32 (scripts/bench_engine.py measures
        it), which is exactly the multi-token forward that tree verification does."""
        return "avx512_bf16" in self.flags or "amx_bf16" in self.flags

    @property
    def label(self) -> str:
        """The model and the widest matmul extension, which decides speed: e.g. 'AMD EPYC AVX-512-BF16'."""
        for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2")):
            if flag in self.flags:
                return f"{self.model} {name}"
        return self.model


@functools.lru_cache(maxsize=1)
def cpu() -> CpuInfo:
    """This machine's CPU, read once from /proc/cpuinfo (the first processor's model name and flags)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name") or _platform.processor() or _platform.machine()
    return CpuInfo(model, frozenset(fields.get("flags", "").split()))


def machine_label(device: torch.device) -> str:
    """The machine a run used, in words: the GPU's name, or the CPU's model with its widest matmul extension."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu().label


def machine_facts(target) -> dict:
    """{"machine": its label, "threads": torch's CPU threads, "dtype": the target's}: what a stage records beside its
    seconds (and beside what it generated: greedy answers differ between bfloat16 and float32)."""
    return {"machine": machine_label(target.device), "threads": torch.get_num_threads(),
            "dtype": str(target.dtype).removeprefix("torch.")}


def cpu_has_bf16_matmul() -> bool:
    return cpu().bf16_matmul


def resolve_dtype(name: str, device: torch.device | None = None) -> torch.dtype:
    """'auto': bfloat16 on CUDA and on CPUs with native bfloat16 matmuls, else float32."""
    if name == "auto":
        on_gpu = device is not None and device.type == "cuda"
        return torch.bfloat16 if on_gpu or cpu_has_bf16_matmul() else torch.float32
    if name not in DTYPES:
        raise EagleError(f"unknown dtype {name!r}: expected auto or one of {', '.join(DTYPES)}")
    return DTYPES[name]


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' picks cuda when present, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EagleError(f"device {name!r} requested but CUDA is not available here: use device=cpu or auto")
    return torch.device(name)


def available_memory(device: torch.device) -> int:
    """Bytes free for new tensors on `device`: CUDA's free memory, or the kernel's MemAvailable on a CPU."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: refuse nothing


def cache_root() -> Path:
    """Where what must outlive a checkout lives (converted models, features, cost models): $EAGLE_CACHE, else
    ~/.cache/eagle-toolkit."""
    return Path(os.environ.get("EAGLE_CACHE", Path.home() / ".cache" / "eagle-toolkit"))


def writable_cache(need_bytes: int, what: str) -> Path:
    """cache_root(), created if missing, once a file can be written there and `need_bytes` are free: checked before
    the work whose result goes there (`what`), with one line naming EAGLE_CACHE when either fails."""
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
        free = shutil.disk_usage(root).free
    except OSError as err:
        raise EagleError(f"the cache directory {str(root)!r} is not writable ({err.strerror or type(err).__name__}) and "
                         f"{what} is kept there: set EAGLE_CACHE to a writable directory") from None
    if free < need_bytes:
        raise EagleError(f"the cache directory {str(root)!r} has {free / 2**20:.0f} MiB free and {what} needs about "
                         f"{need_bytes / 2**20:.0f} MiB: free some space there or set EAGLE_CACHE to a directory with room")
    return root


def machine_key(device: torch.device) -> dict:
    """What makes timings comparable: the GPU's name, or the CPU's model, flags and thread count; torch version."""
    if device.type == "cuda":
        where = {"gpu": torch.cuda.get_device_name(device)}
    else:
        info = cpu()
        flags = " ".join(sorted(info.flags))
        where = {"cpu": info.model, "flags_sha1": hashlib.sha1(flags.encode()).hexdigest()[:12],
                 "threads": torch.get_num_threads()}
    return {**where, "torch": torch.__version__.split("+")[0]}


# Dispatched operators whose result the host reads, so a GPU would be waited for (besides Tensor.tolist, which
# dispatches nothing of its own): what scripts/profile_decode.py counts as host syncs and the tests forbid inside a
# cycle's device steps.
HOST_READ_OPS = ("aten.item.", "aten._local_scalar_dense.", "aten.is_nonzero.", "aten.equal.", "aten.nonzero.",
                 "aten.masked_select.", "aten.unique", "aten.allclose.")


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on a CPU), so a host clock reads what it ran."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, reps: int, device: torch.device) -> float:
    """Median ms of fn() over reps calls after one warm-up call (the device synchronised around each)."""
    times = []
    for i in range(reps + 1):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        if i:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)
