#!/usr/bin/env bash
# One step of `make setup`, said in one line:
#
#   deploy/setup-step.sh "Delta jars (.venv)" .venv/bin/python -m framework.session
#
# prints "setup: Delta jars (.venv) ... ok (12 s)" (and the lines of its output that begin
# "warning: ") and appends the command's whole output
# (stdout and stderr: pip's, Ivy's resolver report, Maven's) to the setup log,
# $MEDALLION_SETUP_LOG (default: build/setup.log of this repository). A step that fails prints
# "failed (exit N)", then the last lines of its output and the log's path on stderr, and exits
# with the command's code (make stops there). A command with shell syntax (||, >) is given as
# `sh -c '...'`.
set -uo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 TITLE COMMAND [ARGUMENT...]" >&2
  exit 2
fi
title=$1
shift
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log="${MEDALLION_SETUP_LOG:-$repo/build/setup.log}"
tail_lines="${MEDALLION_SETUP_TAIL:-40}"
mkdir -p "$(dirname "$log")"

printf 'setup: %s ... ' "$title"
output="$(mktemp "${TMPDIR:-/tmp}/setup-step.XXXXXX")"
trap 'rm -f "$output"' EXIT
started=$SECONDS
"$@" > "$output" 2>&1 < /dev/null
code=$?
took=$((SECONDS - started))
{
  printf '\n== %s  %s (exit %d, %d s)\n$' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$title" "$code" "$took"
  printf ' %q' "$@"
  printf '\n'
  cat "$output"
} >> "$log"

if [[ $code -eq 0 ]]; then
  echo "ok ($took s)"
  # what the step warns of is said here too (the log has the rest)
  grep -E '^(warning|WARNING): ' "$output" | sed 's/^/  /'
  exit 0
fi
echo "failed (exit $code)"
lines=$(wc -l < "$output")
if [[ $lines -gt $tail_lines ]]; then
  echo "setup: the last $tail_lines of its $lines lines:" >&2
fi
tail -n "$tail_lines" "$output" >&2
echo "setup: its whole output is in $log" >&2
exit "$code"
