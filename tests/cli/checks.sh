#!/bin/sh
# checks.sh NAME RECAP WORKDIR SCHEMA SRCDIR: the fuzz/replay/gate checks of tests/cli/CMakeLists.txt.
set -u
name="$1"; recap="$2"; work="$3"; schema="$4"; src="$5"
rm -rf "$work"; mkdir -p "$work"; cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

# A python3 with jsonschema (Debian: python3-jsonschema); exit 77 (skipped) where there is none.
pyjs() {
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import jsonschema' 2>/dev/null; then echo "$p"; return; fi
  done
}
validate_report() {  # FILE
  py=$(pyjs)
  if [ -z "$py" ]; then echo "no python3 with jsonschema: cannot validate $1"; exit 77; fi
  "$py" - "$schema" "$1" <<'PY' || fail "$1 does not validate against the schema"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
jsonschema.validate(json.load(open(sys.argv[2])), schema, cls=jsonschema.Draft202012Validator)
print("report validates:", sys.argv[2])
PY
}
# JUnit structure as the JUnit XSD (Jenkins/Ant) requires it: well-formed; <testsuites> of
# <testsuite name tests failures errors time> whose counts match their <testcase name classname
# time> children; a <failure>/<error> has message and type.
check_junit() {  # FILE
  if command -v xmllint >/dev/null 2>&1; then xmllint --noout "$1" || fail "$1 is not well-formed XML"; fi
  py=$(command -v /usr/bin/python3 || command -v python3)
  [ -n "$py" ] || { echo "no python3 to check $1"; exit 77; }
  "$py" - "$1" <<'PY' || fail "$1: JUnit structure"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
suites = root.findall("testsuite")
assert suites, "no testsuite"
for s in suites:
    for a in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname", "id", "package"):
        assert a in s.attrib, f"testsuite lacks {a}"
    cases = s.findall("testcase")
    assert int(s.get("tests")) == len(cases), "tests count"
    assert int(s.get("failures")) == sum(1 for c in cases if c.find("failure") is not None), "failures count"
    assert int(s.get("errors")) == sum(1 for c in cases if c.find("error") is not None), "errors count"
    float(s.get("time"))
    for c in cases:
        for a in ("name", "classname", "time"):
            assert a in c.attrib, f"testcase lacks {a}"
        for f in list(c.findall("failure")) + list(c.findall("error")):
            assert "message" in f.attrib and "type" in f.attrib, "failure lacks message/type"
print("junit ok:", sys.argv[1], len(suites), "suites")
PY
}

case "$name" in
fuzz_graph_safe_holds)
  "$recap" fuzz --backend sim --policy graph-safe --seed 3 --cases 100 --corpus-dir found > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || fail "exit $rc"
  grep -q "by disposition: passed" out.txt || fail "no disposition counts"
  grep -q "cases/min" out.txt || fail "no throughput"
  grep -q "checkpoint+capture+dropout" out.txt || fail "no classification"
  ! grep -q "$(printf '\r')" err.txt || fail "progress line when not a terminal"
  ;;
fuzz_naive_finds_and_replays)
  "$recap" fuzz --backend sim --policy naive --seed 3 --cases 50 --corpus-dir found --report r.json > out.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || fail "exit $rc, expected 1"
  file=$(ls found/capture-clean-failed-*.json 2>/dev/null | head -1)
  [ -n "$file" ] || fail "no capture_clean counterexample written"
  grep -q "replay:  recap replay $file" out.txt || fail "replay command not printed"
  grep -q '"error": "cudaErrorStreamCaptureUnsupported"' "$file" || fail "expected error not recorded"
  grep -q 'RC_PARAMS=' "$file" || fail "no reproduce string in the corpus file"
  grep -q 'RC_PARAMS=' r.json || fail "no reproduce string in the report"
  layers=$(python3 -c "import json,sys; d=json.load(open('$file')); print(len(d['layers']), d['layers'][0]['checkpoint'], d.get('executor'))")
  echo "shrunk: $layers"
  case "$layers" in "1 full"*) ;; *) fail "not shrunk to one checkpointed layer: $layers" ;; esac
  "$recap" replay --backend sim "$file" || fail "replay does not reproduce $file"
  # Same campaign again: the same file name (content-derived).
  "$recap" fuzz --backend sim --policy naive --seed 3 --cases 50 --corpus-dir found2 > /dev/null
  [ -f "found2/$(basename "$file")" ] || fail "file name not stable across runs"
  ;;
