#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, in build-fuzz), runs each for
# a while, prints executions and crashes per target, and writes the table to docs/reliability.md
# ("Fuzzing"). Usage: scripts/fuzz.sh [--time SECONDS | --runs N] [target...]
# (default: 60 s, every target; --runs: until N inputs ran, however long that takes — the long run)
#
# What a run finds (crash-*, leak-*, timeout-*, oom-* inputs) lands in
# build-fuzz/tests/fuzz/work/<target>/; new coverage in .../work/<target>/corpus. A crashing input,
# once fixed, belongs in tests/fuzz/corpus/<target>/ as a regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
runs=0
targets=()
while (($#)); do
  case $1 in
    --time) seconds=$2; shift 2 ;;
    --time=*) seconds=${1#--time=}; shift ;;
    --runs) runs=$2; shift 2 ;;
    --runs=*) runs=${1#--runs=}; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  echo "fuzz: --time takes a whole number of seconds, not '$seconds'" >&2
  exit 2
fi
if ! [[ $runs =~ ^[0-9]+$ ]]; then
  echo "fuzz: --runs takes a whole number of inputs, not '$runs'" >&2
  exit 2
fi
all=()
for f in tests/fuzz/*_fuzz.cc; do
  name=$(basename "$f" _fuzz.cc)
  all+=("$name")
done
if ((${#targets[@]} == 0)); then targets=("${all[@]}"); fi
for t in "${targets[@]}"; do
  if [[ ! -f tests/fuzz/${t}_fuzz.cc ]]; then
    echo "fuzz: no target '$t' (targets: ${all[*]})" >&2
    exit 2
  fi
done

scripts/setup.sh
build_dir=${PHOS_FUZZ_BUILD_DIR:-build-fuzz}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DPHOS_FUZZ=ON -DPHOS_WITH_CUDA=OFF -DPHOS_BUILD_BENCH=OFF >/dev/null
cmake --build "$build_dir" -j2 --target fuzz_targets phos-simgpu

results=$(mktemp)
trap 'rm -f "$results"' EXIT
failed=0
for t in "${targets[@]}"; do
  work=$build_dir/tests/fuzz/work/$t
  mkdir -p "$work/corpus"
  if ((runs > 0)); then
    args=(-runs="$runs" -print_final_stats=1 -timeout=60 -artifact_prefix="$work/")
  else
    args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=60 -artifact_prefix="$work/")
  fi
  [[ -f tests/fuzz/$t.dict ]] && args+=(-dict="tests/fuzz/$t.dict")
  command="$build_dir/bin/fuzz_$t ${args[*]} $work/corpus tests/fuzz/corpus/$t"
  before=$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  if ((runs > 0)); then echo "fuzz: $t for $runs inputs"; else echo "fuzz: $t for ${seconds} s"; fi
  status=0
  started=$(date +%s)
  "$build_dir/bin/fuzz_$t" "${args[@]}" "$work/corpus" "tests/fuzz/corpus/$t" >"$work/last.log" 2>&1 || status=$?
  elapsed=$(($(date +%s) - started))
  after=$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  # libFuzzer's final statistics; "Done N runs" when it ended by the clock without them.
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$work/last.log" | tail -1)
  [[ -n $execs ]] || execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$work/last.log" | tail -1)
  [[ -n $execs ]] || execs=0
  crashes=$((after - before))
  if ((status != 0 && crashes == 0)); then crashes=1; fi
  if ((crashes != 0)); then
    failed=1
    echo "fuzz: $t: $crashes crash(es); see $work/last.log" >&2
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$elapsed" "$execs" "$crashes" "$command" >>"$results"
done

printf '\n%-16s %8s %14s %8s\n' target seconds executions crashes
while IFS=$'\t' read -r t s e c _; do printf '%-16s %8s %14s %8s\n' "$t" "$s" "$e" "$c"; done <"$results"

# The tables in docs/reliability.md, one for the timed runs and one for the long runs (--runs):
# rows of the targets run now replace their earlier rows; the others stay as they are.
if ((runs > 0)); then table=fuzz-long-table; else table=fuzz-table; fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then commit="$commit+changes"; fi
python3 - "$results" "$table" "$commit" <<'PY'
import datetime, os, sys
results, table_name, commit = sys.argv[1:4]
path = "docs/reliability.md"
begin, end = f"<!-- {table_name}:begin -->", f"<!-- {table_name}:end -->"
text = open(path).read() if os.path.exists(path) else "# Reliability\n"
if begin not in text:
    text = text.rstrip("\n") + "\n\n" + begin + "\n" + end + "\n"
head, rest = text.split(begin, 1)
table, tail = rest.split(end, 1)
rows = {}
for line in table.strip().splitlines()[2:]:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 7:
        rows[cells[0].strip("`")] = cells
today = datetime.date.today().isoformat()
for line in open(results):
    t, s, e, c, cmd = line.rstrip("\n").split("\t")
    rows[t] = [f"`{t}`", f"{int(e):,}", c, f"{int(s):,}", today, f"`{commit}`", f"`{cmd}`"]
out = ["| target | executions | crashes | seconds | date | commit | command |", "|---|---:|---:|---:|---|---|---|"]
for t in sorted(rows):
    out.append("| " + " | ".join(rows[t]) + " |")
open(path, "w").write(head + begin + "\n" + "\n".join(out) + "\n" + end + tail)
print(f"fuzz: table written to {path}")
PY
exit "$failed"
