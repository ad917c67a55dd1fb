"""`python -m eval.identical results/RUN [LABEL]`: one line saying, for each method of a run but vanilla, on how many
answers its generated tokens equal vanilla's (make demo prints it for its float32 check)."""
from __future__ import annotations

import sys
from pathlib import Path

from eagle_infer.errors import EagleError

from .records import read_records


def identical_line(records: list[dict], label: str) -> str:
    """'LABEL: eagle2 = vanilla on 3/3 answers, ...' over the questions both methods answered."""
    vanilla = {(r["benchmark"], str(r["question_id"])): r["tokens"] for r in records if r["method"] == "vanilla"}
    if not vanilla:
        raise EagleError("the run has no vanilla records to compare with: include method vanilla")
    parts = []
    for method in dict.fromkeys(r["method"] for r in records if r["method"] != "vanilla"):
        same = [r["tokens"] == vanilla[k] for r in records
                if r["method"] == method and (k := (r["benchmark"], str(r["question_id"]))) in vanilla]
        parts.append(f"{method} = vanilla on {sum(same)}/{len(same)} answers")
    return f"{label}: " + ", ".join(parts)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m eval.identical results/RUN [LABEL]")
    path = Path(argv[0]) / "records.jsonl"
    if not path.exists():
        raise SystemExit(f"error: {path} does not exist")
    print(identical_line(read_records(path), argv[1] if len(argv) > 1 else "greedy"))


if __name__ == "__main__":
    main(sys.argv[1:])
