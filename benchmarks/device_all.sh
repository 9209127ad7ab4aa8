#!/usr/bin/env bash
# The whole H200 session in two device calls of at most 600 s each.  Run from the repo root:
#
#   PART=A bash benchmarks/device_all.sh   # runtime build, tests/gpu, gpu_triton, flaggems_probe
#   PART=B bash benchmarks/device_all.sh   # flaggems_ops.py, llm_decode.py
#
# FlagGems and its two dependencies travel as wheels in .whl/ and are installed into /tmp/site
# (no index, no compile).  Every step has its own `timeout` (SIGTERM, then SIGKILL 15 s later;
# the Python harnesses turn SIGTERM into a written report), capped by what is left of LIMIT
# (560 s) since the script started; a step with less than 20 s left is skipped.  Full logs go to
# $OUT/<step>.log; stdout gets the last TAIL (40) lines of each, without Python warning blocks
# (FlagGems' Dynamo notes: "Dynamo detected a call to a functools.lru_cache-wrapped function ...
# This call originates from: File .../device_info.py ..."), which otherwise fill the output and
# read like tracebacks.  Reports (.md/.json/.png) are written under $OUT, named as their
# current copies in benchmarks/results/latest/ (flaggems_ops.md, llm_decode_qwen3.md, ...).
#
# Environment: OUT (default /tmp/out), BENCH_COMMIT (default: git rev-parse, else "unknown"),
# BENCH_DATE, LIMIT, TAIL, STEPS (space-separated step names to run, from both parts, e.g.
# STEPS="gpu_tests flaggems_probe flaggems_ops" PART=AB; default: all of the part's), and per
# step the arguments: PYTEST_ARGS, FG_OPS_ARGS, LLM_ARGS (or LLM_PRESET=qwen3 | qwen3_cpp |
# deepseek_v2 | deepseek_v2_cpp | deepseek_v2_ab: issue 5's settings, see below; caches:
# refill the caches below, with STEPS="runtime_build llm_decode llm_decode2"), CP_ARGS (each replaces the defaults
# below), FG_OPS_S, LLM_S, CP_S and GPU_TESTS_S (their timeouts), PYTEST_K (a pytest -k expression), LLM2_ARGS / LLM2_S (a second llm_decode run), LLM_MM (generic | hopper; default generic).
# Step cold_profile (part A) runs benchmarks/cold_profile.py into $OUT/cold_profile.txt; step
# host_profile (part A; HP_ARGS, HP_S) benchmarks/host_profile.py into $OUT/host_profile.tgz.
#
# Caches: FlagGems' tuned-config database and Triton's kernel cache live under /tmp/devcache.
# CACHES_IN=path/to/caches.tgz (a file an earlier call wrote, or the caches.tgz.part-* it was
# split into, carried in an ignored folder such as .devcache/) starts from them, so that
# FlagGems does not autotune again what an earlier call of the same session tuned (DeepSeek-V2's
# eager warm-up autotuned for 350 s); reports then say which caches they started from.
# CACHES_OUT=1 writes $OUT/caches.tgz (or its parts, when large).
# The step logs and Trident's explain texts come back as one $OUT/logs.tgz (the device tool
# returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
PART=${PART:?set PART=A or PART=B}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LIMIT=${LIMIT:-560}
TAIL=${TAIL:-40}
T0=$(date +%s)
export PYTHONUNBUFFERED=1 TRIDENT_CACHE_DIR=/tmp/trident-cache
export FLAGGEMS_CACHE_DIR=/tmp/devcache/flaggems TRITON_CACHE_DIR=/tmp/devcache/triton
mkdir -p "$FLAGGEMS_CACHE_DIR" "$TRITON_CACHE_DIR"
if [[ -n "${CACHES_IN:-}" ]]; then
  # one file, or the parts CACHES_OUT split it into (CACHES_IN=.devcache/caches.tgz takes
  # .devcache/caches.tgz.part-aa, -ab, ... when the file itself is absent)
  if [[ -f "$CACHES_IN" ]]; then CACHES_PARTS=("$CACHES_IN"); else CACHES_PARTS=("$CACHES_IN".part-*); fi
  if cat "${CACHES_PARTS[@]}" | tar xzf - -C /tmp/devcache; then
    # what the reports say came back: the Triton cache is left out of caches.tgz when too large
    if [[ -n "$(ls -A /tmp/devcache/triton 2>/dev/null)" ]]; then
      export BENCH_WARM_CACHES="FlagGems' tuned configs and Triton's kernel cache"
    else
      export BENCH_WARM_CACHES="FlagGems' tuned configs (not Triton's kernel cache)"
    fi
    echo "caches from $CACHES_IN: $(du -sh /tmp/devcache | cut -f1)"
  else
    echo "CACHES_IN=$CACHES_IN could not be read: starting with empty caches"
  fi
