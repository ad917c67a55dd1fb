"""What the DeepSpeed launcher needs around a training process: the accelerator choice (DeepSpeed's CPU accelerator
where CUDA is absent) and a free rendezvous port. `python -m eagle_train.launch` prints the environment assignment
the Makefile puts before `deepspeed` (nothing on a CUDA machine)."""
from __future__ import annotations

import socket

import torch


def accelerator_env() -> dict[str, str]:
    """{"DS_ACCELERATOR": "cpu"} where CUDA is absent (gloo on the CPU), {} where DeepSpeed picks CUDA itself."""
    return {} if torch.cuda.is_available() else {"DS_ACCELERATOR": "cpu"}


def free_port() -> int:
    """A free local port for a rendezvous, so two training processes on one machine do not collide."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    print(" ".join(f"{k}={v}" for k, v in accelerator_env().items()))
