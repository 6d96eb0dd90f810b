#!/usr/bin/env bash
# Everything jitmeta checks on the GPU machine, in one or two calls (device tool):
#   bash scripts/gpu_session.sh [smoke] [tests] [memcheck] [racecheck] [bench] [host] [configs]
#                               [hostcmp] [profile] [ncu] [phases] [flagab] [launchcost]
#                               [cu12] [checks] [firstprof] [launchmodes] [kernelab]
# (default: tests memcheck bench racecheck; "sanitize" = memcheck + racecheck; "checks" =
# tests, memcheck and racecheck run side by side)
# Logs go to $OUT (or ./.device-out). Needs the platformdirs wheel in .whl/ (carried);
# "cu12" needs .whl-cu12/ (scripts/cu12_smoke.sh); "hostcmp", "profile", "ncu" and "kernelab" need
# an earlier version of the package unpacked in .before/ (git archive REV | tar -x -C
# .before); "kernelab" also times every version unpacked in .lab/<commit>/ (carried as
# .lab), so that one lease compares several branches.
set -u -o pipefail
OUT=${OUT:-$PWD/.device-out}; mkdir -p "$OUT"
stages=${*:-tests memcheck bench racecheck}
export PYTHONUNBUFFERED=1 JITMETA_CACHE_DIR=${JITMETA_CACHE_DIR:-/tmp/jitmeta-cache}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
rm -rf build /tmp/site/jitmeta  # stale copies (kept between device calls) would be imported
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade \
    --target /tmp/site . > /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 1; }
