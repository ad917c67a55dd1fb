"""`python -m eval.identical run_dir=results/RUN ['label=float32 greedy']` (conf/command/identical.yaml): one line
saying, for each method of a run but vanilla, on how many answers its generated tokens equal vanilla's (make demo
prints it for its float32 check)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle_infer.entry.cli_support import one_line_errors
from eagle_infer.errors import EagleError
from eagle_train.plumbing.command_line import command_settings

from .records import read_records


@dataclass
class IdenticalSettings:
    run_dir: str
    label: str


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


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    conf = command_settings("identical", IdenticalSettings, argv)
    path = Path(conf.run_dir) / "records.jsonl"
    if not path.exists():
        raise EagleError(f"{path} does not exist; expected the records of an eval run in run_dir")
    print(identical_line(read_records(path), conf.label))


if __name__ == "__main__":
    main()
