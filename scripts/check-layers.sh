#!/usr/bin/env bash
# Checks that the folders are layered as the libraries are (README, "Layout"):
#   1. the include graph of the library folders has no cycle (tsort finds one if there is);
#   2. no folder includes a folder that comes after it in the dependency order below;
#   3. no header under harness/runtime/ includes models/ or harness/training/.
# Prints the folder graph; exit 1 on a violation. Run from anywhere in the repository.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"

order=(harness/base harness/device harness/runtime models harness/training harness/sut harness/conformance reports
       properties harness/cli)
folder_of() {  # PATH -> the library folder it belongs to, or nothing
  local p=$1 f
  for f in "${order[@]}"; do [[ $p == "$f"/* ]] && { echo "$f"; return 0; }; done
  return 0
}
rank_of() { local i; for i in "${!order[@]}"; do [[ ${order[$i]} == "$1" ]] && { echo "$i"; return; }; done; }

edges=$(mktemp); trap 'rm -f "$edges"' EXIT
status=0
while IFS= read -r file; do
  from=$(folder_of "$file"); [ -n "$from" ] || continue
  while IFS= read -r inc; do
    to=$(folder_of "$inc"); [ -n "$to" ] || continue
    [ "$to" = "$from" ] && continue
    echo "$from $to" >> "$edges"
    if (( $(rank_of "$to") > $(rank_of "$from") )); then
      echo "layering: $file includes $inc ($to comes after $from)"; status=1
    fi
    if [[ $file == harness/runtime/*.h && ( $to == models || $to == harness/training ) ]]; then
      echo "layering: runtime header $file includes $inc"; status=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files --cached --others --exclude-standard '*.h' '*.cpp' '*.cu')

echo "folder include graph (A -> B: A includes B):"
sort -u "$edges" | sed 's/ / -> /; s/^/  /'
if ! sort -u "$edges" | tsort > /dev/null 2> "$edges.err"; then
  echo "layering: the folder include graph has a cycle:"; cat "$edges.err"; status=1
fi
rm -f "$edges.err"
[ $status -eq 0 ] && echo "layers: ok (no cycle, no folder includes a later one, runtime headers clean)"
exit $status
