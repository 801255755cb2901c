#!/usr/bin/env bash
# The "GPU" figures of benchmarks/RESULTS.md on one lent H100, one stage per device call
# (each under the 10-minute limit). Run from the repository root with the wheels of keras,
# namex and optree in .whl/ (the GPU image has torch, jax, timm and transformers, no keras;
# keras-hub's wheel too for `targets`):
#   bash benchmarks/gpu.sh targets | training | inference | large | remat | jaxprofile | overhead
# `targets` is every target of issue 33 in one call of ~7.5 minutes (benchmarks/targets.py).
# Logs and JSON go to $OUT (default: gpu-results/).
set -o pipefail
STAGES="targets|training|inference|large|remat|jaxprofile|overhead"
[[ "$1" =~ ^($STAGES)$ ]] || { echo "usage: bash benchmarks/gpu.sh $STAGES" >&2; exit 2; }
OUT=${OUT:-gpu-results}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
PEAK=${PEAK:-798}  # bf16 TFLOP/s of an 8192^3 product on this card (matmul.py --size 8192)
B16="--variant ViTB16 --batch 256 --precision mixed_bfloat16 --group-size 1 --peak-tflops $PEAK"
REFS="keras_vit/jax keras_vit/torch keras_vit/torch/compiled transformers timm/compiled"
case "$1" in
targets)
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  # the workers of a wave share the GPU: JAX takes memory as it needs it, not 75 % up front
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 470 python3 benchmarks/targets.py --budget 440 \
    --json "$OUT/targets.json" 2>&1 | tee "$OUT/targets.log" ;;
training)
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import jax, torch, timm, transformers, keras; print('jax', jax.__version__, jax.devices(), 'torch', torch.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__, 'keras', keras.__version__)"
  KERAS_BACKEND=jax timeout 120 python3 benchmarks/matmul.py --size 8192 2>&1 | tee "$OUT/matmul.log"
  timeout 480 python3 benchmarks/throughput.py $B16 --modes training --frameworks $REFS \
    --steps 10 --rounds 3 --warmup 3 --json "$OUT/b16_training.json" 2>&1 | tee "$OUT/b16_training.log" ;;
inference)
  timeout 420 python3 benchmarks/throughput.py $B16 --modes inference --frameworks $REFS \
    --steps 10 --rounds 3 --warmup 3 --json "$OUT/b16_inference.json" 2>&1 | tee "$OUT/b16_inference.log"
  for b in jax torch; do
    KERAS_BACKEND=$b timeout 120 python3 benchmarks/bf16_error.py --images 16 --torch-autocast 2>&1 | tee "$OUT/error_$b.log"
  done ;;
large)
  KERAS_BACKEND=torch timeout 120 python3 benchmarks/bf16_error.py --images 16 --torch-autocast 2>&1 | tee "$OUT/error_autocast.log"
  timeout 560 python3 benchmarks/throughput.py --variant ViTL16 --batch 128 --precision mixed_bfloat16 \
    --group-size 1 --peak-tflops $PEAK --modes training --frameworks keras_vit/jax keras_vit/torch/compiled timm/compiled \
    --steps 5 --rounds 3 --warmup 2 --json "$OUT/l16_training.json" 2>&1 | tee "$OUT/l16_training.log" ;;
remat)
  for v in "ViTL16 --start 256" "ViTH14 --start 64"; do
    KERAS_BACKEND=jax timeout 280 python3 benchmarks/remat_batch.py --variant $v --granularity 64 2>&1 | tee -a "$OUT/remat.log"
  done ;;
jaxprofile)
  KERAS_BACKEND=jax timeout 330 python3 benchmarks/jax_gpu_profile.py 2>&1 | tee "$OUT/jax_profile.log"
  XLA_FLAGS=--xla_gpu_enable_triton_gemm=false KERAS_BACKEND=jax timeout 150 python3 benchmarks/jax_gpu_profile.py \
    --modes inference --keras-variants shipped 2>&1 | tee "$OUT/jax_profile_no_triton.log" ;;
overhead)
  KERAS_BACKEND=jax timeout 560 python3 benchmarks/step_overhead.py --models b16 --batch 256 \
    --dtype-policy mixed_bfloat16 --steps 10 --fit-steps 10 --rounds 3 --spe 1 8 --hlo 2>&1 | tee "$OUT/step_overhead.log" ;;
esac
