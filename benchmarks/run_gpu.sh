#!/usr/bin/env bash
# The checks and benchmarks that need a GPU, in one go (~12 minutes on one H200):
#
#   bash benchmarks/run_gpu.sh OUTDIR
#
# 1. docs/parity_cuda.py: torch's real SyncBatchNorm and DDP over NCCL vs JAX (-> OUTDIR/parity_cuda.json;
#    `python docs/parity_cuda.py --render OUTDIR/parity_cuda.json` writes docs/parity.md's CUDA section);
# 2. the CUDA-only tests of tests/parallel/test_ddp.py (skipped on machines without CUDA), at the same time;
# 3. benchmarks/train_step.py --device cuda, TF32 off (parity settings) and on (speed settings)
#    (-> OUTDIR/train_step_cuda.json, OUTDIR/train_step_cuda_tf32.json; copy them to benchmarks/results/ and
#    `parity bench --render-only` adds them to docs/benchmarks.md);
# 4. benchmarks/optim_update.py --device cuda (-> OUTDIR/optim_update_cuda.json, rendered the same way);
# 5. benchmarks/gpu_throughput.py: ResNet-18 CIFAR b512 and ResNet-50 b128 224, float32/TF32/bf16, torch eager,
#    torch.compile and JAX, images/s and peak memory (-> OUTDIR/gpu_throughput.json; copy it to benchmarks/results/),
#    for at most THROUGHPUT_BUDGET_S seconds (default 300) of starting new runs.
# SKIP_BENCH=1 stops after 2; SKIP_STEP_BENCH=1 skips 3 and 4.
# Needs a CUDA build of torch and jax with its CUDA plugin; run from the repository root.
set -u
out=${1:?usage: run_gpu.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # several JAX processes share the GPU
export PYTHONFAULTHANDLER=1  # a crashing child prints its Python stack
py=${PYTHON:-python3}

nvidia-smi -L
$py - <<'EOF' 2>&1 | tee "$out/env.txt"
import flax, jax, numpy, optax, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, "numpy", numpy.__version__)
print("jax devices", jax.devices())
import jax_impl, parity.parallel, parity.runner  # noqa: E401,F401  (fail fast if this stack cannot import us)
print("imports ok")
EOF
grep -q "imports ok" "$out/env.txt" || exit 3

(timeout 300 $py -m pytest -q -p no:cacheprovider tests/parallel/test_ddp.py -k "cuda or nccl" > "$out/pytest_cuda.log" 2>&1;
 echo "pytest rc=$?" >> "$out/pytest_cuda.log") &
timeout 300 $py docs/parity_cuda.py --json "$out/parity_cuda.json" > "$out/parity_cuda.log" 2>&1
echo "parity_cuda rc=$?"; tail -25 "$out/parity_cuda.log"
wait
tail -5 "$out/pytest_cuda.log"

[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
timeout $(( ${THROUGHPUT_BUDGET_S:-300} + 200 )) $py benchmarks/gpu_throughput.py --budget-s "${THROUGHPUT_BUDGET_S:-300}" \
  --timeout-s 150 --json "$out/gpu_throughput.json" 2>&1 | grep -v "^wrote" | tee "$out/gpu_throughput.log"
[ "${SKIP_STEP_BENCH:-0}" = 1 ] && exit 0
# The CNN cases with their GPU memory rows, then the transformer, recurrent and GAN cases without (each memory
# probe is a fresh process), merged into one file.
cnn=lenet_b256,resnet18_b32_64,resnet18_b4_224,mnist_b64
more=gpt_d128_t64,gpt_d384_t256,vit_tiny_b32_32,lstm_lm_b32_35,dcgan_b32_32
timeout 300 $py benchmarks/train_step.py --device cuda --only $cnn --json "$out/train_step_cuda.json" 2>&1 | tail -6
timeout 300 $py benchmarks/train_step.py --device cuda --only $more --no-memory --repeats 10 \
  --json "$out/train_step_cuda_more.json" 2>&1 | tail -6
$py - "$out/train_step_cuda.json" "$out/train_step_cuda_more.json" <<'PY' || true
import json, sys
first, more = (json.load(open(p)) for p in sys.argv[1:3])
first["cases"].update(more["cases"])
json.dump(first, open(sys.argv[1], "w"), indent=1)
PY
timeout 240 $py benchmarks/train_step.py --device cuda --tf32 --no-memory --repeats 10 \
  --json "$out/train_step_cuda_tf32.json" 2>&1 | tail -6
timeout 240 $py benchmarks/optim_update.py --device cuda --json "$out/optim_update_cuda.json" 2>&1 | grep -v "^[│┃┏┡└]" | tail -14
