#!/usr/bin/env bash
# One GPU lease, prepared here (issue 43). From the project root, on the device machine:
#
#   bash tests/gpu_session.sh store     carrying .gpu/p1: keeps the first half of Warp in /tmp/parts
#   bash tests/gpu_session.sh run       at once after, carrying .gpu/p2 (timeout_s 560): unpacks Warp, then
#                                       1. the profile and the GPU benchmark, alone on the GPU (timings);
#                                       2. side by side in the time left: the CUDA-marked tests (forward mode,
#                                          tiles, conformance on CUDA), test_tangent_kernels.py on CUDA, the
#                                          property generators with CUDA drawn (EXAMPLES per test), and the
#                                          rest of the suite (not cuda-marked: CPU and device-free tests).
#   bash tests/gpu_session.sh confirm   (a later lease, after store) reruns what failed in run (the list
#                                       below: edit it for the next session), then the benchmark with
#                                       --write-baseline in the time left (TOTAL_S)
#
# ../shared/gpu/pack-warp.sh makes .gpu/p1 and .gpu/p2. Budget: TOTAL_S seconds for run (default 540);
# each step is stopped in time (SIGINT, so pytest still writes its summary). Logs go to $OUT as one
# summary.txt (what the reply shows) and logs.tar.gz (everything): $OUT brings back 8 files at most.
set -u
PY=${PY:-python3}
OUT=${OUT:-/tmp/out}
EXAMPLES=${EXAMPLES:-200}
mkdir -p "$OUT" /tmp/parts /tmp/logs
L=/tmp/logs
T0=$(date +%s)
left() { echo $(( ${TOTAL_S:-540} - ($(date +%s) - T0) - 15 )); }
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/summary.txt; }
finish() {
  cp $L/summary.txt "$OUT/summary.txt"
  tar czf "$OUT/logs.tar.gz" -C $L . 2>/dev/null
  [ -f benchmarks/baseline.json ] && cp benchmarks/baseline.json "$OUT/baseline.json"
}
unpack() {
  cp .gpu/p2/* /tmp/parts/ 2>/dev/null
  mkdir -p /tmp/site
  # a dry run where Warp is installed (PY=.nox/tests-3-11/bin/python) unpacks nothing
  "$PY" -c "import warp" 2>/dev/null || [ -f /tmp/site/warp/__init__.py ] || cat /tmp/parts/warp.tar.xz.* | "$PY" -c \
    "import sys,tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site')"
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
  { nvidia-smi; "$PY" -c "import sys, warp as wp; wp.init(); print(sys.version, 'warp', wp.__version__)";
    "$PY" -m pip list 2>/dev/null | grep -iE "^(torch|jax|jaxlib|cupy|numpy|paddle|hypothesis|pytest)"; } > $L/env.txt 2>&1
  tail -12 $L/env.txt >> $L/summary.txt
}
# the lines of a pytest log worth reading here: failures, errors, the summary line
outcome() { grep -E "^(FAILED|ERROR)|(passed|failed|error|errors|no tests ran).* in [0-9.]+s|Interrupted|Timeout" "$1" | head -${2:-60} >> $L/summary.txt; }
# pytest [label] [seconds] [workers] [args...]: one step, stopped in time
step() {
  local label=$1 secs=$2 workers=$3; shift 3
  stamp "start $label (${secs} s, $workers workers)"
  timeout -s INT -k 20 "$secs" "$PY" -m pytest -q -ra -p no:cacheprovider -n "$workers" "$@" > "$L/pytest-$label.log" 2>&1
  stamp "end $label (exit $?)"
  outcome "$L/pytest-$label.log"
}
# a dry run without a GPU: INTEROP_TEST_DEVICES=cpu INTEROP_REQUIRE_CUDA=0 TANGENT_DEVICE=cpu
export INTEROP_TEST_DEVICES=${INTEROP_TEST_DEVICES:-cpu,cuda} INTEROP_REQUIRE_CUDA=${INTEROP_REQUIRE_CUDA:-1}
# the files with tests marked cuda (INTEROP_TEST_DEVICES=cpu,cuda pytest --collect-only -q -m cuda, 2026-11-28)
CUDA_FILES="tests/test_cross_framework_guide.py tests/test_cuda.py tests/test_cupy.py tests/test_device_geometry.py tests/test_error_contract.py tests/test_jax_conformance.py tests/test_jax_forward_mode.py tests/test_jax_scaling.py tests/test_launch_counts.py tests/test_op_jvp.py tests/test_paddle_conformance.py tests/test_paddle_cuda.py tests/test_paddle_errors.py tests/test_torch_backward_buffers.py tests/test_torch_conformance.py tests/test_torch_forward_mode.py tests/test_torch_ops.py tests/test_torch_paths.py"
case "${1:-}" in
store)
  cp .gpu/p1/* /tmp/parts/ && ls -la /tmp/parts && nvidia-smi -L ;;
run)
  unpack
  stamp "profile"
  timeout -s INT -k 10 80 "$PY" -m benchmarks.profile_calls --device cuda > $L/profile-cuda.txt 2>&1
  stamp "benchmark"
  timeout -s INT -k 10 110 "$PY" -m benchmarks --device cuda --no-chart > $L/bench-cuda.txt 2>&1
  grep -E "x  \(|ratio|/|GB/s" $L/bench-cuda.txt | grep -vE "^\s+(one|plain|raw|interop|empty|CuPy|wp|jnp|torch)" >> $L/summary.txt
  tail -60 $L/profile-cuda.txt >> $L/summary.txt
  # four steps side by side in the time left (16 cores): the CUDA-marked tests (forward mode, tiles,
  # conformance on CUDA; only the files that hold them: each xdist worker collects what it is given),
  # the tangent kernels on CUDA, the property generators with CUDA drawn, and the rest of the suite
  # (CPU parametrizations and device-free tests, on this machine's versions, where Warp's and JAX's
  # default device is the GPU)
  s=$(left)
  step cuda "$s" 5 -m cuda $CUDA_FILES &
  INTEROP_TANGENT_DEVICE=${TANGENT_DEVICE:-cuda} step tangent-cuda "$s" 3 tests/test_tangent_kernels.py &
  INTEROP_PROPERTY_EXAMPLES=$EXAMPLES step properties "$s" 3 tests/test_properties_calls.py tests/test_properties_sequences.py &
  step rest "$s" 6 -m "not cuda" --dist loadfile --ignore=tests/test_tangent_kernels.py \
    --ignore=tests/test_properties_calls.py --ignore=tests/test_properties_sequences.py &
  wait
  finish ;;
confirm)
  # a later lease (after store): what failed in run, side by side (TESTS_S), then the benchmark
  # written as the GPU baseline (the median of 3 runs) in the time left
  unpack
  t=${TESTS_S:-120}
  step again-cuda "$t" 6 -m cuda tests/test_torch_forward_mode.py tests/test_error_contract.py \
    tests/test_torch_backward_buffers.py "tests/test_jax_scaling.py::test_cuda_graphs_capture_the_launches" &
  INTEROP_TANGENT_DEVICE=${TANGENT_DEVICE:-cuda} step again-tangent "$t" 3 tests/test_tangent_kernels.py \
    -k "approx or forward_over_forward" &
  INTEROP_PROPERTY_EXAMPLES=${EXAMPLES:-60} step again-properties "$t" 3 -k "torch or jax" \
    tests/test_properties_calls.py::test_generated_struct_call_equals_warp tests/test_properties_sequences.py &
  step again-rest "$t" 4 tests/test_demo.py "tests/test_jax_forward_mode.py::test_shard_map_and_export_of_forward_mode" \
    tests/test_jax_interrupts.py tests/test_torch_forward_mode.py -k "demo or shard_map or whole_call_loops or compiled_jvp" &
  wait
  finish
  # the median of 3 runs where the time allows (about 40 s a run), else one run
  W=--no-chart; [ "$(left)" -gt 150 ] && W=--write-baseline
  stamp "benchmark $W ($(left) s left)"
  timeout -s INT -k 10 "$(left)" "$PY" -m benchmarks --device cuda $W > $L/bench-cuda.txt 2>&1
  stamp "benchmark done (exit $?)"
  grep -E "ratio|/|GB/s|baseline" $L/bench-cuda.txt | grep -vE "^\s+(one|plain|raw|interop|empty|CuPy|wp|jnp|torch)" >> $L/summary.txt
  finish ;;
*)
  echo "usage: bash tests/gpu_session.sh store|run|confirm"; exit 2 ;;
esac
cat $L/summary.txt | tail -150
