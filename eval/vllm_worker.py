"""vLLM at the far end of a pipe: `python -P eval/vllm_worker.py`, run by vLLM's environment's python (.venv-serve,
`make check-serve`) and driven by eval.vllm_backend. It imports vLLM and the standard library only, never the
toolkit, whose dependencies that environment lacks (-P: nothing beside this file shadows vLLM's imports).

Protocol, one JSON object a line. The first line read is the engine: {"model": target directory, "dtype",
"speculative": vLLM's speculative_config or null, "max_model_len", "eager": skip torch.compile}; the answer is
{"vllm": version, "load_s"}. Then each request {"prompt": token ids [P], "max_tokens", "temperature", "top_p",
"top_k", "seed", "stop": token ids} is answered {"tokens": new token ids [N] (a stop id included), "wall_s": the
generate call's seconds, "accepted": accepted draft tokens per verification step [S], "drafted": draft tokens per
step [S]} (vLLM's per-request speculative-decoding metrics, "detailed"; empty without a head). Any failure is
answered {"error": one line} and ends the worker. Everything vLLM prints goes to standard error.
"""
from __future__ import annotations

import json
import os
import sys
import time


def one_line(err: BaseException) -> str:
    """`err` as one line: its type and the first line of its message."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()


def load(spec: dict):
    """vLLM's offline engine for `spec` (the first protocol line)."""
    from vllm import LLM

    speculative = spec.get("speculative")
    extra = {"per_request_spec_decode_metrics": "detailed"} if speculative else {}
    return LLM(model=spec["model"], dtype=spec["dtype"], speculative_config=speculative,
               max_model_len=spec["max_model_len"], enforce_eager=spec["eager"], seed=0, **extra)


def answer(llm, request: dict) -> dict:
    """One request decoded alone: its new tokens, seconds and per-step acceptance."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=request["max_tokens"], temperature=request["temperature"],
                            top_p=request["top_p"], top_k=request["top_k"], seed=request["seed"],
                            stop_token_ids=request["stop"], detokenize=False)
    start = time.perf_counter()
    output = llm.generate([TokensPrompt(prompt_token_ids=request["prompt"])], params, use_tqdm=False)[0].outputs[0]
    wall = time.perf_counter() - start
    metrics = output.spec_decode_metrics
    return {"tokens": list(output.token_ids), "wall_s": wall,
            "accepted": list(metrics.per_step_accepted) if metrics else [],
            "drafted": list(metrics.per_step_drafted) if metrics else []}


def serve(lines, reply) -> None:
    """Answer the protocol's lines (an iterable of str) through `reply(dict)`."""
    from vllm import __version__

    llm = None
    for line in lines:
        try:
            if llm is None:
                start = time.perf_counter()
                llm = load(json.loads(line))
                reply({"vllm": __version__, "load_s": time.perf_counter() - start})
            else:
                reply(answer(llm, json.loads(line)))
        except Exception as err:  # noqa: BLE001 (vLLM's own error, passed on in one line)
            reply({"error": one_line(err)})
            return


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # vLLM's logs (and its engine process's) go to standard error, the protocol keeps stdout

    def reply(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    serve(sys.stdin, reply)


if __name__ == "__main__":
    main()
