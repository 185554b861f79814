#!/usr/bin/env bash
# Checks that the folders are layered as the libraries are (README, "Layout"):
#   1. the include graph of the library folders has no cycle (tsort finds one if there is);
#   2. no folder includes a folder that comes after it in the dependency order below;
#   3. no header under harness/runtime/ includes models/ or harness/training/;
#   4. the Python drivers (drivers/recap_drivers) import in layer order: case, then core/ (no
#      framework, mutant or CLI module), then each framework package (core and case only, never
#      another framework), mutants/ (no core or framework module); only __main__ imports them all.
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

# 4. the drivers' module layering, read from each module's imports (relative ones resolved)
if ! python3 - drivers/recap_drivers <<'PY'
import ast, os, sys
root = sys.argv[1]
# the packages a module of each layer may import (besides the standard library and itself)
allowed = {"case": ["case"], "core": ["case", "core"], "frameworks.torch": ["case", "core", "frameworks.torch"],
           "frameworks.megatron": ["case", "core", "frameworks.megatron"], "mutants": ["mutants"]}
bad = 0
for dirpath, _, files in os.walk(root):
    for f in sorted(files):
        if not f.endswith(".py"):
            continue
        path = os.path.join(dirpath, f)
        mod = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
        layer = next((k for k in sorted(allowed, key=len, reverse=True) if mod == k or mod.startswith(k + ".")), None)
        if layer is None:
            continue  # __init__, __main__: the package's doc and the CLI
        pkg = mod.split(".")[:-1]
        for node in ast.walk(ast.parse(open(path).read(), path)):
            names = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg[:len(pkg) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                    names = [target + "." + a.name if not node.module else target for a in node.names]
                    # the package's own constants (recap_drivers.PROTOCOL) are no module
                    names = [n for n in names if os.path.exists(os.path.join(root, *n.strip(".").split("."))) or
                             os.path.exists(os.path.join(root, *n.strip(".").split(".")) + ".py") or "." in n.strip(".")]
                elif node.module and node.module.startswith("recap_drivers"):
                    names = [node.module[len("recap_drivers."):]]
            elif isinstance(node, ast.Import):
                names = [a.name[len("recap_drivers."):] for a in node.names if a.name.startswith("recap_drivers.")]
            for n in names:
                n = n.strip(".")
                if n and not any(n == a or n.startswith(a + ".") for a in allowed[layer]):
                    print(f"layering: drivers/recap_drivers/{mod.replace('.', '/')}.py imports {n} ({layer} may import "
                          f"{', '.join(allowed[layer])})")
                    bad = 1
sys.exit(bad)
PY
then status=1
fi
[ $status -eq 0 ] && echo "layers: ok (no cycle, no folder includes a later one, runtime headers clean, drivers layered)"
exit $status
