#!/usr/bin/env bash
# The nightly's merge step (.github/workflows/fxfuzz.yml): one report from the shards' report
# folders.
#
#   fxfuzz-merge.sh REPORTS OUT
#
# REPORTS holds one report folder per shard, as actions/download-artifact writes them: a
# sub-folder per artifact, or, when a single artifact matched, that artifact's files
# themselves. A shard folder without report.json (its campaign never got to write one) is
# left out with a warning. Exit status is fxfuzz merge's: 0 no new finding, 1 new findings,
# 2 folders that cannot be merged, 3 nothing tested, 4 the merged folder not written in full. report.md is appended to the job
# summary when GITHUB_STEP_SUMMARY is set.
set -uo pipefail
reports=$1 out=$2

folders=()
if [ -f "$reports/report.json" ]; then
  folders=("$reports")
else
  for d in "$reports"/*/; do
    if [ -f "$d/report.json" ]; then
      folders+=("${d%/}")
    elif [ -d "$d" ]; then
      echo "fxfuzz-merge: ${d%/} holds no report.json: left out" >&2
    fi
  done
fi
if [ ${#folders[@]} -eq 0 ]; then
  echo "fxfuzz-merge: no shard report folder under $reports" >&2
  exit 2
fi

status=0
fxfuzz merge "${folders[@]}" --report-dir "$out" || status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/report.md" ]; then
  cat "$out/report.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
