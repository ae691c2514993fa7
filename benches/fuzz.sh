#!/usr/bin/env bash
# Runs each cargo-fuzz target (fuzz/fuzz_targets/) for SECONDS seconds and prints the
# executions per target. A crash stops that target, keeps its input under
# fuzz/artifacts/<target>/ and makes the script exit non-zero; once fixed, copy the input
# to fuzz/regressions/<target>/ so `cargo test -p memlane-core` replays it.
#
#   benches/fuzz.sh [SECONDS] [TARGET...]     (default: 60 s, every target)
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The corpus
# grows under fuzz/corpus/ (not committed), starting from fuzz/seeds/.
set -euo pipefail

seconds="${1:-60}"
shift || true
cd "$(dirname "$0")/../fuzz"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(hnsw_snapshot bm25_snapshot engine_snapshot analyzer filter)
fi

# -a: debug assertions, so an integer overflow panics instead of wrapping.
cargo +nightly fuzz build -O -a >/dev/null
failed=0
printf '%-18s %12s %10s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "seeds/$t"
    log="$(mktemp)"
    status=ok
    # -rss_limit_mb: a hostile length must fail cleanly, not allocate gigabytes.
    if ! cargo +nightly fuzz run -O -a "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"$log" 2>&1; then
        status="CRASH (see fuzz/artifacts/$t/)"
        failed=1
        grep -m5 -E "panicked|ERROR|SUMMARY" "$log" >&2 || tail -20 "$log" >&2
    fi
    runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)"
    printf '%-18s %12s %10s  %s\n' "$t" "$runs" "$((runs / seconds))" "$status"
    rm -f "$log"
done
exit "$failed"