export PYTHONPATH=/tmp/site
cd /tmp   # import the installed package, not the checkout
repo=$OLDPWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, jitmeta; print('torch', torch.__version__, 'jitmeta', jitmeta.__version__)" | tee -a "$OUT/device.txt"
# The commit every stage's records name: JITMETA_BENCH_COMMIT when set, else the
# copy's git ("unknown" without one). Set it to the hash written out in the device
# command (JITMETA_BENCH_COMMIT=abc1234, from `git rev-parse --short HEAD` on the build
# machine): a $(git ...) there runs on the device, where the copied tree's .git may be
# older than the tree (seen on 2026-12-03, 2026-12-06 and 2026-12-08: the copy's .git
# stayed at the session's first commit).
python3 -c "import sys; sys.path.insert(0, '$repo/bench'); import records
print('records name commit', records.git_commit())" | tee -a "$OUT/device.txt"
[ -n "${JITMETA_BENCH_COMMIT:-}" ] || echo "warning: JITMETA_BENCH_COMMIT is not set: the records name the copy's git HEAD, which may not be the tree that ran" | tee -a "$OUT/device.txt"
# Where version $1 is installed: "before" (the package in .before/, an earlier
# version), "after" (this one) or a commit unpacked in .lab/<commit>/ (kernelab).
site_of() {
  case $1 in
    before) echo /tmp/site-before ;;
    after) echo /tmp/site ;;
    *) echo "/tmp/site-lab-$1" ;;
  esac
}
# Installs the package tree $2 as version $1, with the wheels of .whl/.
install_version() {
  local site
  site=$(site_of "$1")
  rm -rf "$site"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
      --no-cache-dir --target "$site" "$repo"/.whl/*.whl "$2" \
      > "$site.log" 2>&1 || { cat "$site.log"; return 1; }
}
# .before/, installed once per run for the stages that compare versions.
before_ready=""
install_before() {
  [ -n "$before_ready" ] && return 0
  install_version before "$repo/.before" && before_ready=1
}
# The versions in .lab/<commit>/.
lab_versions() {
  local d
  for d in "$repo"/.lab/*/; do [ -d "$d" ] && basename "$d"; done
}
# Runs a command with version $1 (site_of) importable, each version with its own
# kernel cache.
as_version() {
  local which=$1
  shift
  PYTHONPATH=$(site_of "$which") JITMETA_CACHE_DIR=/tmp/jitmeta-cache-$which "$@"
}
# The GPU test suite (with the CPU-built bundle, when carried: imported and used
# offline) and one compute-sanitizer tool over scripts/sanitize_cases.py; each writes
# its log under $OUT and returns the exit status.
gpu_tests() {
  [ -f "$repo/.bundle/cpu-sm90.tgz" ] && export JITMETA_TEST_BUNDLE="$repo/.bundle/cpu-sm90.tgz"
  timeout ${JITMETA_TESTS_TIMEOUT:-300} python3 -m pytest -p no:cacheprovider -v -m gpu -rfE --timeout 120 \
      "$repo/tests/test_gpu_kernels.py" "$repo/tests/test_gpu_serving.py" \
      "$repo/tests/test_bundle.py" > "$OUT/pytest-gpu.log" 2>&1
}
sanitizer() {
  timeout ${JITMETA_SANITIZER_TIMEOUT:-200} compute-sanitizer --tool "$1" --report-api-errors no --error-exitcode 9 python3 "$repo/scripts/sanitize_cases.py" \
      > "$OUT/sanitizer-$1.log" 2>&1
}
# what to show of their logs, given the exit status
tests_said() {
  echo "pytest (gpu): exit $1"; grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/pytest-gpu.log" | tail -15
}
sanitizer_said() {
  echo "compute-sanitizer $1: exit $2"; tail -4 "$OUT/sanitizer-$1.log"
}
rc=0
for stage in $stages; do
  case $stage in
    smoke)
      timeout 180 python3 -X faulthandler -c "import faulthandler, runpy, sys; faulthandler.dump_traceback_later(60, exit=True); sys.argv=['x']; runpy.run_path('$repo/scripts/sanitize_cases.py', run_name='__main__')" 2>&1 | tee "$OUT/smoke.log" | tail -30
      rc=$((rc | ${PIPESTATUS[0]})) ;;
    tests)
      gpu_tests; r=$?; tail -40 "$OUT/pytest-gpu.log"; rc=$((rc | r)) ;;
    checks)
      # tests, memcheck and racecheck at once (three processes sharing the GPU and the
      # kernel cache): one call's time is the slowest of the three, not their sum
      gpu_tests & t=$!
      sanitizer memcheck & m=$!
      sanitizer racecheck & k=$!
      wait $t; r=$?; tests_said $r; rc=$((rc | r))
      wait $m; r=$?; sanitizer_said memcheck $r; rc=$((rc | r))
      wait $k; r=$?; sanitizer_said racecheck $r; rc=$((rc | r))
      # the three logs in one, without machine paths: the file to commit as
      # docs/benchmarks/experiments/<date>-<device>-<commit>-checks.log
      { echo "# bash scripts/gpu_session.sh checks (tree ${JITMETA_BENCH_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%F))"
        cat "$OUT/device.txt"
        echo "## pytest -m gpu"; cat "$OUT/pytest-gpu.log"
        for tool in memcheck racecheck; do
          echo "## compute-sanitizer $tool"; cat "$OUT/sanitizer-$tool.log"
        done; } | python3 "$repo/bench/records.py" scrub "$repo" > "$OUT/checks.log" ;;
    memcheck|racecheck|sanitize)
      tools=$stage; [ "$stage" = sanitize ] && tools="memcheck racecheck"
      for tool in $tools; do
        sanitizer $tool; r=$?; sanitizer_said $tool $r; rc=$((rc | r))
      done ;;
    bench)
      # < 6 minutes on an H200 in all (each script prints a progress line per case).
      # The records name the commit printed at the top. Both records go to $OUT; copy
      # them to docs/benchmarks/ and run python bench/make_tables.py. A metadata run
      # cut by its timeout leaves a record of its timed rows (meta.partial): for
      # experiments/, not for the tables.
      timeout ${JITMETA_BENCH_TIMEOUT:-270} python3 "$repo/bench/benchmark_metadata.py" --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60
      rc=$((rc | ${PIPESTATUS[0]}))
      timeout ${JITMETA_BENCH_HOST_TIMEOUT:-60} python3 "$repo/bench/benchmark_host.py" --out "$OUT" 2>&1 | tee "$OUT/bench-host.log" | tail -25
      rc=$((rc | ${PIPESTATUS[0]})) ;;
    host)
      # the host record alone (bench/benchmark_host.py, with its breakdown)
      timeout ${JITMETA_BENCH_HOST_TIMEOUT:-60} python3 "$repo/bench/benchmark_host.py" --out "$OUT" 2>&1 | tee "$OUT/bench-host.log" | tail -25
      rc=$((rc | ${PIPESTATUS[0]})) ;;
    configs)
      # chunked launch configurations side by side (bench/compare_configs.py; extra
      # arguments in CONFIGS_ARGS, e.g. "--cases 16777216")
      timeout ${JITMETA_CONFIGS_TIMEOUT:-400} python3 "$repo/bench/compare_configs.py" --out "$OUT" ${CONFIGS_ARGS:-} 2>&1 | tee "$OUT/configs.log" | tail -40
      rc=$((rc | ${PIPESTATUS[0]})) ;;
    hostcmp)
      # host cost per eager call, this version against the one in .before/, the same
      # script (public API only, --no-breakdown), alternating, twice each
      install_before || { rc=1; continue; }
      for i in 1 2; do
        for which in before after; do
          as_version $which timeout 120 python3 "$repo/bench/benchmark_host.py" \
              --no-breakdown --json "$OUT/hostcmp-$which-$i.json" \
              > "$OUT/hostcmp-$which-$i.log" 2>&1
          r=$?; echo "hostcmp $which run $i: exit $r"; grep "^host" "$OUT/hostcmp-$which-$i.log"
          rc=$((rc | r))
        done
      done ;;
    profile)
      # cProfile of eager calls, this version and the one in .before/
      install_before || { rc=1; continue; }
      for which in before after; do
        for extra in "" "--out-arg"; do
          echo "== profile $which $extra"
          as_version $which timeout 120 python3 "$repo/bench/profile_call.py" $extra 2>&1 |
              tee -a "$OUT/profile-$which.log"
        done
      done ;;
    firstprof)
      # cProfile of a fresh process's first call (batch 8192 varlen) with a warm disk
      # cache: the first run fills the cache, the next two are profiled
      for run in warm 1 2; do
        echo "== first call profile $run"
        timeout 120 python3 "$repo/bench/profile_call.py" --first --varlen --batch 8192 \
            --top 40 2>&1 | tee -a "$OUT/firstprof.log" | { [ $run = warm ] && tail -1 || cat; }
      done ;;
    ncu)
      # Nsight Compute over bench/ncu_cases.py, this version and the one in .before/
      # (NCU_VERSIONS=after: this one only; NCU_CASES=--streaming: the large chunked calls,
      # --formats: "sm100" beside "smxx"; NCU_EXTRA: more ncu options, e.g. --metrics)
      versions=${NCU_VERSIONS:-before after}
      case " $versions " in *" before "*) install_before || { rc=1; continue; } ;; esac
      for which in $versions; do
        as_version $which timeout 200 ncu -k regex:jitmeta_emit --section SpeedOfLight \
            --section WarpStateStats --section InstructionStats --section SchedulerStats \
            --section LaunchStats --section SourceCounters ${NCU_EXTRA:-} python3 "$repo/bench/ncu_cases.py" ${NCU_CASES:-} \
            > "$OUT/ncu-$which.txt" 2>&1
        r=$?; echo "ncu $which: exit $r"; grep -E "exact|Duration|Executed Instructions " "$OUT/ncu-$which.txt" | head -40
      done ;;
    phases)
      # where the chunked and static kernels spend their time (bench/phase_trace.py)
      timeout ${JITMETA_PHASES_TIMEOUT:-120} python3 "$repo/bench/phase_trace.py" --out "$OUT" 2>&1 | tee "$OUT/phases.log" | tail -20
      rc=$((rc | ${PIPESTATUS[0]})) ;;
    flagab)
      # NVRTC options A/B: the metadata benchmark (no tuning table) with JITMETA_NVRTC_FLAGS
      # set to FLAGAB_A (default: --Ofast-compile=0, NVRTC's full optimization) and to
      # FLAGAB_B (default: --Ofast-compile=min), each with its own kernel cache,
      # alternating, twice each; a record per run under $OUT/flagab-{a,b}-{1,2}/
      for i in 1 2; do
        for which in a b; do
          flags=${FLAGAB_A:---Ofast-compile=0}
          [ "$which" = b ] && flags=${FLAGAB_B:---Ofast-compile=min}
          mkdir -p "$OUT/flagab-$which-$i"
          JITMETA_NVRTC_FLAGS="$flags" JITMETA_CACHE_DIR=/tmp/jitmeta-cache-flagab-$which \
              timeout 150 python3 "$repo/bench/benchmark_metadata.py" --no-tuning \
              ${FLAGAB_BATCHES:+--batches $FLAGAB_BATCHES} --out "$OUT/flagab-$which-$i" \
              > "$OUT/flagab-$which-$i.log" 2>&1
          r=$?; echo "flagab $which ($flags) run $i: exit $r"; rc=$((rc | r))
        done
      done ;;
    kernelab)
      # kernels A/B: the metadata benchmark (no tuning table) of the version in .before/,
      # of each version in .lab/<commit>/ and of this one, each with its own kernel
      # cache, in turn, KERNELAB_RUNS times each (default 2); a record per run in
      # kernelab-<version>-N/, all packed into $OUT/kernelab.tgz (the device brings back
      # only a few files per call; the logs stay there), and each run's last lines here
      # (KERNELAB_BATCHES: a comma list of batches instead of the default; KERNELAB_FIRST:
      # the number of the first run, default 1, so that a second call on the same warm
      # machine, its cubins already cached, adds runs of its own names). The records
      # name JITMETA_BENCH_COMMIT, the before ones KERNELAB_BEFORE_COMMIT ("before" if
      # unset), a .lab version its folder's name.
      # bench/compare_records.py --before ... --after ... makes their A/B table.
      install_before || { rc=1; continue; }
      labs=$(lab_versions)
      for v in $labs; do install_version "$v" "$repo/.lab/$v" || rc=1; done
      # each version's cubins first, compiled on every core, so that a timed run only
      # loads them (a cold run with 2^24 batches outlasted its timeout); the shapes are
      # the benchmark's own (its batches, next_n values and SM count)
      warm_args=$(python3 -c "import sys; sys.path.insert(0, '$repo/bench')
import benchmark_metadata as b
n = sorted({b.mode_shape(m)[0] for m in b.MODES})
print('--num-sms', b.NUM_SMS, '--batch', ','.join(map(str, b.BATCHES)), '--next-n', ','.join(map(str, n)))")
      [ -n "${KERNELAB_BATCHES:-}" ] && warm_args="$warm_args --batch $KERNELAB_BATCHES"
      for which in before $labs after; do
        as_version $which timeout 300 python3 -m jitmeta.cache_tools.cli warm --device 0 \
            $warm_args --varlen both --format all > /tmp/kernelab-warm-$which.log 2>&1 \
            || { echo "kernelab warm $which failed:"; tail -5 /tmp/kernelab-warm-$which.log; }
      done
      rm -rf /tmp/kernelab && mkdir -p /tmp/kernelab
      first=${KERNELAB_FIRST:-1}
      for i in $(seq $first $((first + ${KERNELAB_RUNS:-2} - 1))); do
        for which in before $labs after; do
          mkdir -p "/tmp/kernelab/kernelab-$which-$i"
          case $which in
            before) commit=${KERNELAB_BEFORE_COMMIT:-before} ;;
            after) commit=${JITMETA_BENCH_COMMIT:-} ;;
            *) commit=$which ;;
          esac
          JITMETA_BENCH_COMMIT=$commit as_version $which timeout ${JITMETA_KERNELAB_TIMEOUT:-150} python3 \
              "$repo/bench/benchmark_metadata.py" --no-tuning \
              ${KERNELAB_BATCHES:+--batches $KERNELAB_BATCHES} --out "/tmp/kernelab/kernelab-$which-$i" \
              > /tmp/kernelab-$which-$i.log 2>&1
          r=$?; echo "kernelab $which run $i: exit $r"; tail -3 /tmp/kernelab-$which-$i.log
          rc=$((rc | r))
          # packed after every run, so that a call cut short still brings back the others
          tar -czf "$OUT/kernelab.tgz" -C /tmp/kernelab .
        done
      done ;;
    launchmodes)
      # the chunked kernel launched cooperatively, as one cluster and plainly, against
      # the empty kernel launched the same ways (bench/launch_modes.py)
      timeout ${JITMETA_LAUNCHMODES_TIMEOUT:-150} python3 "$repo/bench/launch_modes.py" --out "$OUT" 2>&1 | tee "$OUT/launchmodes.log" | tail -20
      rc=$((rc | ${PIPESTATUS[0]})) ;;
    launchcost)
      # host cost of one launch: C through the driver API against cuda.bindings
      # (bench/launch_cost.py builds bench/launch_cost.c with nvcc); and whether this
      # machine could build a C extension (a C compiler and Python's headers)
      timeout 120 python3 "$repo/bench/launch_cost.py" --out "$OUT" 2>&1 | tee "$OUT/launchcost.log" | tail -12
      rc=$((rc | ${PIPESTATUS[0]}))
      { command -v cc gcc; cc --version | head -1
        python3 -c "import os, sysconfig; h = sysconfig.get_paths()['include']; print(h, os.path.exists(h + '/Python.h'))"
      } 2>&1 | tee -a "$OUT/launchcost.log" ;;
    cu12)
      (cd "$repo" && PYTHONPATH= bash scripts/cu12_smoke.sh) 2>&1 | tail -40
      rc=$((rc | ${PIPESTATUS[0]})) ;;
  esac
done
exit $rc