fi
export BENCH_COMMIT=${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export BENCH_DATE=${BENCH_DATE:-$(date +%F)}

quiet() {  # drop warning blocks: the matching line and the indented/blank lines after it
  awk '/Warning|warn_once|originates|device_info/ {skip = 1; next}
       skip && (/^[[:space:]]/ || /^$/) {next}
       {skip = 0; print; fflush()}'
}

step() {  # step NAME SECONDS CMD ARGS...
  local name=$1 secs=$2 left t rc
  shift 2
  if [[ -n "${STEPS:-}" && " $STEPS " != *" $name "* ]]; then
    return 0
  fi
  left=$(( LIMIT - ($(date +%s) - T0) ))
  if (( left < 20 )); then
    echo "=== $name: SKIPPED (${left}s left of ${LIMIT}s)"
    return 0
  fi
  (( secs > left - 5 )) && secs=$(( left - 5 ))
  t=$(date +%s)
  echo "=== $name (timeout ${secs}s, at +$(( t - T0 ))s)"
  timeout -s TERM -k 15 "$secs" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  quiet < "$OUT/$name.log" | tail -n "$TAIL"
  (( rc == 124 || rc == 137 )) && rc="$rc (TIMED OUT)"
  [[ "$name" == gpu_tests && "$rc" == 5 ]] && rc="5 (NO TESTS SELECTED)"
  echo "=== $name: rc=$rc, $(( $(date +%s) - t ))s"
}

echo "device_all PART=$PART commit=$BENCH_COMMIT date=$BENCH_DATE out=$OUT limit=${LIMIT}s"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl 2>&1 | quiet | tail -5
export PYTHONPATH=/tmp/site:$PWD
python3 -c "import torch, triton, flag_gems; print('torch', torch.__version__, '| triton', \
triton.__version__, '| flag_gems', flag_gems.__version__)" 2>&1 | quiet | tail -5
step runtime_build 120 python3 -c \
  "from trident.native.build import runtime_module; runtime_module(); print('runtime ok')"

case "$PART" in
A|AB)
  # shellcheck disable=SC2086
  # PYTEST_K: a -k expression, passed as one word (PYTEST_ARGS is split on spaces, so
  # "-k 'a or b'" cannot go there; session 9 lost a run's tests to "-k a_or_b", which selects
  # nothing: pytest's rc 5 is reported as such)
  step gpu_tests ${GPU_TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider \
    ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_ARGS:-tests/gpu}
  step gpu_triton 150 python3 benchmarks/gpu_triton.py --out "$OUT/gpu_triton.md"
  step flaggems_probe 90 python3 benchmarks/flaggems_probe.py
  # shellcheck disable=SC2086
  step cold_profile ${CP_S:-240} python3 benchmarks/cold_profile.py ${CP_ARGS:-} \
    --out "$OUT/cold_profile.txt"
  # Guard/program split of warm Trident calls (TRIDENT_PROFILE), with each version's C.
  # shellcheck disable=SC2086
  step host_profile ${HP_S:-200} env TRIDENT_PROFILE=1 TRIDENT_DUMP_DIR="$OUT/hp/dump" \
    python3 benchmarks/host_profile.py ${HP_ARGS:-} --out-dir "$OUT/hp"
  [[ -d "$OUT/hp" ]] && tar czf "$OUT/host_profile.tgz" -C "$OUT" hp && rm -rf "$OUT/hp"
  # A fresh process's first hits from a warm disk cache (issue 30), against torch.compile's
  # warm start: examples' Triton host code, an mm, and FlagGems' silu, rms_norm and mm.
  # shellcheck disable=SC2086
  step cold_start ${CS_S:-240} python3 benchmarks/cold_start.py ${CS_ARGS:---device cuda \
    --flaggems --runs 3} --out "$OUT/cold_start_cuda.md"
  # Extra commands, e.g. a helper's benchmark: EXTRA="python3 benchmarks/x.py --out $OUT/x.md"
  [[ -n "${EXTRA:-}" ]] && step extra ${EXTRA_S:-200} bash -c "$EXTRA"
  ;;&
