#!/usr/bin/env bash
# Featurize and train ablation rows of `make ablate-head` on a lent GPU; measures nothing (docs/gpu.md, "Ablation
# rows on a lent GPU"). Runs in the repository root of the device machine with .carry's smol1-3, whl and
# sharegpt staged in /tmp/carry (scripts/gpu_setup.sh). usage: gpu_ablate_rows.sh [SECONDS] [ROW...]
# The two ShareGPT parts featurized, then the rows (default: eagle3-block-k3-1000k) side by side as soon as both
# parts are there; with BENCH=1 also scripts/bench_train_step.py once (the head over the padded batch against packed
# rows and against train.compile, which the rows train with, on this GPU).
# Everything stops SECONDS (default 530) after the start; $OUT then gets rows.tgz.* (every row directory without
# its DeepSpeed checkpoints, and the logs), so the rows finished by then come back and the others show how far
# they got; /tmp/ablate keeps their checkpoints while the machine is warm.
set -u
source scripts/gpu_setup.sh "${1:-530}"
gunzip -c $carry/sharegpt/conversations.jsonl.gz > /tmp/conversations.jsonl || exit 1
say "set up"

out=/tmp/ablate
mkdir -p $out/logs
featurize() {  # recipe [overrides]: featurize it (restores its kept answers), then mark it done or failed
  timeout "$(left)" python3 -m eagle_train.cli "recipes=$1" stage=featurize "${@:2}" > "$out/logs/featurize-$1.log" 2>&1
  local rc=$?
  say "featurized $1 (exit $rc)"
  if [ $rc -eq 0 ]; then touch "$out/logs/$1.featurized"; else touch "$out/logs/$1.failed"; fi
}
after() {  # recipes...: wait until each is featurized; fails at once when one failed (or the time is up)
  for r in "$@"; do
    while [ ! -e "$out/logs/$r.featurized" ]; do
      [ -e "$out/logs/$r.failed" ] || [ "$(left)" -le 0 ] && return 1
      sleep 2
    done
  done
}
row() {  # row name: train it (ablate_head finds its data featurized)
  [ "$(left)" -gt 0 ] || return
  timeout "$(left)" python3 -m lab.ablate_head train_only=true out=$out "rows=[$1]" > "$out/logs/ablate-$1.log" 2>&1
  say "row $1 (exit $?, $(test -e $out/$1/summary.json && echo trained || echo unfinished))"
}

sharegpt=data.source=/tmp/conversations.jsonl  # the ShareGPT parts read the carried export, not the package
featurize smollm2-135m $sharegpt &
featurize smollm2-135m-part2 $sharegpt &
# BENCH=1: also time scripts/bench_train_step.py once, beside the rows (it slows them; the rows' logs give their own
# steps/s)
[ "${BENCH:-0}" = 1 ] && (after smollm2-135m && timeout "$(left)" python3 scripts/bench_train_step.py \
  --blocks eagle,ttt3,eagle3 --rounds 1 --conversations 32 --compile > $out/logs/bench-train-step.log 2>&1
  say "$(grep -a -E '^(machine|eagle|ttt3)' $out/logs/bench-train-step.log)") &
rows=("${@:2}")
[ ${#rows[@]} -gt 0 ] || rows=(eagle3-block-k3-1000k)
for r in "${rows[@]}"; do (after smollm2-135m smollm2-135m-part2 && row "$r") & done

while [ -n "$(jobs -r)" ] && [ "$(left)" -gt 0 ]; do  # each training's last progress line, every 30 s
  sleep 30
  for r in "${rows[@]}"; do
    f=$out/logs/$r.log
    [ -e "$f" ] && say "$r: $(tr '\r' '\n' < "$f" | grep -a -v '^\s*$' | tail -1 | cut -c1-160)"
  done
done
wait
nvidia-smi --query-gpu=name --format=csv,noheader > $out/logs/gpu.txt
cd $out && tar czf - --exclude=checkpoints --exclude='*.featurized' --exclude='*.failed' "${rows[@]}" logs 2>/dev/null \
  | split -b 15M - "$OUT/rows.tgz."
say "done"