fuzz_same_seed_same_report)
  # graph-safe: the campaign runs all 50 cases (a drawn policy stops at its first counterexample,
  # whose shrinking is then compared too: the second pair).
  "$recap" fuzz --backend sim --policy graph-safe --seed 7 --cases 50 --corpus-dir f1 --report a.json > /dev/null
  "$recap" fuzz --backend sim --policy graph-safe --seed 7 --cases 50 --corpus-dir f2 --report b.json > /dev/null
  "$recap" fuzz --backend sim --seed 7 --cases 50 --corpus-dir f3 --report c.json > /dev/null
  "$recap" fuzz --backend sim --seed 7 --cases 50 --corpus-dir f4 --report d.json > /dev/null
  # The same bytes once what may differ between runs is removed (scripts/report-canon.py).
  py=$(command -v /usr/bin/python3 || command -v python3)
  canon="$src/scripts/report-canon.py"
  for x in a b c d; do "$py" "$canon" $x.json > $x.canon || fail "$x.json: cannot read the report"; done
  "$py" -c 'import json,sys; n=json.load(open(sys.argv[1]))["summary"]["cases"]; assert n == 50, n' a.canon || fail "50 cases expected"
  cmp -s a.canon b.canon || { diff a.canon b.canon | head -20; fail "reports differ"; }
  cmp -s c.canon d.canon || { diff c.canon d.canon | head -20; fail "reports of the drawn-policy campaign differ"; }
  echo "identical: graph-safe $(grep -c '"spec"' a.canon) cases; drawn policy $(grep -c '"spec"' c.canon) cases"
  cmp -s f3/*.json f4/*.json 2>/dev/null || [ -z "$(ls f3)" ] || fail "counterexample files differ"
  ;;
fuzz_jobs_and_crash_isolation)
  "$recap" fuzz --backend sim --policy graph-safe --seed 5 --cases 400 --jobs 2 --corpus-dir found --report j.json > out.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || fail "--jobs 2: exit $rc"
  grep -q "recap fuzz: 400 cases" out.txt || fail "--jobs 2 did not merge 400 cases"
  RECAP_FAULT_ABORT=1:3 "$recap" fuzz --backend sim --policy graph-safe --seed 5 --cases 400 --jobs 2 --corpus-dir found --report c.json > out2.txt 2> err2.txt
  rc=$?; cat out2.txt
  [ "$rc" -eq 1 ] || fail "injected abort: exit $rc, expected 1"
  grep -q "crashed: shard 1/2 died of signal 6" out2.txt || fail "crash not recorded"
  grep -q "crashed 1" out2.txt || fail "crashed not counted"
  grep -q "passed 200" out2.txt || fail "the other shard's 200 cases did not go on"
  validate_report c.json
  ;;
fuzz_property_selects)
  # One property: every case's checks are that property's alone, in process and through --jobs 2
  # workers; the report's context records the selection.
  py=$(command -v /usr/bin/python3 || command -v python3)
  for jobs in 1 2; do
    "$recap" fuzz --backend sim --property eager_vs_graphed --policy graph-safe --cases 200 --seed 1 --jobs $jobs \
      --corpus-dir found --report p$jobs.json > out.txt || fail "--property eager_vs_graphed --jobs $jobs: exit $?"
    "$py" - p$jobs.json <<'PY' || fail "checks other than eager_vs_graphed (--jobs $jobs)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["context"]["properties"] == ["eager_vs_graphed"], r["context"]
props = {c["property"] for case in r["cases"] for c in case["checks"]}
judged = sum(c["disposition"] == "passed" for case in r["cases"] for c in case["checks"])
assert props == {"eager_vs_graphed"}, props
assert len(r["cases"]) == 200 and judged > 100, (len(r["cases"]), judged)
print("only eager_vs_graphed:", judged, "of", len(r["cases"]), "cases compared")
PY
  done
  ;;
fuzz_sut_worker_same_report)
  # recap's runtime through `recap worker` processes (the worker protocol) gives the report the
  # in-process runtime gives: a graph-safe campaign, a drawn-policy one with its shrunk
  # counterexample, both through --jobs 2 as well, and the corpus replayed.
  py=$(command -v /usr/bin/python3 || command -v python3)
  canon="$src/scripts/report-canon.py"
  same() {  # A.json B.json WHAT
    "$py" "$canon" "$1" > "$1.canon" && "$py" "$canon" "$2" > "$2.canon" || fail "$3: cannot read the reports"
    cmp -s "$1.canon" "$2.canon" || { diff "$1.canon" "$2.canon" | head -20; fail "$3: the worker's report differs"; }
    echo "same report: $3 ($(grep -c '"spec"' "$1.canon") case reports)"
  }
  for policy in "--policy graph-safe" ""; do
    "$recap" fuzz --backend sim $policy --seed 7 --cases 60 --corpus-dir p --report p.json > /dev/null
    "$recap" fuzz --backend sim --sut recap-worker $policy --seed 7 --cases 60 --corpus-dir w --report w.json > /dev/null
    "$recap" fuzz --backend sim --sut recap-worker --jobs 2 $policy --seed 7 --cases 60 --corpus-dir wj --report wj.json > /dev/null
    same p.json w.json "fuzz ${policy:-drawn policy}"
    "$py" "$canon" p.json | grep -q '"disposition": "crashed"' && fail "a crashed case in process"
  done
  "$recap" replay --backend sim "$src"/corpus/*.json --report rp.json > /dev/null
  "$recap" replay --backend sim --sut recap-worker "$src"/corpus/*.json --report rw.json > /dev/null || fail "corpus through the worker"
  same rp.json rw.json "corpus replay"
  ;;
fuzz_sut_worker_crash_is_a_case)
  # A worker that aborts, or answers with garbage, makes that case `crashed` with a one-line
  # reason; the campaign completes (exit 1, report written) and the next case gets a new worker
  # (the fault fires once: the shrinking that follows runs on clean workers).
  for fault in abort garbage; do
    RECAP_FAULT_WORKER=$fault@4:$PWD/fired-$fault "$recap" fuzz --backend sim --sut recap-worker --policy graph-safe --seed 1 --cases 30 \
      --corpus-dir f$fault --report f$fault.json > out.txt; rc=$?
    [ "$rc" -eq 1 ] || { cat out.txt; fail "$fault: exit $rc, expected 1"; }
    grep -q "crashed 1" out.txt || { cat out.txt; fail "$fault: no crashed case"; }
    case $fault in
      abort) grep -q "the worker died of signal 6" out.txt || { cat out.txt; fail "abort: the reason does not name the signal"; } ;;
      garbage) grep -q "a header that is not JSON: 'garbage instead of an observation'" out.txt || { cat out.txt; fail "garbage: reason"; } ;;
    esac
    [ -s f$fault.json ] || fail "$fault: no report"
  done
  echo "both faults: crashed, one line, report written"
  ;;
sut_torch_eager)
  # PyTorch through its driver (drivers/recap_drivers), eagerly on the CPU: recap sends the case's
  # parameters and data, judges torch's run by the same oracles; torch's checkpoint recomputes the
  # forward masks (rng_ledger from the masks it reports) and the no-checkpoint gradients bit for
  # bit. Skipped (77) where torch is not importable.
  py=${RECAP_PYTHON:-python3}
  "$py" -c 'import torch' 2>/dev/null || { echo "no torch for $py: skipped"; exit 77; }
  "$recap" replay --sut torch --backend sim "$src/tests/cli/data/torch-naive-eager.json" --report t.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "exit $rc"; }
  grep -q "recompute_on_off  passed" out.txt || fail "recompute_on_off did not pass"
  grep -q "rng_ledger        passed" out.txt || fail "rng_ledger did not pass"
  grep -q "reference         skipped" out.txt || fail "the reference should say why it skips"
  ;;
fuzz_shards_merge)
  "$recap" fuzz --backend sim --policy graph-safe --seed 9 --cases 300 --shard 0/2 --corpus-dir s0 --report s0.json > /dev/null; r0=$?
  GTEST_SHARD_INDEX=1 GTEST_TOTAL_SHARDS=2 "$recap" fuzz --backend sim --policy graph-safe --seed 9 --cases 300 --corpus-dir s1 --report s1.json > /dev/null; r1=$?
  "$recap" fuzz --backend sim --policy graph-safe --seed 9 --cases 300 --corpus-dir all --report all.json > /dev/null; ra=$?
  echo "exit codes $r0 $r1 $ra"
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$py" - <<'PY' || fail "shards do not add up to the campaign"
import json
s0, s1, al = (json.load(open(p)) for p in ("s0.json", "s1.json", "all.json"))
n = s0["summary"]["cases"] + s1["summary"]["cases"]
assert n == al["summary"]["cases"] == 300, n
strip = lambda cs: sorted(json.dumps(c["spec"], sort_keys=True) for c in cs)
assert strip(s0["cases"] + s1["cases"]) == strip(al["cases"])
print("shards merge:", s0["summary"]["cases"], "+", s1["summary"]["cases"])
PY
  mkdir -p merged; cp s0/*.json s1/*.json merged/ 2>/dev/null
  for f in all/*.json; do [ -e "$f" ] || continue; [ -f "merged/$(basename "$f")" ] || fail "corpus of the shards lacks $(basename "$f")"; done
  ;;
gate_junit_and_report)
  cd "$src" || exit 1
  "$recap" gate --backend sim --corpus-dir "$work/found" --junit "$work/gate.xml" --report "$work/gate.json" > "$work/out.txt"
  rc=$?; cat "$work/out.txt"; cd "$work"
  check_junit gate.xml
  grep -q 'classname="recap.corpus"' gate.xml || fail "no corpus test cases"
  grep -q 'name="capture_clean" classname="recap.properties"' gate.xml || fail "no property test cases"
  grep -q 'classname="recap.coverage"' gate.xml || fail "no coverage test cases"
  if grep -q '<failure' gate.xml; then grep -q 'message="[^"]*replay: recap replay ' gate.xml || fail "failure without replay command"; fi
  validate_report gate.json
  [ "$rc" -eq 0 ] || fail "gate exit $rc"
  ;;
report_nonfinite_and_schema)
  "$recap" replay --backend sim "$src/corpus/naive-capture-failure-min.json" --report r.json > /dev/null || fail "replay"
  validate_report r.json
  py=$(pyjs)
  "$py" - "$schema" <<'PY' || fail "the schema accepts null for a number"
import json, sys, jsonschema
s = json.load(open(sys.argv[1]))
v = jsonschema.Draft202012Validator({"$ref": "#/$defs/real", "$defs": s["$defs"]})
assert v.is_valid("nan") and v.is_valid("-inf") and v.is_valid(1.5)
assert not v.is_valid(None) and not v.is_valid("NaN")
print("non-finite numbers: explicit strings only")
PY
  ;;
*) fail "unknown check $name" ;;
esac
echo "ok: $name"