B|AB)
  # 3 shapes and no cpp_wrapper mode (the costliest, measured in the 2026-12-01 run) to fit
  # ~250 s; the harness's own budget stops starting new work before the timeout.
  # shellcheck disable=SC2086
  step flaggems_ops ${FG_OPS_S:-250} python3 benchmarks/flaggems_ops.py ${FG_OPS_ARGS:---shapes 3 \
    --modes eager,torch,trident,compile,compile_noguard --budget-s 225} \
    --out-dir "$OUT"
  # LLM_PRESET: issue 5's settings, one model per device call (each ~5-8 minutes, LLM_S 525);
  # measured requests per prompt set: 9 (with 5, one mode's requests in a set spread up to 2x,
  # and two modes running the same wrappers differed by 16% in one set's medians: sessions
  # 15-16; DeepSeek-V2 with 5 took 288 s for four modes, so 9 fit in the 480 s budget):
  #   qwen3        Qwen3, torch, eager, trident, compile
  #   qwen3_cpp    Qwen3, eager, trident, compile_cpp (its warm-up alone outlasts the rest)
  #   deepseek_v2  DeepSeek-V2 with grouped-GEMM experts, torch, eager, trident, compile
  #   deepseek_v2_cpp  the same model, eager, trident, compile_cpp (torch 2.11's C++ wrapper
  #                cannot build aten::_grouped_mm: the warm-up filter drops the regions whose
  #                compile fails, and the mode runs the rest)
  #   deepseek_v2_ab  the same model, eager, trident, trident_full (Trident with every operator
  #                on the dispatcher's full path: the below-autograd change's A/B, interleaved)
  issue5_args="--layers 4 --new-tokens 128 --warmup 10 --mm generic \
    --max-versions 64 --regions model,layer --budget-s 480 --reserve-s 60"
  case "${LLM_PRESET:-}" in
    "") ;;
    qwen3) LLM_ARGS=${LLM_ARGS:-"--models qwen3 $issue5_args --requests 9 \
      --modes torch,eager,trident,compile --tag qwen3"} ;;
    qwen3_cpp) LLM_ARGS=${LLM_ARGS:-"--models qwen3 $issue5_args --requests 9 \
      --modes eager,trident,compile_cpp --tag qwen3_cpp"} ;;
    deepseek_v2) LLM_ARGS=${LLM_ARGS:-"--models deepseek_v2 --experts grouped_mm $issue5_args --requests 9 \
      --modes torch,eager,trident,compile --tag deepseek_v2"} ;;
    deepseek_v2_cpp) LLM_ARGS=${LLM_ARGS:-"--models deepseek_v2 --experts grouped_mm $issue5_args \
      --requests 9 --modes eager,trident,compile_cpp --tag deepseek_v2_cpp"} ;;
    deepseek_v2_ab) LLM_ARGS=${LLM_ARGS:-"--models deepseek_v2 --experts grouped_mm $issue5_args \
      --requests 9 --modes eager,trident,trident_full --tag deepseek_v2_ab"} ;;
    caches)  # refill FlagGems' tuned configs and Triton's cache (a new checkout has none):
      # eager only, DeepSeek-V2 then Qwen3, every measured prompt, caches written to $OUT.
      # From empty caches DeepSeek-V2's eager warm-up autotunes for more than one call
      # (session 19: cut after 302 s, then 162 s more): repeat, CACHES_IN the last CACHES_OUT,
      # until its report shows every warm-up and request done.
      CACHES_OUT=1
      LLM_S=${LLM_S:-400}
      LLM_ARGS=${LLM_ARGS:-"--models deepseek_v2 --experts grouped_mm ${issue5_args/--budget-s 480 --reserve-s 60/--budget-s 380 --reserve-s 0} \
        --requests 9 --modes eager --no-breakdown --tag caches_deepseek_v2"}
      LLM2_S=${LLM2_S:-120}
      LLM2_ARGS=${LLM2_ARGS:-"--models qwen3 ${issue5_args/--budget-s 480 --reserve-s 60/--budget-s 105 --reserve-s 0} \
        --requests 9 --modes eager --no-breakdown --tag caches_qwen3"} ;;
    *) echo "LLM_PRESET must be qwen3, qwen3_cpp, deepseek_v2, deepseek_v2_cpp, deepseek_v2_ab or caches, not $LLM_PRESET"
       exit 2 ;;
  esac
  [[ -n "${LLM_PRESET:-}" ]] && LLM_S=${LLM_S:-525}
  # One model, 2 layers, 32 tokens: every mode fits ~250 s.  --mm generic: FlagGems' portable
  # mm, which Trident can capture (the Hopper mm's TMA descriptors and pre_hook configs make it
  # fall back, and its 162-config autotuning took most of the smoke run's 170 s).
  # shellcheck disable=SC2086
  step llm_decode ${LLM_S:-250} python3 benchmarks/llm_decode.py ${LLM_ARGS:---models qwen3 --layers 2 \
    --new-tokens 32 --warmup 4 --requests 1 --mm ${LLM_MM:-generic} --max-versions 64 \
    --budget-s 215 --tag h200} --out-dir "$OUT"
  # A second llm_decode run in the same call, only when LLM2_ARGS is set (e.g. another model,
  # or a short eager warm-up that fills the caches CACHES_OUT then returns).
  if [[ -n "${LLM2_ARGS:-}" ]]; then
    # shellcheck disable=SC2086
    step llm_decode2 ${LLM2_S:-250} python3 benchmarks/llm_decode.py $LLM2_ARGS --out-dir "$OUT"
  fi
  ;;
