#!/usr/bin/env bash
# Write self-written prompts and the target's answers to them on a lent GPU, for featurize to read back here
# (docs/gpu.md, "Self-written data on a lent GPU"). Runs in the repository root of the device machine with .carry's
# smol1-3, whl and benchmarks staged in /tmp/carry (scripts/gpu_setup.sh).
# usage: gpu_self_data.sh [SECONDS] [BATCH] [RECIPE...]
# Each recipe (default: smollm2-135m-self-openers-part4, then -part5) in turn: stage=regenerate writes its prompt
# shards (after the kept ones of recipes/generated, restored first) and answers them, BATCH requests at a time
# (default 256; not a recorded setting). Everything stops SECONDS (default 530) after the start; $OUT then gets generated.tgz.*: every
# whole prompt and answer shard (stage=save-generated, the layout of recipes/generated) and the logs, so an
# unfinished recipe comes back as far as it got and a later run, here or there, continues it.
set -u
source scripts/gpu_setup.sh "${1:-530}"
say "set up"
batch=${2:-256}
recipes=("${@:3}")
[ ${#recipes[@]} -gt 0 ] || recipes=(smollm2-135m-self-openers-part4 smollm2-135m-self-openers-part5)
mkdir -p /tmp/gen/logs
# PROFILE_S=<seconds> (default 0: skipped): first profile a decoding step of the batch (scripts/profile_decode.py),
# then time the compiled target (CUDA graphs) against the eager one; the text is written compiled when that was at
# least 1.2x as fast. On a lent H200 the eager profile finished and compiling did not, within 150 s (docs/gpu.md), so
# it is worth running only with device time to spare.
compile=false
if [ "${PROFILE_S:-0}" -gt 0 ]; then
  [ -f /tmp/gen/logs/profile-decode.txt ] || timeout "$PROFILE_S" python3 -u scripts/profile_decode.py --batch "$batch" \
    --compiled --rounds 1 > /tmp/gen/logs/profile-decode.txt 2>&1
  say "profiled a decoding step: $(grep -a -E '^machine|^aten|^compiled|^eager|^same' /tmp/gen/logs/profile-decode.txt | tr '\n' ' ')"
  ratio=$(sed -n 's/^compiled \/ eager: \([0-9.]*\) x$/\1/p' /tmp/gen/logs/profile-decode.txt)
  compile=$(awk -v r="${ratio:-0}" 'BEGIN { print (r >= 1.2) ? "true" : "false" }')
  say "featurize.compile=$compile (compiled / eager: ${ratio:-not measured})"
fi
settings=(data.self_prompts.eval_data_dir=$carry/benchmarks "data.self_prompts.batch_size=$batch"
          "featurize.regenerate_batch_size=$batch" "featurize.compile=$compile")
for r in "${recipes[@]}"; do
  [ "$(left)" -gt 20 ] || break
  timeout "$(left)" python3 -m eagle_train.cli "recipes=$r" stage=regenerate "${settings[@]}" > "/tmp/gen/logs/$r.log" 2>&1
  say "answered $r (exit $?): $(grep -a -E 'prompts/s|answer tokens/s|shards answered' /tmp/gen/logs/$r.log | tail -2 | tr '\n' ' ')"
done
for r in "${recipes[@]}"; do  # whole shards only, as recipes/generated holds them
  python3 -m eagle_train.cli "recipes=$r" stage=save-generated data.generated_dir=/tmp/gen "${settings[@]}" \
    >> "/tmp/gen/logs/$r.log" 2>&1
done
nvidia-smi --query-gpu=name --format=csv,noheader > /tmp/gen/logs/gpu.txt
cd /tmp/gen && tar czf - . | split -b 15M - "$OUT/generated.tgz."
say "done"
