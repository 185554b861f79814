#!/bin/sh
# expect_usage_error.sh PATTERN -- COMMAND...: COMMAND must exit 2 and print exactly one line on
# stderr, matching PATTERN (the CLI's contract for bad usage and bad input).
pattern="$1"; shift; [ "$1" = "--" ] && shift
err=$(mktemp)
"$@" >/dev/null 2>"$err"
rc=$?
lines=$(wc -l < "$err")
text=$(cat "$err"); rm -f "$err"
[ "$rc" -eq 2 ] || { echo "exit code $rc, expected 2: $text"; exit 1; }
[ "$lines" -eq 1 ] || { echo "$lines lines on stderr, expected 1: $text"; exit 1; }
echo "$text" | grep -Eq "$pattern" || { echo "stderr does not match '$pattern': $text"; exit 1; }
echo "ok: $text"