A) ;;
*)
  echo "PART must be A, B or AB, not $PART"
  exit 2
  ;;
esac
if [[ "${CACHES_OUT:-0}" == 1 ]]; then
  # The device tool returns at most 8 files of 16 MiB (64 MiB in all), and logs.tgz and the
  # reports need some: the caches come back whole below 15 MB, in up to 5 parts of 10 MB
  # below 50 MB, and as FlagGems' tuned configs alone above that.
  tar czf "$OUT/caches.tgz" -C /tmp/devcache flaggems/config_cache triton 2>/dev/null
  size=$(stat -c %s "$OUT/caches.tgz")
  if (( size > 50000000 )); then
    echo "caches: $size bytes with Triton's cache, too large: FlagGems' tuned configs only"
    tar czf "$OUT/caches.tgz" -C /tmp/devcache flaggems/config_cache
  elif (( size > 15000000 )); then
    split -b 10000000 "$OUT/caches.tgz" "$OUT/caches.tgz.part-" && rm -f "$OUT/caches.tgz"
    echo "caches: $size bytes, split into $(ls "$OUT"/caches.tgz.part-* | wc -l) parts"
  fi
fi
( cd "$OUT" && ls ./*.log > /dev/null 2>&1 && tar czf logs.tgz ./*.log ./*_trident.txt 2>/dev/null \
  ; rm -f ./*.log ./*_trident.txt )
echo "device_all PART=$PART done in $(( $(date +%s) - T0 ))s; files in $OUT:"
ls -la "$OUT"
