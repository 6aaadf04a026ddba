#!/usr/bin/env bash
# One libFuzzer target as a ctest test: replays CORPUS_DIR, then runs RUNS inputs in all from
# seed 1. Inputs it finds go to a scratch directory that is thrown away, so the committed corpus
# only changes by hand and every run starts from the same place; a crash input is written to the
# working directory (crash-<sha1>), to be added to CORPUS_DIR once its bug is fixed.
#
#   run_fuzz_target.sh BINARY CORPUS_DIR RUNS [libFuzzer flags...]
set -euo pipefail
binary=$1 corpus=$2 runs=$3
shift 3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$binary" -seed=1 -runs="$runs" -timeout=20 -artifact_prefix="$PWD/" -print_final_stats=1 "$@" \
  "$scratch" "$corpus"
