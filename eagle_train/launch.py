"""What the DeepSpeed launcher needs around the toolkit's processes: the accelerator choice (DeepSpeed's CPU
accelerator where CUDA is absent), a free rendezvous port, and for the stages it launches on N ranks (featurize,
regenerate, train) each process's rank and device. `python -m eagle_train.launch` prints the environment assignment
the Makefile puts before `deepspeed` (nothing on a CUDA machine)."""
from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Callable, TypeVar

import torch

T = TypeVar("T")


def accelerator_env() -> dict[str, str]:
    """{"DS_ACCELERATOR": "cpu"} where CUDA is absent (gloo on the CPU), {} where DeepSpeed picks CUDA itself."""
    return {} if torch.cuda.is_available() else {"DS_ACCELERATOR": "cpu"}


def free_port() -> int:
    """A free local port for a rendezvous, so two training processes on one machine do not collide."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launched_rank() -> tuple[int, int]:
    """(rank, world size) of a process the deepspeed launcher started (its RANK and WORLD_SIZE), else (0, 1)."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def rank_device(device: str) -> str:
    """model.device for this process: "auto" on a CUDA machine under the launcher is the rank's own GPU
    (cuda:LOCAL_RANK), so N ranks load N copies on N GPUs, not all on the first."""
    if device == "auto" and torch.cuda.is_available() and "LOCAL_RANK" in os.environ:
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return device


def rank_zero_first(work: Callable[[], T]) -> T:
    """`work` on rank 0 while the other ranks wait, then on them (a gloo barrier with a day's timeout between): what
    rank 0 writes (restored answers, self-written prompts), the others read instead of writing it again. Just
    `work()` in a single process."""
    rank, world = launched_rank()
    if world == 1:
        return work()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(days=1))
    result = work() if rank == 0 else None
    dist.barrier()
    return result if rank == 0 else work()


if __name__ == "__main__":
    print(" ".join(f"{k}={v}" for k, v in accelerator_env().items()))
