#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds (default 60), starting from the committed seeds in
# seeds/TARGET and growing the corpus in corpus/TARGET. Needs nightly and cargo-fuzz:
#   rustup toolchain install nightly && cargo install cargo-fuzz
# Prints, per target, the executions, the corpus size and whether anything was found.
# A crash leaves its input in artifacts/TARGET/; turn it into a regression test.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
targets=(request_head chunked_body connection ws_frame ws_inflate)
mkdir -p logs
cargo +nightly fuzz build -s none
status=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    if cargo +nightly fuzz run -s none "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$secs" -print_final_stats=1 -max_len=4096 >"logs/$target.log" 2>&1; then
        result="no findings"
    else
        result="FOUND A CRASH (see logs/$target.log and artifacts/$target/)"
        status=1
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$target.log" | grep -o '[0-9]*$' || echo "?")
    corpus=$(ls "corpus/$target" | wc -l)
    printf '%-14s %ss  %12s executions  %6s corpus entries  %s\n' "$target" "$secs" "$runs" "$corpus" "$result"
done
exit $status
