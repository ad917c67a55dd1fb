"""scripts/bench_engine.py's count of what the host dispatches per cycle (`dispatched`): aten operators from the first
emitted token on, so a request's prefill does not inflate the per-cycle figure, and CUDA graph replays."""
from __future__ import annotations

import torch

from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from tests.oracles import one_thread  # noqa: F401 (autouse fixture)
from tests.scripts import load_script
from tests.tiny import tiny_target


def test_operators_are_counted_per_step_without_the_prefill():
    """A vanilla step dispatches the same operators at every length, so the per-step count of a short answer equals a
    long one's: counting the prefill's forward too would raise the short one's by a third."""
    dispatched = load_script("bench_engine").dispatched
    engine = Engine(tiny_target(), None, InferConf(method="vanilla"))
    prompt = [3, 14, 15, 9, 26, 5, 35]
    engine.generate(prompt, 4)  # warm-up
    short, long = dispatched(engine, prompt, 4, []), dispatched(engine, prompt, 16, [])
    assert short["graph_replays"] == long["graph_replays"] == 0
    assert long["aten_ops"] > 50
    assert abs(short["aten_ops"] - long["aten_ops"]) / long["aten_ops"] < 0.05, (short, long)


def test_graph_replays_are_counted_per_cycle(monkeypatch):
    """Every CUDA graph replay during the answer counts: here a stand-in replay inside each target forward."""
    dispatched = load_script("bench_engine").dispatched
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", lambda graph: None)  # no GPU: a replay that does nothing
    target = tiny_target()
    forward = target.forward

    def replaying(*args, **kwargs):
        torch.cuda.CUDAGraph.replay(None)
        return forward(*args, **kwargs)

    object.__setattr__(target, "forward", replaying)
    engine = Engine(target, None, InferConf(method="vanilla"))
    counts = dispatched(engine, [3, 14, 15, 9], 8, [])
    assert counts["graph_replays"] == 1.0  # the prefill's replay is not a step's
