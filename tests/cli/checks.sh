#!/bin/sh
# checks.sh NAME RECAP WORKDIR SCHEMA SRCDIR: the fuzz/replay/gate checks of tests/cli/CMakeLists.txt.
set -u
name="$1"; recap="$2"; work="$3"; schema="$4"; src="$5"
rm -rf "$work"; mkdir -p "$work"; cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
# FILE PATTERN WHAT: a line of FILE matches PATTERN, runs of spaces squeezed on both sides
# (replay's property column widens to its longest name)
expect() { tr -s ' ' < "$1" | grep -q "$(printf '%s' "$2" | tr -s ' ')" || fail "$3 (no line '$2' in $1)"; }
# A planted rank fault (RECAP_RANK_FAULT) caught: `recap replay` of the files under it exits 1, each
# of ORACLES (comma-separated) is incorrect in FAULT.txt, and passed in the clean run's clean.txt.
rank_fault_caught() {  # FAULT ORACLES PROPERTIES FILE...
  local fault=$1 oracles=$2 props=$3 oracle rc; shift 3
  "$recap" replay --sut torch --backend sim "$@" --property "$props" --worker-env "RECAP_RANK_FAULT=$fault" \
    > "$fault.txt" 2> err.txt
  rc=$?; echo "== $fault: exit $rc"; cat "$fault.txt"
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "$fault: exit $rc, expected 1"; }
  for oracle in $(echo "$oracles" | tr , ' '); do
    grep -Eq "^  $oracle +incorrect" "$fault.txt" || fail "$fault: $oracle did not fail"
    grep -Eq "^  $oracle +passed" clean.txt || fail "$oracle did not pass on the clean run"
  done
}
# Each FAULT:ORACLES:FILEVAR caught by rank_fault_caught with PROPERTIES, on the file the shell
# variable FILEVAR holds.
rank_faults_caught() {  # PROPERTIES SPEC...
  local props=$1 f rest file; shift
  for f in "$@"; do
    rest=${f#*:}; eval "file=\$${rest#*:}"
    rank_fault_caught "${f%%:*}" "${rest%%:*}" "$props" "$file"
  done
}
# The clean run of a rank check: `recap replay --sut torch --backend sim ARGS...`, its report in
# clean.json and its table in clean.txt (what rank_fault_caught compares with); exit 0 expected.
clean_replay() {  # ARGS...
  "$recap" replay --sut torch --backend sim "$@" --report clean.json > clean.txt 2> err.txt
  local rc=$?; cat clean.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "clean: exit $rc"; }
}
# The one counterexample a rank fuzz check wrote under found/ (its path left in $cx): PROPERTY is
# incorrect when it is replayed under the rank fault FAULT, and passed without it.
counterexample_replays() {  # FAULT PROPERTY
  set -- "$1" "$2" found/*.json
  [ "$#" -eq 3 ] && [ -f "$3" ] || { shift 2; fail "expected one corpus file, found: $*"; }
  cx=$3
  "$recap" replay --sut torch --backend sim "$cx" --property "$2" --worker-env "RECAP_RANK_FAULT=$1" > again.txt 2> err.txt
  local rc=$?; cat again.txt
  grep -Eq "^  $2 +incorrect" again.txt || fail "the replay did not reproduce it (exit $rc)"
  "$recap" replay --sut torch --backend sim "$cx" --property "$2" > clean.txt 2> err.txt
  rc=$?; cat clean.txt
  grep -Eq "^  $2 +passed" clean.txt || fail "without the fault the counterexample should pass (exit $rc)"
}
# The torch checks: skipped (77) where $RECAP_PYTHON (CMake: the drivers' interpreter) has no
# torch, failed where RECAP_REQUIRE_TORCH is set (scripts/bootstrap.sh test, so CI).
# A field of a report's first case ("first") or first counterexample ("found"), or of a case file
# ("file"), with $py; 1 where absent (tp, pp and vp are not written at 1).
field() {  # JSON-FILE KEY FIELD
  "$py" - "$1" "$2" "$3" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
if sys.argv[2] == "first": j = j["cases"][0]["spec"]
elif sys.argv[2] == "found": j = j["summary"]["failures"][0]["case"]
print(j.get(sys.argv[3], 1))
PY
}
need_torch() {  # PYTHON
  "$1" -c 'import torch' 2>/dev/null && return
  [ -z "${RECAP_REQUIRE_TORCH:-}" ] || fail "RECAP_REQUIRE_TORCH is set but $1 cannot import torch"
  echo "no torch for $1: skipped"; exit 77
}

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
  # The file and the report name the system under test that found it.
  python3 - "$file" r.json <<'PY' || fail "the system under test is not recorded"
import json, sys
f, r = (json.load(open(p)) for p in sys.argv[1:])
assert f["sut"] == {"name": "recap", "version": "0.1.0"}, f.get("sut")
assert r["context"]["sut"] == {"name": "recap", "version": "0.1.0", "device": "sim"}, r["context"].get("sut")
PY
  # Same campaign again: the same file name (content-derived).
  "$recap" fuzz --backend sim --policy naive --seed 3 --cases 50 --corpus-dir found2 > /dev/null
  [ -f "found2/$(basename "$file")" ] || fail "file name not stable across runs"
  ;;
fuzz_report_independent_of_jobs)
  # The same seed gives the same report and corpus with --jobs 1, 2 and 4: cases in case order,
  # one counterexample per bucket from the lowest chunk, bucket counts and finding tallies summed
  # (a drawn policy, with counterexamples; the skip policy, with memory findings).
  py=$(command -v /usr/bin/python3 || command -v python3)
  canon="$src/scripts/report-canon.py"
  for policy in "" "--policy skip"; do
    for j in 1 2 4; do
      "$recap" fuzz --backend sim $policy --seed 7 --cases 450 --shrink-limit 5 --jobs $j --corpus-dir c$j --report r$j.json > /dev/null
      "$py" "$canon" r$j.json > r$j.canon || fail "r$j.json: cannot read the report"
    done
    for j in 2 4; do
      cmp -s r1.canon r$j.canon || { diff r1.canon r$j.canon | head -20; fail "${policy:-drawn policy}: --jobs $j report differs"; }
      { [ ! -e c1 ] && [ ! -e c$j ]; } || diff -r c1 c$j > /dev/null || fail "${policy:-drawn policy}: --jobs $j corpus differs"
    done
    "$py" -c 'import json,sys; s=json.load(open(sys.argv[1]))["summary"]; assert s["cases"] == 450 and (s["failures"] or s["findings"]), s["cases"]; print(sys.argv[2], len(s["failures"]), "counterexamples,", s["findings"])' r1.json "${policy:-drawn}" ||
      fail "vacuous: nothing found"
    rm -rf c1 c2 c4
  done
  # --chunk-cases: another chunk size, the same independence of --jobs; the size is in the context
  for j in 1 2 4; do
    "$recap" fuzz --backend sim --seed 7 --cases 450 --chunk-cases 30 --shrink-limit 5 --jobs $j --corpus-dir k$j --report k$j.json > /dev/null
    "$py" "$canon" k$j.json > k$j.canon || fail "k$j.json: cannot read the report"
  done
  for j in 2 4; do
    cmp -s k1.canon k$j.canon || { diff k1.canon k$j.canon | head -20; fail "--chunk-cases 30: --jobs $j report differs"; }
  done
  "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; assert r["context"]["chunk_cases"] == 30 and s["cases"] == 450 and len(s["chunks"]) == 15, (r["context"].get("chunk_cases"), len(s["chunks"])); assert json.load(open(sys.argv[2]))["context"]["chunk_cases"] == 100' k1.json r1.json ||
    fail "--chunk-cases 30: not 15 chunks of 30 recorded as such"
  ;;
fuzz_signal_keeps_results)
  # SIGTERM (and SIGINT) in the middle of a campaign that would run for minutes: no new case starts,
  # the report (schema-valid) holds the cases that ran (in process, and with --jobs 2 whose workers get the signal too and
  # hand over theirs), the counterexamples found so far are written, no worker is left running and
  # the temporary folder is gone; exit 128 + the signal.
  py=$(command -v /usr/bin/python3 || command -v python3)
  # "group": the signal goes to the whole process group, as `timeout`, Ctrl-C and Slurm send it: each
  # worker gets it twice (directly and forwarded) and must still hand over its cases (an H200 control
  # of megatron 0.15.3 once lost 159 cases as "unrecorded" this way).
  # "timeout": as coreutils' timeout sends it, to recap and then to its process group, so recap gets
  # two SIGTERMs; the second must not kill it before it writes its report (an H200 call lost three
  # campaigns' reports and logs that way).
  for run in "1 TERM 143 Terminated" "2 TERM 143 Terminated" "2 INT 130 Interrupt" "2 TERM 143 Terminated group" \
             "2 TERM 143 Terminated timeout"; do
    set -- $run; jobs=$1 sig=$2 code=$3 what=$4 group=${5:-}
    export TMPDIR=$PWD/tmp$jobs$sig$group; mkdir -p "$TMPDIR"
    # a background job of a non-interactive shell ignores SIGINT; recap is started with it restored
    "$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); sys.argv[1] in ("group", "timeout") and os.setsid(); os.execv(sys.argv[2], sys.argv[2:])' \
      "${group:-one}" "$recap" fuzz --backend sim --seed 2 --cases 2000000 --jobs $jobs --corpus-dir c$jobs --report r$jobs.json > out$jobs.txt 2>&1 &
    pid=$!
    sleep 3
    case "$group" in
      group) kill -$sig -$pid ;;
      timeout) kill -$sig $pid; sleep 0.2; kill -$sig -$pid ;;
      *) kill -$sig $pid ;;
    esac
    wait $pid; rc=$?
    [ "$rc" -eq "$code" ] || { tail -5 out$jobs.txt; fail "--jobs $jobs SIG$sig: exit $rc, expected $code"; }
    grep -q "interrupted ($what)" out$jobs.txt || { tail -5 out$jobs.txt; fail "--jobs $jobs: no interrupted line"; }
    "$py" - r$jobs.json $what $code <<'PY' || fail "--jobs $jobs SIG$sig: the partial report"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
assert s["interrupted"] == sys.argv[2] and s["exit_code"] == int(sys.argv[3]), (s.get("interrupted"), s["exit_code"])
assert 0 < s["cases"] < 2000000 and len(r["cases"]) == s["cases"], s["cases"]
assert s["failures"], "no counterexample kept (a drawn policy fails within seconds)"
assert not s["crashes"] and "unrecorded" not in s["by_disposition"], s["crashes"]
print("partial report:", s["cases"], "cases,", len(s["failures"]), "counterexamples")
PY
    validate_report r$jobs.json
    [ -n "$(ls c$jobs)" ] || fail "--jobs $jobs: no counterexample written"
    rm -rf c$jobs
    sleep 0.5
    ! pgrep -f -- "--worker-out $TMPDIR" > /dev/null || fail "--jobs $jobs: a worker is still running"
    [ -z "$(ls "$TMPDIR")" ] || fail "--jobs $jobs: left $(ls "$TMPDIR")"
  done
  ;;
fuzz_buckets_and_known_findings)
  # A drawn-policy campaign runs all 300 cases and writes one counterexample per bucket (distinct
  # bug), the same with --jobs 2; the summary counts each bucket's failing cases. With every
  # bucket accepted in --known-findings (for every configuration) the campaign passes and writes
  # nothing; the old one-bucket-per-line file is a one-line usage error naming the new format;
  # --stop-on-first stops at the first counterexample.
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$recap" fuzz --backend sim --seed 2 --cases 300 --shrink-limit 5 --corpus-dir b --report b.json > out.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat out.txt; fail "exit $rc, expected 1"; }
  "$recap" fuzz --backend sim --seed 2 --cases 300 --shrink-limit 5 --jobs 2 --corpus-dir bj --report bj.json > /dev/null
  "$py" - b.json bj.json known.txt <<'PY' || fail "buckets"
import json, sys
r, rj = (json.load(open(p))["summary"] for p in sys.argv[1:3])
assert r["cases"] == 300, r["cases"]
buckets = [f["bucket"] for f in r["failures"]]
assert len(buckets) >= 2 and len(set(buckets)) == len(buckets), buckets
assert set(buckets) <= set(r["buckets"]), (buckets, r["buckets"])
assert sum(r["buckets"].values()) > len(buckets), r["buckets"]  # failing cases beyond the shrunk ones
assert sum(r["buckets"].values()) == sum(v for k, v in r["by_disposition"].items() if k != "passed" and k != "skipped")
assert [f["bucket"] for f in rj["failures"]] == buckets and rj["buckets"] == r["buckets"], "--jobs 2 differs"
open(sys.argv[3], "w").write("# accepted\n" + "\n".join(r["buckets"]) + "\n")  # the old format
json.dump({"schema": "recap.known-findings/1", "findings": [
    {"id": "ALL", "summary": "every bucket, every configuration", "buckets": list(r["buckets"]), "when": {}}]},
    open("known.json", "w"))
print(len(buckets), "buckets:", ", ".join(buckets))
PY
  [ "$(ls b | wc -l)" -eq "$(grep -c '^[a-z]' known.txt)" ] || { ls b; fail "one file per bucket expected"; }
  grep -q "buckets (failing cases by distinct bug):" out.txt || fail "no bucket list in the summary"
  "$recap" fuzz --backend sim --seed 2 --cases 300 --shrink-limit 5 --known-findings known.json --corpus-dir k > out.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat out.txt; fail "known findings: exit $rc, expected 0"; }
  grep -q "(known: ALL [0-9]*)" out.txt || fail "known buckets not marked"
  [ -z "$(ls k 2>/dev/null)" ] || fail "known counterexamples were written"
  # the old one-bucket-per-line text is refused, naming the new format
  "$recap" fuzz --backend sim --seed 2 --cases 10 --known-findings known.txt > out.txt 2> err.txt; rc=$?
  [ "$rc" -eq 2 ] || fail "the old known-findings text: exit $rc"
  [ "$(wc -l < err.txt)" -eq 1 ] && grep -q "known.txt: not a recap.known-findings/1 JSON file (the one-bucket-per-line format is gone" err.txt ||
    { cat err.txt; fail "the error does not name the new format"; }
  "$recap" fuzz --backend sim --seed 2 --cases 300 --shrink-limit 5 --stop-on-first --corpus-dir s --report s.json > /dev/null
  "$py" -c 'import json,sys; s=json.load(open("s.json"))["summary"]; assert len(s["failures"]) == 1 and s["cases"] < 300, (len(s["failures"]), s["cases"])' ||
    fail "--stop-on-first"
  ;;
known_findings_by_configuration)
  # Issue 18 item 5: a known finding is its bucket AND its configuration, judged per failing case by
  # the case's own (pre-shrink) spec. The naive policy's capture failure on recap's runtime comes
  # from per-layer and full-iteration cases: accepted for both, the campaign passes; accepted for
  # per-layer only, the full-iteration cases are new (exit 1, the counterexample written); accepted
  # only for the configuration a shrink without known findings ends in, the case the shrink started
  # from is new, and its shrink now stays outside that configuration.
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$recap" fuzz --backend sim --policy naive --seed 5 --cases 200 --shrink-limit 100 --corpus-dir base --report base.json > /dev/null
  "$py" - base.json <<'PY' || fail "known-findings files"
import json, sys
rep = json.load(open(sys.argv[1]))
def bucket(r):
    for c in r["checks"]:
        if c["disposition"] in ("failed", "incorrect", "crashed"):
            e = c.get("capture_error", {})
            t = c.get("divergence", {}).get("tensor", "")
            return "/".join([c["property"], c["disposition"], e.get("api", ""), e.get("error", ""), t.split(" ")[0]])
    return ""
cases = [(bucket(r), r["spec"], ch) for r, ch in zip(rep["cases"], rep["summary"]["report_chunks"])]
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
ex = [s["executor"] for b, s, _ in cases if b == B]
assert "per-layer" in ex and "full-iteration" in ex, ex
others = sorted(set(b for b, _, _ in cases if b and b != B))
def write(name, when):
    f = [{"id": "CAP", "summary": "naive policy, host generator under capture", "buckets": [B], "when": when}]
    if others: f.append({"id": "REST", "summary": "the other buckets", "buckets": others, "when": {}})
    json.dump({"schema": "recap.known-findings/1", "findings": f}, open(name, "w"), indent=1)
write("both.json", {"executor": ["per-layer", "full-iteration"]})
write("per-layer.json", {"executor": ["per-layer"], "_why": "a comment key"})
write("full-iteration.json", {"executor": ["full-iteration"]})
json.dump({"per-layer": ex.count("per-layer"), "full-iteration": ex.count("full-iteration")}, open("counts.json", "w"))
# the shrunk counterexample's configuration, which the case its shrink started from (the first
# failing case of the bucket in its chunk) is outside: shrinking moved a field of the case
cx = [f for f in rep["summary"]["failures"] if f["bucket"] == B][0]
start = [s for b, s, ch in cases if b == B and ch == cx["chunk"]][0]
def order(s):
    plain = [1, -1] * s.get("microbatches", 1)
    return "default" if (s.get("microbatch_order") or plain) == plain else "interleaved"
def value(s, k):
    return order(s) if k == "microbatch_order" else s[k]
keys = ["executor", "generator", "dtype", "shared_pool", "device_state", "warmup_backward", "checkpoint_style", "microbatch_order"]
moved = [k for k in keys if value(start, k) != value(cx["case"], k)]
assert moved, "the shrink moved no field: choose another seed"
k = moved[0]
v = value(cx["case"], k)
write("shrunk.json", {k: v if isinstance(v, bool) else [v]})
json.dump({"key": k, "value": v}, open("shrunk-key.json", "w"))
print("bucket", B, "cases", len(ex), "others", others, "shrink moved", k, value(start, k), "->", v)
PY
  "$recap" fuzz --backend sim --policy naive --seed 5 --cases 200 --shrink-limit 100 --known-findings both.json --corpus-dir k1 --report k1.json > out1.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat out1.txt; fail "every failure in its configuration: exit $rc, expected 0"; }
  grep -q "cudaErrorStreamCaptureUnsupported/  (known: CAP [0-9]*)" out1.txt || { cat out1.txt; fail "the bucket is not marked known"; }
  [ -z "$(ls k1 2>/dev/null)" ] || fail "known counterexamples were written"
  "$recap" fuzz --backend sim --policy naive --seed 5 --cases 200 --shrink-limit 100 --known-findings per-layer.json --corpus-dir k2 --report k2.json > out2.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat out2.txt; fail "full-iteration cases outside the configuration: exit $rc, expected 1"; }
  grep -q "cudaErrorStreamCaptureUnsupported/  ([0-9]* new; accepted: CAP [0-9]*)" out2.txt || { cat out2.txt; fail "the bucket is not marked new"; }
  # accepted for full-iteration only: a chunk whose first failing case of the bucket is accepted does
  # not shrink it, and the bucket's reproducer must still be a new (per-layer) case
  "$recap" fuzz --backend sim --policy naive --seed 5 --cases 200 --shrink-limit 100 --known-findings full-iteration.json --corpus-dir k4 --report k4.json > out4.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat out4.txt; fail "per-layer cases outside the configuration: exit $rc, expected 1"; }
  "$py" - k4.json <<'PY' || fail "the reproducer of a bucket with new cases is a known case"
import json, sys
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
f = [f for f in json.load(open(sys.argv[1]))["summary"]["failures"] if f["bucket"] == B][0]
assert not f["known"] and f["case"]["executor"] == "per-layer", (f["case"]["executor"], f["shrinks"])
print("k4: the reproducer is a per-layer case,", f["shrinks"], "shrinks")
PY
  "$recap" fuzz --backend sim --policy naive --seed 5 --cases 200 --shrink-limit 100 --known-findings shrunk.json --corpus-dir k3 --report k3.json > out3.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat out3.txt; fail "a case that shrank into the configuration: exit $rc, expected 1"; }
  "$py" - k1.json k2.json k3.json counts.json shrunk-key.json <<'PY' || fail "the judgement in the reports"
import json, sys
k1, k2, k3 = (json.load(open(p))["summary"] for p in sys.argv[1:4])
n = json.load(open(sys.argv[4]))
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
j = k1["known_findings"]["buckets"][B]
assert j == {"accepted": {"CAP": n["per-layer"] + n["full-iteration"]}, "new": 0, "known": True}, j
assert all(f["known"] for f in k1["failures"]), k1["failures"]
j = k2["known_findings"]["buckets"][B]
assert j == {"accepted": {"CAP": n["per-layer"]}, "new": n["full-iteration"], "known": False}, (j, n)
f = [f for f in k2["failures"] if f["bucket"] == B][0]
assert not f["known"] and f["corpus_file"], f
# the reproducer of a bucket with new cases is a new case, never an accepted one (per-layer here)
assert f["case"]["executor"] != "per-layer", f["case"]["executor"]
assert all(f["known"] for f in k2["failures"] if f["bucket"] != B)  # the other buckets: every configuration
j = k3["known_findings"]["buckets"][B]
f = [f for f in k3["failures"] if f["bucket"] == B][0]
key = json.load(open(sys.argv[5]))
c = f["case"]
plain = [1, -1] * c.get("microbatches", 1)
order = "default" if (c.get("microbatch_order") or plain) == plain else "interleaved"
got = order if key["key"] == "microbatch_order" else c[key["key"]]
# the shrink may not move a new failure into an accepted configuration (FuzzOptions::accepted):
# without that rule it did, and the written reproducer showed the known bug
assert got != key["value"], (key, got)
assert j["new"] >= 1 and not j["known"] and not f["known"] and f["corpus_file"], (j, f)
print("judged:", k2["known_findings"]["buckets"][B], k3["known_findings"]["buckets"][B])
PY
  validate_report k2.json
  # Bad files: exit 2 and one line naming the problem.
  bad() {  # NAME EXPECTED-TEXT JSON
    printf '%s' "$3" > "$1"
    "$recap" fuzz --backend sim --cases 1 --known-findings "$1" > /dev/null 2> err.txt; rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -qF -- "$2" err.txt || { cat err.txt; fail "$1: exit $rc"; }
  }
  h='"schema": "recap.known-findings/1"'
  e='"id": "X", "summary": "s", "buckets": ["a/b/c/d/e"]'
  bad malformed.json "malformed.json: malformed JSON" "{$h, "
  bad field.json "field.json: unknown field 'bogus'" "{$h, \"findings\": [], \"bogus\": 1}"
  bad entry.json "findings[0]: unknown field 'bucket'" "{$h, \"findings\": [{$e, \"bucket\": 1, \"when\": {}}]}"
  bad feature.json "findings[0].when: unknown feature 'graphd'" "{$h, \"findings\": [{$e, \"when\": {\"graphd\": true}}]}"
  bad value.json 'findings[0].when[1].executor: "per_layer" is not a recap.case/1 value' "{$h, \"findings\": [{$e, \"when\": [{}, {\"executor\": [\"per_layer\"]}]}]}"
  bad kind.json 'findings[0].when.kinds: "conv" is not a recap.case/1 value' "{$h, \"findings\": [{$e, \"when\": {\"kinds\": [\"conv\"]}}]}"
  bad flag.json "findings[0].when.dropout: expected true or false" "{$h, \"findings\": [{$e, \"when\": {\"dropout\": [\"yes\"]}}]}"
  bad bucket.json "a bucket is property/disposition/api/cuda_error/quantity" "{$h, \"findings\": [{\"id\": \"X\", \"summary\": \"s\", \"buckets\": [\"capture_clean/failed\"], \"when\": {}}]}"
  bad nowhen.json "findings[0].when: missing" "{$h, \"findings\": [{$e}]}"
  bad twice.json "findings[1].id: 'X' twice" "{$h, \"findings\": [{$e, \"when\": {}}, {$e, \"when\": {}}]}"
  bad schema.json "schema: expected" '{"findings": []}'
  # The committed files of the frameworks are read (and valid against the schema where jsonschema is).
  for f in "$src"/corpus/known-findings/*.json; do
    "$recap" fuzz --backend sim --cases 2 --known-findings "$f" > /dev/null 2> err.txt; rc=$?
    [ "$rc" -le 1 ] || { cat err.txt; fail "$f: exit $rc"; }
  done
  pyj=$(pyjs)
  if [ -n "$pyj" ]; then
    "$pyj" - "$src"/reports/schema/recap.known-findings.schema.json "$src"/corpus/known-findings/*.json both.json <<'PY' || fail "known-findings schema"
import json, sys, jsonschema
s = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(s)
for p in sys.argv[2:]:
    jsonschema.validate(json.load(open(p)), s, cls=jsonschema.Draft202012Validator)
PY
  fi
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
  diff -r f3 f4 > /dev/null || fail "counterexample files differ"
  ;;
fuzz_jobs_auto)
  # --jobs auto on sim: one job per CPU core this process may use (nproc honours the affinity mask,
  # as sched_getaffinity does), printed with its reason and kept in the report's context
  n=$(nproc)
  "$recap" fuzz --backend sim --policy graph-safe --seed 5 --cases 20 --jobs auto --report a.json > out.txt 2> err.txt
  rc=$?; cat out.txt err.txt
  [ "$rc" -eq 0 ] || fail "--jobs auto: exit $rc"
  grep -qx "recap: --jobs auto: $n ($n CPU cores\?)" err.txt || fail "--jobs auto did not choose $n jobs from $n cores"
  python3 - "$n" <<'PY' || fail "the report's context"
import json, sys
n = int(sys.argv[1])
c = json.load(open("a.json"))["context"]
assert c["jobs"] == n and c["jobs_auto"].startswith(f"{n} ({n} CPU core"), c
PY
  "$recap" fuzz --backend sim --policy graph-safe --seed 5 --cases 2 --jobs 2 --report b.json > /dev/null 2>&1 || fail "--jobs 2"
  python3 -c 'import json; assert "jobs_auto" not in json.load(open("b.json"))["context"]' || fail "jobs_auto without --jobs auto"
  ;;
fuzz_jobs_and_crash_isolation)
  "$recap" fuzz --backend sim --policy graph-safe --seed 5 --cases 400 --jobs 2 --corpus-dir found --report j.json > out.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || fail "--jobs 2: exit $rc"
  grep -q "recap fuzz: 400 cases" out.txt || fail "--jobs 2 did not merge 400 cases"
  RECAP_FAULT_ABORT=1:3 "$recap" fuzz --backend sim --policy graph-safe --seed 5 --cases 400 --jobs 2 --corpus-dir found --report c.json > out2.txt 2> err2.txt
  rc=$?; cat out2.txt
  [ "$rc" -eq 1 ] || fail "injected abort: exit $rc, expected 1"
  # job 1 dies in the first chunk it claimed; job 0 runs the other three (claims: workers.cpp)
  grep -q "crashed: job 1 died of signal 6 (.*) after 2 of its cases (case 3 of the job crashed, in chunk [0-3]); reproduce: recap fuzz --backend sim --seed 5 --cases 400 --chunk-cases 100 --policy graph-safe --shard [0-3]/4" out2.txt ||
    fail "crash not recorded with its chunk"
  grep -q "crashed 1" out2.txt || fail "crashed not counted"
  grep -q "passed 300" out2.txt || fail "the other job did not run the other three chunks' 300 cases"
  # the reproduce command runs the crashed chunk alone: 100 cases, and the same abort as job 0 of one process
  repro=$(grep -o "reproduce: recap fuzz .*" out2.txt | head -1 | sed 's/^reproduce: recap //')
  RECAP_FAULT_ABORT=0:3 "$recap" $repro --corpus-dir found3 > out3.txt 2> err3.txt; rc=$?
  [ "$rc" -eq 134 ] || fail "the reproduce command ($repro) did not abort where the job did: exit $rc"
  "$recap" $repro --corpus-dir found3 > out4.txt || fail "the reproduce command without the fault: exit $?"
  grep -q "recap fuzz: 100 cases" out4.txt || { cat out4.txt; fail "the reproduce command did not run one chunk"; }
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
fuzz_dims_and_restrictions)
  # --dims large draws the cuda sizes on sim too; --no-checkpoint --no-dropout leave no layer
  # checkpointed or dropping; both hold through --jobs 2 workers (the flags are passed on).
  py=$(command -v /usr/bin/python3 || command -v python3)
  for jobs in 1 2; do
    # capture_clean alone: large cases on sim are slow to judge against the fp64 reference
    "$recap" fuzz --backend sim --policy graph-safe --cases 4 --seed 3 --jobs $jobs --dims large --no-checkpoint \
      --no-dropout --property capture_clean --corpus-dir found --report d$jobs.json > out.txt \
      || fail "--dims large --jobs $jobs: exit $?"
    "$py" - d$jobs.json <<'PY' || fail "dims or restrictions not applied (--jobs $jobs)"
import json, sys
r = json.load(open(sys.argv[1]))
cases = [c["spec"] for c in r["cases"]]
assert len(cases) == 4, len(cases)
assert all(c["hidden"] >= 64 for c in cases), [c["hidden"] for c in cases]
assert max(c["hidden"] for c in cases) >= 128, [c["hidden"] for c in cases]
layers = [l for c in cases for l in c["layers"]]
assert all(l.get("checkpoint", "none") == "none" and l.get("dropout", 0) == 0 for l in layers), layers
print("large dims, nothing checkpointed or dropped:", len(cases), "cases,", len(layers), "layers")
PY
  done
  "$recap" fuzz --backend sim --cases 1 --dims huge > out.txt 2>&1
  [ $? -eq 2 ] || fail "--dims huge: expected exit 2"
  grep -q -- "--dims" out.txt || fail "--dims huge: the error does not name the flag"
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
  # A worker that asks to retire after its 3rd run (as a driver whose memory grows does) is
  # replaced before the next case, every third case here: the same report, nothing crashed.
  RECAP_WORKER_STDERR=1 RECAP_FAULT_WORKER=retire@3 "$recap" fuzz --backend sim --sut recap-worker --seed 7 --cases 60 \
    --corpus-dir wr --report wr.json > /dev/null 2> retire.txt
  n=$(grep -c "RECAP_FAULT_WORKER retire@3: retiring after run 3" retire.txt)
  [ "$n" -ge 5 ] || { tail -5 retire.txt; fail "retire: $n workers retired, expected one every 3 runs"; }
  same p.json wr.json "fuzz with workers retiring ($n retired)"
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
      abort) grep -q "the worker died of signal 6" out.txt || { cat out.txt; fail "abort: the reason does not name the signal"; }
             # the worker's stderr tail: the line its fault wrote before aborting
             grep -q "(the worker died of signal 6 (SIGABRT)); stderr: recap worker: RECAP_FAULT_WORKER abort@4: aborting in run 4" fabort.json ||
               fail "abort: the report's reason lacks the worker's stderr" ;;
      garbage) grep -q "a header that is not JSON: 'garbage instead of an observation'" out.txt || { cat out.txt; fail "garbage: reason"; } ;;
    esac
    [ -s f$fault.json ] || fail "$fault: no report"
    # replayed in a fresh worker (the fault has fired) the case passes: flaky, not a reproducer
    grep -q "flaky, not written: replayed in a fresh process it gave passed" out.txt || { cat out.txt; fail "$fault: not flagged flaky"; }
    [ -z "$(ls f$fault 2>/dev/null)" ] || fail "$fault: a flaky case was written to the corpus"
    grep -q '"flaky": "passed' f$fault.json || fail "$fault: the report does not say flaky"
  done
  echo "both faults: crashed, one line, report written, flaky and not written"
  ;;
fuzz_sut_worker_timeout)
  # A worker that never answers (hang@4: its 4th run, case 4's own, as only capture_clean is
  # checked: one run a case) is killed after --case-timeout 2: case 4 is `crashed` with the
  # timeout's reason and the worker's stderr tail, cases 1-3 keep the verdicts of the campaign
  # without the fault, and the campaign completes all 30 cases (exit 1, report written).
  args="--backend sim --sut recap-worker --property capture_clean --policy graph-safe --seed 1 --cases 30"
  "$recap" fuzz $args --corpus-dir clean --report clean.json > /dev/null || fail "without the fault: exit $?"
  start=$(date +%s)
  RECAP_FAULT_WORKER=hang@4:$PWD/fired-hang "$recap" fuzz $args --case-timeout 2 --corpus-dir hung --report hung.json > out.txt
  rc=$?; took=$(( $(date +%s) - start )); cat out.txt
  [ "$rc" -eq 1 ] || fail "exit $rc, expected 1"
  [ "$took" -lt 60 ] || fail "took $took s"
  python3 - hung.json clean.json <<'PY' || fail "the hung case or the others"
import json, sys
hung, clean = (json.load(open(p))["cases"] for p in sys.argv[1:])
for c in hung + clean:
    c.pop("timings", None)
assert len(hung) == 30, len(hung)  # the campaign goes on after the crashed case (the default, no --stop-on-first)
reason = hung[3]["checks"][0]["reason"]
assert hung[3]["disposition"] == "crashed", hung[3]["disposition"]
assert reason == ("the run threw: recap-worker worker: no reply within --case-timeout 2 s (killed); "
                  "stderr: recap worker: RECAP_FAULT_WORKER hang@4: not answering run 4"), reason
assert hung[:3] == clean[:3], "cases 1-3 differ from the campaign without the fault"
assert hung[3]["spec"] == clean[3]["spec"] and clean[3]["disposition"] == "passed"
assert all(c["disposition"] == "passed" for c in hung[4:]), "a case after the crash did not pass"
print("case 4 crashed:", reason)
PY
  ;;
sut_worker_env)
  # --worker-env sets a variable in the worker's environment: RECAP_FAULT_WORKER, read by `recap
  # worker`, makes its first run abort (the case crashes, exit 1) ...
  "$recap" replay --backend sim --sut recap-worker --worker-env RECAP_FAULT_WORKER=abort@1 "$src/corpus/graph-safe-eager.json" > out.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || fail "exit $rc, expected 1"
  grep -q "recap-worker worker: the worker closed its output (the worker died of signal 6 (SIGABRT))" out.txt || fail "the worker did not get the variable"
  # ... and not in recap's: RECAP_FAULT_ABORT, read by recap's own campaign processes (--jobs), set
  # for the workers only, aborts no shard.
  "$recap" fuzz --backend sim --sut recap-worker --worker-env RECAP_FAULT_ABORT=1:3 --policy graph-safe --seed 5 --cases 200 \
    --jobs 2 --corpus-dir f --report j.json > out2.txt || { cat out2.txt; fail "the variable reached recap's own processes"; }
  grep -q "recap fuzz: 200 cases" out2.txt || fail "200 cases expected"
  # one KEY=VALUE per flag: the case files after it stay case files (both replayed)
  "$recap" replay --backend sim --sut recap-worker --worker-env RECAP_UNUSED=1 "$src/corpus/graph-safe-eager.json" \
    "$src/corpus/graph-safe-per-layer.json" > out3.txt || { cat out3.txt; fail "files after --worker-env"; }
  grep -q "^replay: 2 files, 2 as expected" out3.txt || { cat out3.txt; fail "both files replayed expected"; }
  ;;
replay_uses_the_files_sut)
  # A case file's "sut" is what replay runs it on: recap-worker here (RECAP_FAULT_WORKER, read by
  # `recap worker` alone, crashes its first run); --sut recap overrides it (in process, the fault
  # is not read and the case passes).
  python3 - "$src/corpus/graph-safe-eager.json" <<'PY' || fail "cannot write the case"
import json, sys
c = json.load(open(sys.argv[1]))
c["sut"] = {"name": "recap-worker", "version": "0.1.0"}
json.dump(c, open("worker-case.json", "w"), indent=2)
PY
  RECAP_FAULT_WORKER=abort@1 "$recap" replay --backend sim worker-case.json --report w.json > out.txt; rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || fail "the file's sut: exit $rc, expected 1"
  grep -q "recap-worker worker: the worker closed its output (the worker died of signal 6 (SIGABRT))" out.txt || fail "not run by recap-worker"
  RECAP_FAULT_WORKER=abort@1 "$recap" replay --backend sim --sut recap worker-case.json --report r.json > out2.txt ||
    { cat out2.txt; fail "--sut recap: exit $?"; }
  python3 - w.json r.json <<'PY' || fail "the report's context"
import json, sys
w, r = (json.load(open(p))["context"]["sut"] for p in sys.argv[1:])
assert w["name"] == "recap-worker" and r["name"] == "recap", (w, r)
PY
  validate_report w.json
  ;;
run_case_timeout)
  # recap run's one case, past --case-timeout: the process stops, exit 1, one line on stderr.
  "$recap" run --backend sim --case-timeout 0.001 "$src/corpus/graph-safe-eager.json" > out.txt 2> err.txt; rc=$?
  cat err.txt
  [ "$rc" -eq 1 ] || fail "exit $rc, expected 1"
  [ "$(wc -l < err.txt)" -eq 1 ] || fail "one line on stderr expected"
  grep -q "^recap run: .*graph-safe-eager.json: no result within --case-timeout 0.001 s (stopped)$" err.txt || fail "the line"
  "$recap" run --backend sim --case-timeout 120 "$src/corpus/graph-safe-eager.json" > out2.txt || fail "within its timeout: exit $?"
  grep -q "^result: passed" out2.txt || fail "no result within the timeout"
  ;;
sut_torch_fuzz_draws_supported)
  # A campaign against torch on the CPU draws only what torch's hello lists (eager, the naive
  # policy, the graph-safe generator, torch's device-state model; non-reentrant checkpoints as
  # well as reentrant ones): no case is skipped, every case ran. Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  version=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
  "$recap" fuzz --sut torch --backend sim --cases 20 --seed 1 --corpus-dir found --report t.json > out.txt 2> err.txt
  rc=$?; head -3 out.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "exit $rc"; }
  python3 - t.json "$version" <<'PY' || fail "a case torch does not run"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["context"]["sut"] == {"name": "torch", "version": sys.argv[2], "device": "cpu"}, r["context"]["sut"]
cases = r["cases"]
assert len(cases) == 20 and all(c["disposition"] == "passed" for c in cases), [c["disposition"] for c in cases]
specs = [c["spec"] for c in cases]
assert all(s["executor"] == "eager" and s["policy"] == "naive" and s["generator"] == "graph-safe" for s in specs)
styles = {s["checkpoint_style"] for s in specs}
assert styles == {"reentrant", "non-reentrant"}, styles
print("20 cases passed on torch", sys.argv[2], "styles", sorted(styles))
PY
  ;;
fuzz_gpus_torch_jobs)
  # --gpus (issue 22): each --jobs process runs with CUDA_VISIBLE_DEVICES naming its GPU,
  # round-robin over the list, and so does the torch worker it starts; the report's gpus section
  # records what each worker's hello said it saw (not what recap set), per device the jobs and cases,
  # and the summary prints a line per device. On the CPU (fake nvidia-smi: two GPUs) the workers
  # use no GPU, which the report says. Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  smi="$src/tests/cli/data/fake-nvidia-smi"
  RECAP_PROGRESS_LINES=1 PATH="$smi:$PATH" "$recap" fuzz --sut torch --backend sim --gpus all --jobs 3 --cases 6 \
    --chunk-cases 1 --seed 1 --corpus-dir found --report g.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "exit $rc"; }
  grep -q "^progress: .* left, given GPUs: 0 [0-9]* cases, 1 [0-9]* cases$" err.txt || fail "no per-GPU progress"
  # how many cases each job ran depends on which was free first (jobs claim chunks)
  grep -q "^  gpu none: cpu (CUDA_VISIBLE_DEVICES=0, the worker used no GPU): jobs 0, 2, [0-9]* cases\?," out.txt ||
    fail "no summary line for GPU 0's jobs"
  grep -q "^  gpu none: cpu (CUDA_VISIBLE_DEVICES=1, the worker used no GPU): job 1, [0-9]* cases\?," out.txt ||
    fail "no summary line for GPU 1's job"
  grep -q "^  gpus total: 6 cases" out.txt || fail "no total line"
  # Under CUDA_VISIBLE_DEVICES=5,7 recap's ordinal 1 is the parent's second device: every job sees 7.
  CUDA_VISIBLE_DEVICES=5,7 PATH="$smi:$PATH" "$recap" fuzz --sut torch --backend sim --gpus 1 --jobs 2 --cases 2 \
    --chunk-cases 1 --seed 1 --corpus-dir found --report h.json > out2.txt 2> err2.txt
  rc=$?; cat out2.txt
  [ "$rc" -eq 0 ] || { tail -5 err2.txt; fail "under CUDA_VISIBLE_DEVICES=5,7: exit $rc"; }
  python3 - g.json h.json <<'PY' || fail "the gpus section"
import json, sys
g, h = (json.load(open(p)) for p in sys.argv[1:])
assert g["context"]["gpus"] == [0, 1], g["context"].get("gpus")
s = g["gpus"]
assert s["requested"] == [0, 1], s["requested"]
jobs = s["jobs"]
assert [j["job"] for j in jobs] == [0, 1, 2], jobs
for j in jobs:
    want = str(j["job"] % 2)
    assert j["requested"] == j["job"] % 2 and j["cuda_visible_devices_set"] == want, j
    # what the worker said in its hello: the value it saw, and no GPU on the CPU
    assert j["observed"] == {"cuda_visible_devices": want, "device": "cpu", "uuid": None, "pci_bus_id": None}, j
    assert j["shard"] == "0/1", j  # the jobs share the campaign's one shard, claiming its chunks
# six chunks of one case, each run by the job that claimed it
assert sum(j["cases"] for j in jobs) == 6, jobs
devs = s["devices"]
assert [(d["jobs"], d["cuda_visible_devices"], d["gpu"]) for d in devs] == \
    [([0, 2], ["0"], False), ([1], ["1"], False)], devs
# per device, the cases of its jobs (how many each job ran depends on which was free first)
for d in devs:
    assert d["cases"] == sum(j["cases"] for j in jobs if j["job"] in d["jobs"]), (d, jobs)
assert s["cases"] == g["summary"]["cases"] == 6 and s["unobserved_jobs"] == [], s
assert all(d["cases_per_minute"] > 0 for d in devs) and s["cases_per_minute"] > 0
hj = h["gpus"]["jobs"]
assert [j["observed"]["cuda_visible_devices"] for j in hj] == ["7", "7"], hj
assert [j["cuda_visible_devices_set"] for j in hj] == ["7", "7"] and h["gpus"]["requested"] == [1], hj
print("gpus: jobs", [(j["job"], j["observed"]["cuda_visible_devices"], j["cases"]) for j in jobs], "devices", len(devs))
PY
  validate_report g.json
  # What the report says is what the workers saw, not what recap set: a worker interpreter that
  # changes CUDA_VISIBLE_DEVICES to 9 before torch starts is reported as seeing 9 (job 0); a job
  # that dies (RECAP_FAULT_ABORT: job 1 as it starts, before it claims a chunk) said nothing, and is
  # shown so; job 0 runs every chunk.
  wpy=${RECAP_PYTHON:-python3}  # not $py: validate_report sets it to a python3 with jsonschema
  printf '#!/bin/sh\nCUDA_VISIBLE_DEVICES=9 exec "%s" "$@"\n' "$wpy" > py9; chmod +x py9
  RECAP_FAULT_ABORT=1:0 PATH="$smi:$PATH" "$recap" fuzz --sut torch --backend sim --worker-python "$PWD/py9" --gpus 0,1 \
    --jobs 2 --cases 4 --chunk-cases 1 --seed 1 --corpus-dir found --report m.json > out3.txt 2> err3.txt
  rc=$?; tail -4 out3.txt
  [ "$rc" -eq 1 ] || { tail -5 err3.txt; fail "a worker that saw 9 and a job that died: exit $rc, expected 1"; }
  grep -q "^  gpu mismatch: job 0 was given CUDA_VISIBLE_DEVICES=0, its worker saw 9$" out3.txt || fail "no mismatch line"
  grep -q "^  gpu unknown: job 1 (given GPU 1) did not say which device it used" out3.txt || fail "no line for the dead job"
  python3 - m.json <<'PY' || fail "the observed value"
import json, sys
s = json.load(open(sys.argv[1]))["gpus"]
assert [(j["cuda_visible_devices_set"], j["observed"]) for j in s["jobs"]] == \
    [("0", {"cuda_visible_devices": "9", "device": "cpu", "uuid": None, "pci_bus_id": None}), ("1", None)], s["jobs"]
# job 1 died before it claimed a chunk: job 0 ran all four
assert [(d["key"], d["jobs"], d["cases"]) for d in s["devices"]] == [("cpu CUDA_VISIBLE_DEVICES=9", [0], 4)], s["devices"]
assert s["unobserved_jobs"] == [1], s
PY
  validate_report m.json
  # the same campaign without --gpus: the same cases and verdicts (where jobs run decides nothing)
  "$recap" fuzz --sut torch --backend sim --jobs 3 --cases 6 --chunk-cases 1 --seed 1 --corpus-dir found2 \
    --report n.json > /dev/null 2>&1 || fail "without --gpus: exit $?"
  python3 "$src/scripts/report-canon.py" g.json > g.canon && python3 "$src/scripts/report-canon.py" n.json > n.canon ||
    fail "report-canon"
  python3 - g.canon n.canon <<'PY' || fail "--gpus changed the cases or verdicts"
import json, sys
g, n = (json.load(open(p)) for p in sys.argv[1:])
assert "gpus" in g and "gpus" not in n
g.pop("gpus")
assert g == n
PY
  ;;
fuzz_profile_sim)
  # --profile (docs/profile.md): every case report's timings.profile holds the case's own run and
  # its twins with their phases, every oracle's own time, all non-negative, each run's phases within
  # its time and the runs and oracles within the case's; the summary's table; the report validates.
  # Without --profile no profile key appears anywhere. Structure and consistency, never a timing.
  "$recap" fuzz --backend sim --profile --seed 5 --cases 36 --chunk-cases 12 --report p.json --corpus-dir found > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -le 1 ] || { tail -5 err.txt; fail "exit $rc"; }
  grep -q "profile (36 cases" out.txt || fail "no profile table"
  grep -q "runs.startup" out.txt || fail "no start-up row"
  validate_report p.json
  python3 "$src/tests/cli/profile_check.py" p.json sim || fail "the profile is not consistent"
  "$recap" fuzz --backend sim --profile --seed 5 --cases 24 --chunk-cases 12 --jobs 2 --report j.json --corpus-dir found2 > /dev/null 2>&1
  rc=$?; [ "$rc" -le 1 ] || fail "--jobs 2 --profile: exit $rc"
  python3 "$src/tests/cli/profile_check.py" j.json sim || fail "--jobs 2: the profile is not consistent"
  "$recap" fuzz --backend sim --seed 5 --cases 12 --report n.json --corpus-dir found3 > n.txt 2>&1
  rc=$?; [ "$rc" -le 1 ] || fail "without --profile: exit $rc"
  ! grep -q '"profile"' n.json || fail "without --profile a profile key appears"
  ! grep -q "profile (" n.txt || fail "without --profile the table is printed"
  "$recap" replay --profile --backend sim "$src/corpus/graph-safe-eager.json" --report r.json > r.txt 2>&1 || fail "replay --profile"
  grep -q "profile (1 cases" r.txt || fail "replay --profile: no table"
  python3 "$src/tests/cli/profile_check.py" r.json sim || fail "replay --profile: not consistent"
  ;;
fuzz_profile_torch)
  # --profile with --sut torch: each run is seen from recap (start-up, request, exchange, decode)
  # and from the driver (its reply's timings.profile: model build, steps, copies, encoding).
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  "$recap" fuzz --sut torch --backend sim --profile --seed 2 --cases 8 --report t.json --corpus-dir found > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -le 1 ] || { tail -5 err.txt; fail "exit $rc"; }
  grep -q "worker.model_build" out.txt || fail "no driver phase in the table"
  validate_report t.json
  python3 "$src/tests/cli/profile_check.py" t.json torch || fail "the profile is not consistent"
  ;;
sut_torch_eager)
  # PyTorch through its driver (drivers/recap_drivers), eagerly on the CPU: recap sends the case's
  # parameters and data, judges torch's run by the same oracles; torch's checkpoint recomputes the
  # forward masks (rng_ledger from the masks it reports) and the no-checkpoint gradients bit for
  # bit, and its gradients agree with the fp64 reference applied with the masks it sent
  # (reference: step 0 from the initial parameters; training: step 1). A driver that reports one
  # mask element other than it applied (RECAP_DRIVER_FAULT=wrong-mask-frame, step 0 only) fails
  # the reference and only it. Skipped (77) where torch is not importable.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  "$recap" replay --sut torch --backend sim "$src/tests/cli/data/torch-naive-eager.json" --report t.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "exit $rc"; }
  grep -q "recompute_on_off  passed" out.txt || fail "recompute_on_off did not pass"
  grep -q "rng_ledger        passed" out.txt || fail "rng_ledger did not pass"
  grep -q "reference         passed" out.txt || fail "the fp64 reference did not pass"
  grep -q "training          passed" out.txt || fail "the training check did not pass"
  "$recap" replay --sut torch --backend sim "$src/tests/cli/data/torch-naive-eager.json" \
    --worker-env RECAP_DRIVER_FAULT=wrong-mask-frame > bad.txt 2> err.txt
  rc=$?; cat bad.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "a wrong mask frame: exit $rc, expected 1"; }
  grep -q "reference         incorrect: step 0 vs the fp64 reference from the initial parameters" bad.txt ||
    fail "a wrong mask frame: the reference did not see it"
  grep -q "training          passed" bad.txt || fail "a wrong mask frame of step 0: training should pass"
  ;;
mutants_framework_torch_cpu)
  # Framework mutants (drivers/recap_drivers/mutants/) on the CPU: every CPU-capable torch mutant
  # is killed by a fixed-seed campaign after a clean baseline, every other one is "not exercised"
  # with its reason (never killed nor survived); each kill is written with its mutant, replays with
  # it installed, and passes without it (the mutant, not the case, is what fails). An unknown
  # --mutant is one line, exit 2. Skipped (77) where torch is not importable.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  "$recap" mutants --sut torch --worker-python "$py" --mutant bogus > /dev/null 2> bad.txt
  rc=$?; cat bad.txt
  [ "$rc" -eq 2 ] || fail "--mutant bogus: exit $rc, expected 2"
  [ "$(wc -l < bad.txt)" -eq 1 ] && grep -q "^recap: error: --mutant: 'bogus' is not a mutant of torch" bad.txt ||
    fail "--mutant bogus: not one line naming it"
  "$recap" mutants --sut torch --worker-python "$py" --backend sim --seed 1 --cases 40 --shrink-limit 30 \
    --report m.json --corpus-dir found > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || { tail -20 err.txt; fail "exit $rc, expected 0 (every exercised mutant killed)"; }
  "$py" - m.json "$src/drivers" <<'PY' || fail "the report"
import json, os, sys
sys.path.insert(0, sys.argv[2])
from recap_drivers import mutants
r = json.load(open(sys.argv[1]))
assert r["schema"] == "recap.mutants/1" and r["sut"]["device"] == "cpu", r["sut"]
assert r["baselines"][0]["passed"], r["baselines"]
got = {m["mutant"]: m for m in r["mutants"]}
assert set(got) == {m.name for m in mutants.for_sut("torch")}, sorted(got)
one_rank = [m for m in mutants.for_sut("torch") if m.cpu and m.needs != "ranks"]  # a rank group's: mutants_framework_ranks
for m in mutants.for_sut("torch"):
    e = got[m.name]
    if m in one_rank:
        assert e["verdict"] == "killed" and e["confirmed"], (m.name, e)
        assert e["bucket"] and e["cases"] >= 1 and e["seconds"] > 0, e
        f = json.load(open(e["corpus_file"]))
        assert f["sut"]["framework_mutant"] == m.name and f["sut"]["name"] == "torch", f["sut"]
    else:
        want = "rank group" if m.needs == "ranks" else "cpu"
        assert e["verdict"] == "not exercised" and want in e["reason"], (m.name, e)
s = r["summary"]
assert s["killed"] == len(one_rank) and s["survived"] == 0, s
assert 0 < s["median_seconds_to_kill"] <= s["max_seconds_to_kill"], s
print("killed:", ", ".join(f"{n} ({e['cases']} cases, {e['seconds']:.1f} s, {e['property']})"
                           for n, e in got.items() if e["verdict"] == "killed"))
PY
  kill=$(ls found/ckpt-no-rng-preserve/*.json | head -1)
  "$recap" replay --worker-python "$py" "$kill" > r1.txt 2> err.txt || { cat r1.txt; tail -5 err.txt; fail "the kill does not replay with its mutant"; }
  grep -q "as expected" r1.txt || fail "replay: not as expected"
  "$py" -c 'import json,sys; f=json.load(open(sys.argv[1])); del f["sut"]["framework_mutant"]; json.dump(f, open("plain.json","w"))' "$kill"
  "$recap" replay --worker-python "$py" plain.json > r2.txt 2> err.txt
  rc=$?; cat r2.txt
  [ "$rc" -eq 1 ] && grep -q "DIFFERS: verdict passed" r2.txt || fail "without its mutant the kill should pass (exit 1, DIFFERS), got $rc"
  ;;
mutants_framework_ranks)
  # Framework mutants of torch.distributed (drivers/recap_drivers/mutants/distributed.py, needs
  # "ranks") with `recap mutants --ranks 2`: the collectives a rank group's tensor- and
  # sequence-parallel layers call, broken, are killed by the cross-rank and fp64 oracles, and each
  # kill keeps tp 2 (one rank calls no collective) and replays with its mutant, passing without it.
  # Without --ranks they are "not exercised", naming the rank group; recap's own fault points refuse
  # --ranks (one line, exit 2). Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  "$recap" mutants --ranks 2 > /dev/null 2> bad.txt
  rc=$?; cat bad.txt
  [ "$rc" -eq 2 ] && [ "$(wc -l < bad.txt)" -eq 1 ] && grep -q "^recap: error: --ranks: recap's own fault points" bad.txt ||
    fail "recap mutants --ranks 2 (recap's own): exit $rc, expected 2 with one line"
  m="--mutant dist-all-reduce-skipped --mutant dist-all-gather-reversed"
  "$recap" mutants --sut torch --backend sim $m --report one.json > one.txt 2> err.txt
  rc=$?; cat one.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "without --ranks: exit $rc, expected 0 (nothing exercised)"; }
  "$recap" mutants --sut torch --ranks 2 --backend sim --seed 1 --cases 30 --shrink-limit 20 $m \
    --report m.json --corpus-dir found > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 0 ] || { tail -20 err.txt; fail "--ranks 2: exit $rc, expected 0 (every mutant killed)"; }
  "$py" - one.json m.json <<'PY' || fail "the reports"
import json, sys
one, r = (json.load(open(p)) for p in sys.argv[1:3])
for m in one["mutants"]:
    assert m["verdict"] == "not exercised" and "rank group" in m["reason"], m
got = {m["mutant"]: m for m in r["mutants"]}
assert set(got) == {"dist-all-reduce-skipped", "dist-all-gather-reversed"}, sorted(got)
for name, e in got.items():
    assert e["verdict"] == "killed" and e["confirmed"], (name, e)
    f = json.load(open(e["corpus_file"]))
    assert f["sut"]["framework_mutant"] == name and f.get("tp") == 2, (name, f.get("tp"), f["sut"])
assert r["summary"]["killed"] == 2 and r["summary"]["survived"] == 0, r["summary"]
print("killed:", ", ".join(f"{n} ({e['cases']} cases, {e['property']})" for n, e in got.items()))
PY
  kill=$(ls found/dist-all-reduce-skipped/*.json | head -1)
  "$recap" replay "$kill" > r1.txt 2> err.txt || { cat r1.txt; tail -5 err.txt; fail "the kill does not replay with its mutant"; }
  grep -q "as expected" r1.txt || fail "replay: not as expected"
  "$py" -c 'import json,sys; f=json.load(open(sys.argv[1])); del f["sut"]["framework_mutant"]; json.dump(f, open("plain.json","w"))' "$kill"
  "$recap" replay plain.json > r2.txt 2> err.txt
  rc=$?; cat r2.txt
  [ "$rc" -eq 1 ] && grep -q "DIFFERS: verdict passed" r2.txt || fail "without its mutant the kill should pass (exit 1, DIFFERS), got $rc"
  ;;
fuzz_sut_torch_worker_faults)
  # Workers that survive the GPU (issue 21, point 4), on torch's CPU driver: a campaign (--jobs 2)
  # without faults, then once per planted worker fault (RECAP_WORKER_FAULT, drivers/PROTOCOL.md
  # "Planted worker faults") aimed at one case of it, chosen from the clean report (passed, the last
  # case of its chunk: drivers/recap_drivers/core/worker_faults.py pick). Each fault costs its case
  # only: that case is `crashed` (lost-context: the sticky error named; kill-in-capture: SIGKILL and
  # where) or `out-of-memory`, every other case's report equals the clean run's (report-canon.py's
  # fields), all cases ran, the crashed case is confirmed on a fresh worker and written, the clean
  # corpus is all there. Exit 1 with a crashed case, 0 with an out-of-memory one (not a failure).
  # Skipped (77) where torch is not importable.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  args="--sut torch --worker-python $py --backend sim --seed 6 --cases 24 --chunk-cases 4 --jobs 2 --shrink-limit 1"
  start=$(date +%s)
  "$recap" fuzz $args --corpus-dir clean --report clean.json > clean.txt 2> clean.err
  rc=$?; cat clean.txt
  [ "$rc" -eq 0 ] || { tail -5 clean.err; fail "without faults: exit $rc, expected 0"; }
  PYTHONPATH="$src/drivers" "$py" -m recap_drivers.core.worker_faults pick clean.json \
    lost-context kill-in-capture memory-cap > picked.txt || fail "no cases to fault"
  cat picked.txt
  while read -r kind index digest; do
    "$recap" fuzz $args --worker-env "RECAP_WORKER_FAULT=$kind@$digest" --corpus-dir "$kind" --report "$kind.json" \
      > "$kind.txt" 2> "$kind.err" < /dev/null
    rc=$?; cat "$kind.txt"
    want=1; [ "$kind" = memory-cap ] && want=0
    [ "$rc" -eq "$want" ] || { tail -5 "$kind.err"; fail "$kind: exit $rc, expected $want"; }
    "$py" "$src/scripts/worker-faults-compare.py" clean.json clean "$kind.json" "$kind" "$kind:$index" ||
      fail "$kind: the faulted case or the others"
    # on the CPU: where each fired, and the CPU allocator's refusal (the GPU's text is CUDA's)
    case $kind in
      lost-context) grep -q "torch worker: the CUDA context is lost: eager step failed in the forward of .*: CUDA error: device-side assert triggered.*\[cudaErrorAssert\] (the worker exited with status 3)" "$kind.json" ;;
      kill-in-capture) grep -q "RECAP_WORKER_FAULT kill-in-capture: SIGKILL in step [0-9]* (eager), after the forward of .*: this case makes no capture (a CPU worker)" "$kind.json" ;;
      memory-cap) grep -q "out of device memory: eager step failed in the forward of .*DefaultCPUAllocator: can't allocate memory.*\[OutOfMemoryError\]" "$kind.json" ;;
    esac || fail "$kind: the reason in the report"
  done < picked.txt
  took=$(( $(date +%s) - start ))
  echo "four campaigns in $took s"
  ;;
sut_torch_ranks_faults)
  # Rank groups (issue 22) on the CPU (gloo): --ranks 2 starts a group of two ranks beside the
  # one-rank worker; tp 2 cases go to the group, tp 1 to the worker (and so does the one-rank twin
  # grads_match_one_rank compares with). Clean: the four cross-rank checks pass or are skipped with
  # their reason (a tp 1 case: "tp 1: one rank"). Each planted rank fault (RECAP_RANK_FAULT, drivers/
  # recap_drivers/core/rank_faults.py) makes its own oracle incorrect, where the clean run passed it.
  # Sequence parallel cases (sp) as well: their two faults (sp-block-no-fork, megatron-core 0.9.0's
  # missing fork; sp-grad-not-reduced) are caught by tp_masks_differ and grads_match_one_rank.
  # Replay without --ranks: a file of tp 2 starts its group itself. Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  masks="$src/tests/cli/data/tp2-masks.json"; grads="$src/tests/cli/data/tp2-grads.json"
  # sequence parallel (tp 2, sp): every draw per-rank; every kind that splits or holds parameters whole
  spmasks="$src/tests/cli/data/tp2-sp-masks.json"; spgrads="$src/tests/cli/data/tp2-sp-grads.json"
  clean_replay --ranks 2 "$masks" "$grads" "$src/tests/cli/data/torch-naive-eager.json" "$spmasks" "$spgrads"
  expect clean.txt "rank_recompute_equal passed: 24 recompute draws on 2 ranks equal their forward draws" "clean masks: rank_recompute_equal"
  expect clean.txt "tp_masks_differ      passed: 6 draws inside tensor-parallel regions differ across 2 ranks" "clean masks: tp_masks_differ"
  expect clean.txt "outside_masks_equal  passed: 6 draws outside" "clean masks: outside_masks_equal"
  expect clean.txt "grads_match_one_rank skipped: 6 draws inside tensor-parallel regions come from per-rank generators" "clean masks: grads skipped"
  expect clean.txt "grads_match_one_rank passed: 300 tensors (30624 elements) within 2e-05 of the one-rank run" "clean grads: grads_match_one_rank"
  expect clean.txt "tp_masks_differ      skipped: no dropout draw inside a tensor-parallel region" "clean grads: nothing inside regions"
  expect clean.txt "rank_recompute_equal skipped: tp 1: one rank, nothing to compare across ranks" "a tp 1 case: skipped with the reason"
  expect clean.txt "tp_masks_differ      passed: 18 draws inside tensor-parallel regions or on sequence-parallel rows differ across 2 ranks" "clean sp masks: tp_masks_differ"
  expect clean.txt "grads_match_one_rank passed: 336 tensors (30912 elements) within 2e-05 of the one-rank run" "clean sp grads: grads_match_one_rank"
  expect clean.txt "reference            passed: step 0, microbatch 0: 10 gradients against fp64" "clean sp masks: the reference applies the ranks' rows"
  validate_report clean.json
  ranks="rank_recompute_equal,tp_masks_differ,outside_masks_equal,grads_match_one_rank"
  rank_faults_caught "$ranks" tp-seed-shared:tp_masks_differ:masks tp-recompute-stale:rank_recompute_equal:masks \
    dp-seed-per-rank:outside_masks_equal:masks tp-grad-not-reduced:grads_match_one_rank:grads \
    sp-block-no-fork:tp_masks_differ:spmasks sp-grad-not-reduced:grads_match_one_rank:spgrads
  # The fp64 reference applies the group's masks (the ranks' own, assembled in rank order inside the
  # regions) to the full model: it passes on the clean group, where draws inside regions leave
  # grads_match_one_rank nothing to compare, and catches the unreduced gradient there.
  expect clean.txt "reference            passed: step 0, microbatch 0: 8 gradients against fp64" "clean masks: reference"
  "$recap" replay --sut torch --backend sim "$masks" --property reference,grads_match_one_rank \
    --worker-env RECAP_RANK_FAULT=tp-grad-not-reduced > unreduced.txt 2> err.txt
  rc=$?; cat unreduced.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "tp-grad-not-reduced on tp2-masks: exit $rc, expected 1"; }
  expect unreduced.txt "reference            incorrect: step 0 vs the fp64 reference" "tp-grad-not-reduced: the reference"
  expect unreduced.txt "grads_match_one_rank skipped" "tp-grad-not-reduced on tp2-masks: nothing for grads_match_one_rank"
  ;;
sut_torch_ranks_fuzz_shrinks)
  # recap fuzz --sut torch --ranks 2 on the CPU, tp drawn from the group's hello and shrunk first,
  # toward 1. tp-seed-shared (every rank's tensor-parallel generator seeded as rank 0's) fails only
  # on the group: its counterexample keeps tp 2, and its corpus file replays (the group started
  # from the file's tp) incorrect with the fault and passes without it. A fault that fails on one
  # rank too (RECAP_DRIVER_FAULT=drop-recompute-mask, rng_ledger), found on a tp 2 case, is no
  # cross-rank bug: it shrinks to tp 1. Seed 9's first case is of tp 2, sequence parallel (the report lists it);
  # tp-seed-shared's counterexample keeps tp 2 and drops sp, which it does not need.
  # --shrink-limit bounds the cost (each tp 2 evaluation runs on gloo). Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  tp_of() {  # JSON-FILE [KEY]: the tp of a case file (1 when absent), or of the report's first case / counterexample
    "$py" - "$1" "${2:-}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
if sys.argv[2] == "first": j = j["cases"][0]["spec"]
elif sys.argv[2] == "found": j = j["summary"]["failures"][0]["case"]
print(j.get("tp", 1))
PY
  }
  "$recap" fuzz --sut torch --ranks 2 --backend sim --seed 9 --cases 1 --stop-on-first --shrink-limit 12 \
    --worker-env RECAP_RANK_FAULT=tp-seed-shared --property tp_masks_differ --corpus-dir found --report r.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "tp-seed-shared: exit $rc, expected 1"; }
  validate_report r.json
  [ "$(tp_of r.json first)" = 2 ] || fail "the first case is not of tp 2"
  [ "$(tp_of r.json found)" = 2 ] || fail "tp-seed-shared fails on the group alone: its counterexample must keep tp 2"
  grep -q '"ranks": 2' r.json || fail "the report's flags do not name --ranks 2"
  set -- found/*.json; [ "$#" -eq 1 ] && [ -f "$1" ] || fail "expected one corpus file, found: $*"
  cx=$1
  [ "$(tp_of "$cx")" = 2 ] || fail "$cx: not of tp 2"
  "$recap" replay --sut torch --backend sim "$cx" --property tp_masks_differ --worker-env RECAP_RANK_FAULT=tp-seed-shared > again.txt 2> err.txt
  rc=$?; cat again.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "the counterexample did not replay as expected: exit $rc"; }
  grep -Eq "^  tp_masks_differ +incorrect: ranks 0 and 1 drew equal masks" again.txt || fail "the replay did not reproduce it"
  "$recap" replay --sut torch --backend sim "$cx" --property tp_masks_differ > clean.txt 2> err.txt
  rc=$?; cat clean.txt
  grep -Eq "^  tp_masks_differ +passed" clean.txt || fail "without the fault the counterexample should pass (exit $rc)"
  "$recap" fuzz --sut torch --ranks 2 --backend sim --seed 9 --cases 1 --stop-on-first --shrink-limit 12 \
    --worker-env RECAP_DRIVER_FAULT=drop-recompute-mask --property rng_ledger --corpus-dir one --report one.json > one.txt 2> err.txt
  rc=$?; cat one.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "drop-recompute-mask: exit $rc, expected 1"; }
  [ "$(tp_of one.json first)" = 2 ] || fail "drop-recompute-mask: the first case is not of tp 2"
  [ "$(tp_of one.json found)" = 1 ] || fail "a failure on one rank too must shrink to tp 1"
  # sp-block-no-fork (megatron-core 0.9.0's missing fork) needs sequence parallelism: seed 7 draws an
  # sp case second, finds it, and its counterexample keeps tp 2 with sp; it replays incorrect with the
  # fault and passes without it.
  "$recap" fuzz --sut torch --ranks 2 --backend sim --seed 7 --cases 12 --stop-on-first --shrink-limit 12 \
    --worker-env RECAP_RANK_FAULT=sp-block-no-fork --property tp_masks_differ --corpus-dir spfound --report sp.json > sp.txt 2> err.txt
  rc=$?; cat sp.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "sp-block-no-fork: exit $rc, expected 1"; }
  validate_report sp.json
  grep -q "on sequence-parallel rows" sp.txt || fail "sp-block-no-fork: not found on an sp case"
  grep -q "diagnosis: sequence-parallel ranks draw equal masks" sp.txt || fail "sp-block-no-fork: the diagnosis"
  set -- spfound/*.json; [ "$#" -eq 1 ] && [ -f "$1" ] || fail "expected one sp corpus file, found: $*"
  "$py" -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if j.get('tp') == 2 and j.get('sp') is True else 1)" "$1" \
    || fail "$1: the counterexample must keep tp 2 and sp"
  "$recap" replay --sut torch --backend sim "$1" --property tp_masks_differ --worker-env RECAP_RANK_FAULT=sp-block-no-fork > spagain.txt 2> err.txt
  grep -Eq "^  tp_masks_differ +incorrect: ranks 0 and 1 drew equal masks" spagain.txt || fail "the sp counterexample did not replay"
  "$recap" replay --sut torch --backend sim "$1" --property tp_masks_differ > spclean.txt 2> err.txt
  grep -Eq "^  tp_masks_differ +passed" spclean.txt || fail "without the fault the sp counterexample should pass"
  ;;
sut_torch_pp_faults)
  # Pipeline stages (issue 22) on the CPU (gloo): cases of pp 2 run on a group of two ranks, one
  # stage each (drivers/recap_drivers/frameworks/torch/pipeline.py), replayed without --ranks (the
  # files' pp starts the group). Clean: pp2-grads (dropout on stage 0 only) is bitwise the one-rank
  # run's and its stages ran 1F1B; pp2-masks (both stages draw) has stages drawing their own streams
  # and the fp64 reference and training, applying each layer's masks from the rank of its stage,
  # pass. Each planted pipeline fault makes its oracle incorrect where the clean run passed it
  # (pp-send-stale on pp2-masks, where grads_match_one_rank is skipped: the fp64 training oracle).
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  grads="$src/tests/cli/data/pp2-grads.json"; masks="$src/tests/cli/data/pp2-masks.json"
  clean_replay "$grads" "$masks"
  expect clean.txt "grads_match_one_rank passed: 345 tensors (37200 elements) of 2 pipeline stages bitwise equal to the one-rank run's" "clean grads: bitwise"
  expect clean.txt "pp_schedule_1f1b  passed: 6 stage schedules (36 events) are 1F1B over 2 stages" "clean grads: 1F1B"
  expect clean.txt "pp_stage_masks_differ passed: 12 draws at equal positions differ across 2 stages" "clean masks: own streams"
  expect clean.txt "grads_match_one_rank skipped: stage 1 draws (.*): a stage is seeded seed + 100 \\* stage" "clean masks: grads skipped with the reason"
  expect clean.txt "outside_masks_equal skipped: 2 pipeline stages of one rank each" "one rank per stage: nothing within a stage"
  grep -Ec "^  reference +passed" clean.txt | grep -q 2 || fail "clean: the fp64 reference did not pass on both files"
  validate_report clean.json
  # one replay per fault (each starts its group); pp-send-stale on both files: grads_match_one_rank
  # on pp2-grads, the fp64 training oracle on pp2-masks (where grads_match_one_rank is skipped)
  for f in pp-stage-seed-shared:pp_stage_masks_differ pp-send-stale:grads_match_one_rank,training \
           pp-schedule-gpipe:pp_schedule_1f1b; do
    rank_fault_caught "${f%%:*}" "${f#*:}" "${f#*:}" "$grads" "$masks"
  done
  expect pp-send-stale.txt "grads_match_one_rank incorrect: 'grad 0 1 0': not bitwise equal to the one-rank run" "pp-send-stale: where"
  expect pp-send-stale.txt "training          incorrect: step 1 vs the fp64 reference" "pp-send-stale: the fp64 training oracle"
  ;;
sut_torch_tp_pp_faults)
  # Tensor parallelism inside pipeline stages (issue 22) on the CPU (gloo): tp 2 in each of pp 2
  # stages, a group of four ranks started from the files' tp * pp. Clean: tp2-pp2-grads (sequence
  # parallel, no draw) equals the one-rank run within the tolerance (not bitwise: tp sums partial
  # products) and its stages ran 1F1B; tp2-pp2-masks has, within each stage, draws inside the regions
  # differing and draws outside them equal, the stages drawing their own streams, and the fp64
  # oracles applying each layer's masks from its stage's ranks. Every planted rank fault but
  # kill-rank makes its oracle incorrect where the clean run passed it.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  grads="$src/tests/cli/data/tp2-pp2-grads.json"; masks="$src/tests/cli/data/tp2-pp2-masks.json"
  clean_replay "$grads" "$masks"
  expect clean.txt "grads_match_one_rank passed: 165 tensors (21120 elements) within 2e-05 of the one-rank run" "clean grads: within the tolerance"
  expect clean.txt "tp_masks_differ       passed: 12 draws inside tensor-parallel regions differ across 4 ranks (2 pairs" "clean masks: per stage"
  expect clean.txt "outside_masks_equal   passed: 36 draws outside tensor-parallel regions equal on the ranks of each of 2 stages" "clean masks: outside"
  expect clean.txt "pp_stage_masks_differ passed: 24 draws at equal positions differ across 2 stages" "clean masks: own streams"
  grep -Ec "^  reference +passed" clean.txt | grep -q 2 || fail "clean: the fp64 reference did not pass on both files"
  validate_report clean.json
  all="rank_recompute_equal,tp_masks_differ,outside_masks_equal,grads_match_one_rank,pp_schedule_1f1b,pp_stage_masks_differ,training"
  rank_faults_caught "$all" tp-seed-shared:tp_masks_differ:masks tp-recompute-stale:rank_recompute_equal:masks \
    dp-seed-per-rank:outside_masks_equal:masks tp-grad-not-reduced:grads_match_one_rank:grads \
    pp-stage-seed-shared:pp_stage_masks_differ:masks pp-send-stale:grads_match_one_rank:grads \
    pp-schedule-gpipe:pp_schedule_1f1b:grads sp-grad-not-reduced:grads_match_one_rank:grads
  ;;
sut_torch_vp_faults)
  # Virtual pipeline stages (issue 22) on the CPU (gloo): pp 2 with vp 2 on a group of two ranks,
  # each holding two model chunks (rank 0 layers 0 and 2, rank 1 layers 1 and 3) run in megatron-core's
  # interleaved 1F1B order. Clean: pp2-vp2-grads (dropout in virtual stage 0 only) is bitwise the
  # one-rank run's; pp2-vp2-masks (every chunk draws) has stages drawing their own streams, its
  # gradient check skipped with the reason, and the fp64 oracles, applying each layer's masks from the
  # rank that ran it, pass. Each planted fault makes its oracle incorrect where the clean run passed it:
  # vp-chunk-layers-contiguous (each rank's chunks contiguous layers, not megatron-core's offset),
  # pp-schedule-gpipe (every chunk of a microbatch in turn), pp-stage-seed-shared, pp-send-stale.
  # tp2-pp2-vp2-grads puts tp 2 (sequence parallel) inside the two stages of two chunks each, on 4
  # ranks: within the tolerance of one rank, interleaved on every rank.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  grads="$src/tests/cli/data/pp2-vp2-grads.json"; masks="$src/tests/cli/data/pp2-vp2-masks.json"
  tpvp="$src/tests/cli/data/tp2-pp2-vp2-grads.json"
  "$recap" replay --sut torch --backend sim "$tpvp" > tpvp.txt 2> err.txt
  rc=$?; cat tpvp.txt
  [ "$rc" -eq 0 ] || { tail -5 err.txt; fail "tp2-pp2-vp2: exit $rc"; }
  expect tpvp.txt "grads_match_one_rank passed: 198 tensors (25344 elements) within 2e-05 of the one-rank run" "tp inside vp: within the tolerance"
  expect tpvp.txt "pp_schedule_1f1b passed: 12 stage schedules (192 events) are interleaved 1F1B over 2 stages of 2 model chunks" "tp inside vp: interleaved"
  clean_replay "$grads" "$masks"
  expect clean.txt "grads_match_one_rank  passed: 234 tensors (30240 elements) of 2 pipeline stages bitwise equal to the one-rank run's" "clean grads: bitwise"
  expect clean.txt "pp_schedule_1f1b      passed: 6 stage schedules (96 events) are interleaved 1F1B over 2 stages of 2 model chunks" "clean: interleaved"
  expect clean.txt "pp_stage_masks_differ passed: 24 draws at equal positions differ across 2 stages" "clean masks: own streams"
  expect clean.txt "grads_match_one_rank  skipped: stage 0 draws in a later model chunk (mlp2.dropout)" "clean masks: grads skipped with the reason"
  grep -Ec "^  reference +passed" clean.txt | grep -q 2 || fail "clean: the fp64 reference did not pass on both files"
  validate_report clean.json
  all="rank_recompute_equal,grads_match_one_rank,pp_schedule_1f1b,pp_stage_masks_differ,reference,training"
  rank_faults_caught "$all" vp-chunk-layers-contiguous:grads_match_one_rank,reference:grads \
    pp-schedule-gpipe:pp_schedule_1f1b:grads pp-stage-seed-shared:pp_stage_masks_differ:masks pp-send-stale:training:masks
  expect pp-schedule-gpipe.txt "event 1 was the forward of microbatch 0 on chunk 1, interleaved 1F1B runs the forward of microbatch 1 on chunk 0" "gpipe: where"
  ;;
sut_torch_dp_faults)
  # Data-parallel replicas (issue 22) on the CPU (gloo), 4 ranks each: tp 2 on dp 2 replicas and
  # pp 2 stages on dp 2 replicas. Replica d runs the step's microbatches 2d and 2d + 1; the replicas
  # sum their gradients before the update. Clean: the gradients equal a one-rank run's within the
  # tolerance, every replica applies the same sum (bitwise), and the fp64 oracles judge each
  # replica's first microbatch; tp2-dp2-masks (dropout inside and outside the regions) draws apart
  # inside each replica's tensor-parallel group and alike outside, and the one-rank comparison is
  # skipped naming why (per-rank generators; dp2-masks, dp 2 of one rank each with dropout outside
  # any region: the replicas are seeded alike). Each planted fault is caught where the clean
  # run passed: dp-grad-not-reduced (dp_grads_reduced, and the fp64 training check on replica 1's
  # microbatch), dp-data-same (every replica reads replica 0's microbatches: the fp64 reference on
  # replica 1's first microbatch, with dropout as without); and the mask checks, now comparing the
  # ranks of one replica, still catch tp-seed-shared and dp-seed-per-rank on tp2-dp2-masks.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  tpdp="$src/tests/cli/data/tp2-dp2-grads.json"; ppdp="$src/tests/cli/data/pp2-dp2-grads.json"
  masks="$src/tests/cli/data/tp2-dp2-masks.json"; dpmasks="$src/tests/cli/data/dp2-masks.json"
  clean_replay "$tpdp" "$ppdp" "$masks" "$dpmasks"
  expect clean.txt "grads_match_one_rank  passed: 264 tensors (21408 elements) within 2e-05 of the one-rank run" "tp dp: within the tolerance"
  expect clean.txt "dp_grads_reduced      passed: 132 step gradients (5544 elements) bitwise equal across 2 replicas; 132 within 2e-05 of the sum of the replicas' own" "tp dp: reduced"
  expect clean.txt "pp_schedule_1f1b      passed: 12 stage schedules (48 events) are 1F1B over 2 stages" "pp dp: each replica 1F1B"
  expect clean.txt "grads_match_one_rank  skipped: 6 draws on 2 data-parallel replicas seeded alike" "dp masks: grads skipped with the reason"
  expect clean.txt "tp_masks_differ       passed: 6 draws inside tensor-parallel regions differ across 4 ranks" "masks: apart inside"
  expect clean.txt "replica 1's first (microbatch 1)" "masks: the fp64 reference on replica 1's microbatch"
  [ "$(grep -Ec "^  dp_grads_reduced +passed" clean.txt)" = 4 ] || fail "clean: dp_grads_reduced did not pass on every file"
  validate_report clean.json
  all="grads_match_one_rank,dp_grads_reduced,tp_masks_differ,outside_masks_equal,reference,training"
  rank_faults_caught "$all" dp-grad-not-reduced:dp_grads_reduced,training:tpdp dp-data-same:grads_match_one_rank,reference:ppdp \
    dp-data-same:reference:masks dp-data-same:reference:dpmasks tp-seed-shared:tp_masks_differ:masks \
    dp-seed-per-rank:outside_masks_equal:masks
  ;;
sut_torch_ranks_shrink_world)
  # --ranks 4 starts groups of 2 and 4 ranks (every divisor above 1) beside the one-rank worker, so
  # that a failure shrinks to the smallest group that still fails. tp-seed-shared needs only a
  # tensor-parallel group: seed 2's first case, tp 2 inside pp 2 (4 ranks), fails, and its
  # counterexample is tp 2 pp 1, a group of 2. A case for a group that was not started (tp 8) is
  # skipped naming the groups there are. Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  shape() {  # JSON-FILE KEY: "tp pp" of the report's first case or counterexample
    "$py" - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j = j["cases"][0]["spec"] if sys.argv[2] == "first" else j["summary"]["failures"][0]["case"]
print(j.get("tp", 1), j.get("pp", 1))
PY
  }
  "$recap" fuzz --sut torch --ranks 4 --backend sim --seed 2 --cases 1 --stop-on-first --shrink-limit 16 \
    --worker-env RECAP_RANK_FAULT=tp-seed-shared --property tp_masks_differ --corpus-dir found --report r.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "tp-seed-shared on --ranks 4: exit $rc, expected 1"; }
  validate_report r.json
  [ "$(shape r.json first)" = "2 2" ] || fail "seed 2's first case is not tp 2 pp 2: $(shape r.json first)"
  [ "$(shape r.json found)" = "2 1" ] || fail "the counterexample did not shrink to a group of 2: $(shape r.json found)"
  "$py" -c "import json; c = json.load(open('$src/tests/cli/data/tp2-masks.json')); c['tp'] = 8; c['layers'][0]['heads'] = 8; c['hidden'] = 16; json.dump(c, open('tp8.json', 'w'))"
  "$recap" replay --sut torch --ranks 4 --backend sim tp8.json > tp8.txt 2> err.txt
  rc=$?; cat tp8.txt
  grep -q "skipped: the system under test cannot run this case: tp 8 pp 1: no rank group of 8 ranks (--ranks 4 started groups of 2, 4)" tp8.txt || fail "tp 8 on --ranks 4 (exit $rc)"
  ;;
sut_torch_ranks_report_independent_of_jobs)
  # Determinism with rank groups: the same seed gives the same report (timings aside) with --jobs 1
  # and 2, each job starting its own groups of 2 and 4 ranks (--ranks 4). Seed 5's 8 cases draw
  # shapes of both groups and one rank, sp among them (checked: not vacuous). Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  canon="$src/scripts/report-canon.py"
  for j in 1 2; do
    "$recap" fuzz --sut torch --ranks 4 --backend sim --seed 5 --cases 8 --shrink-limit 4 --jobs $j --corpus-dir c$j \
      --report r$j.json > out$j.txt 2> err$j.txt
    rc=$?; [ "$rc" -eq 0 ] || { tail -5 err$j.txt; fail "--jobs $j: exit $rc"; }
    "$py" "$canon" r$j.json > r$j.canon || fail "r$j.json: cannot read the report"
  done
  cmp -s r1.canon r2.canon || { diff r1.canon r2.canon | head -20; fail "--ranks 4: the --jobs 2 report differs"; }
  "$py" -c '
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
worlds = {c["spec"].get("tp", 1) * c["spec"].get("pp", 1) for c in cases}
assert worlds == {1, 2, 4} and any(c["spec"].get("sp") for c in cases), (worlds, len(cases))
print(len(cases), "cases on groups of", sorted(worlds))' r1.json || fail "vacuous: the shapes drawn"
  ;;
sut_torch_pp_fuzz_shrinks)
  # recap fuzz --sut torch --ranks 2 on the CPU draws pp from the group's hello (capabilities.pp),
  # early, so it shrinks toward 1 first. pp-send-stale (a stage sends the previous microbatch's
  # activation) fails the fp64 training oracle on the group alone: its counterexample keeps pp 2
  # while the rest shrinks, and its corpus file replays incorrect with the fault and passes without
  # it. Seed 8's first case is of pp 2 (the report lists it). Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  "$recap" fuzz --sut torch --ranks 2 --backend sim --seed 8 --cases 1 --stop-on-first --shrink-limit 12 \
    --worker-env RECAP_RANK_FAULT=pp-send-stale --property training --corpus-dir found --report r.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "pp-send-stale: exit $rc, expected 1"; }
  validate_report r.json
  [ "$(field r.json first pp)" = 2 ] || fail "the first case is not of pp 2"
  [ "$(field r.json found pp)" = 2 ] || fail "pp-send-stale fails on the group alone: its counterexample must keep pp 2"
  "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(len(j["summary"]["failures"][0]["case"]["layers"]) != 2)' r.json ||
    fail "the counterexample did not shrink to one layer per stage"
  grep -q "diagnosis: a pipeline stage's gradients or parameters differ from the fp64 reference's" out.txt || fail "the diagnosis"
  counterexample_replays pp-send-stale training
  [ "$(field "$cx" file pp)" = 2 ] || fail "$cx: not of pp 2"
  ;;
sut_torch_vp_fuzz_shrinks)
  # recap fuzz --sut torch --ranks 2 draws vp from the group's hello (capabilities.vp) for pp cases.
  # vp-chunk-layers-contiguous fails only with virtual stages (at vp 1 its layout is megatron-core's):
  # seed 1 finds it, and its counterexample keeps pp 2 and vp 2 while the layers shrink to one per
  # chunk; it replays incorrect with the fault and passes without it. Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  "$recap" fuzz --sut torch --ranks 2 --backend sim --seed 1 --cases 12 --stop-on-first --shrink-limit 12 \
    --worker-env RECAP_RANK_FAULT=vp-chunk-layers-contiguous --property reference,grads_match_one_rank \
    --corpus-dir found --report r.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "vp-chunk-layers-contiguous: exit $rc, expected 1"; }
  validate_report r.json
  [ "$(field r.json found pp)" = 2 ] && [ "$(field r.json found vp)" = 2 ] ||
    fail "the fault needs virtual stages: the counterexample must keep pp 2 and vp 2"
  "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(len(j["summary"]["failures"][0]["case"]["layers"]) != 4)' r.json ||
    fail "the counterexample did not shrink to one layer per model chunk"
  grep -q "diagnosis: with virtual pipeline stages, the group's gradients differ from one rank's" out.txt || fail "the diagnosis"
  grep -q "vp=2" out.txt || fail "the classification does not count vp cases"
  counterexample_replays vp-chunk-layers-contiguous reference
  ;;
sut_torch_dp_fuzz_shrinks)
  # recap fuzz --sut torch --ranks 2 draws dp from the group's hello (capabilities.dp), turning a
  # one-rank shape into replicas of one rank. dp-grad-not-reduced acts only with replicas: seed 1
  # finds it, its counterexample keeps dp 2 (two microbatches, one per replica) while the rest
  # shrinks, it is diagnosed as the missing all-reduce, replays incorrect with the fault and passes
  # without it. Skipped (77) without torch.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  "$recap" fuzz --sut torch --ranks 2 --backend sim --seed 1 --cases 30 --stop-on-first --shrink-limit 30 \
    --worker-env RECAP_RANK_FAULT=dp-grad-not-reduced --property dp_grads_reduced,grads_match_one_rank \
    --corpus-dir found --report r.json > out.txt 2> err.txt
  rc=$?; cat out.txt
  [ "$rc" -eq 1 ] || { tail -5 err.txt; fail "dp-grad-not-reduced: exit $rc, expected 1"; }
  validate_report r.json
  [ "$(field r.json found dp)" = 2 ] && [ "$(field r.json found microbatches)" = 2 ] ||
    fail "the fault needs replicas: the counterexample must keep dp 2 with one microbatch each"
  [ "$(field r.json found tp)" = 1 ] && [ "$(field r.json found pp)" = 1 ] || fail "tp and pp must shrink away"
  grep -q "diagnosis: data-parallel replicas applied gradients that are not the sum over the replicas" out.txt || fail "the diagnosis"
  grep -q "dp=2" out.txt || fail "the classification does not count dp cases"
  counterexample_replays dp-grad-not-reduced dp_grads_reduced
  ;;
sut_torch_planted_faults)
  # No verdict without evidence, on a real torch (CPU): planted driver faults (RECAP_DRIVER_FAULT,
  # drivers/PROTOCOL.md) make the driver report less than happened; each must turn the check that
  # depends on it skipped or incorrect, never passed. The clean run first: its checks pass with
  # their evidence, and hygiene (which no framework driver observes) is skipped, not passed.
  py=${RECAP_PYTHON:-python3}
  need_torch "$py"
  eager="$src/tests/cli/data/torch-naive-eager.json"
  run_fault() {  # FAULT CASE: replay with the fault planted in the worker; the output in FAULT.txt
    if [ "$1" = none ]; then "$recap" replay --sut torch --backend sim "$2" > "$1.txt" 2> err.txt
    else "$recap" replay --sut torch --backend sim "$2" --worker-env "RECAP_DRIVER_FAULT=$1" > "$1.txt" 2> err.txt; fi
    echo "== $1: exit $?"; cat "$1.txt"
  }
  run_fault none "$eager"
  expect none.txt "rng_ledger        passed" "clean: rng_ledger"
  expect none.txt "recompute draws equal their checkpointed forward draws" "clean: rng_ledger's evidence"
  expect none.txt "hygiene           skipped" "clean: hygiene is not observed on torch, so skipped"
  run_fault no-recompute-draws "$eager"
  expect no-recompute-draws.txt "rng_ledger        incorrect" "no recompute draws observed"
  run_fault drop-recompute-mask "$eager"
  expect drop-recompute-mask.txt "rng_ledger        incorrect" "one recompute mask missing"
  run_fault twin-fails "$eager"
  expect twin-fails.txt "recompute_on_off  skipped" "a no-checkpoint twin that fails: recompute_on_off"
  expect twin-fails.txt "memory            skipped" "a no-checkpoint twin that fails: memory"
  run_fault no-graphs "$src/tests/cli/data/torch-per-layer-no-graphs.json"
  expect no-graphs.txt "capture_clean     crashed: driver error" "graphs asked for, none observed"
  for f in none no-recompute-draws drop-recompute-mask twin-fails no-graphs; do
    if grep -E "^ *(rng_ledger|recompute_on_off|memory|hygiene|eager_vs_graphed) +passed" "$f.txt" |
       grep -E "$(case $f in no-recompute-draws|drop-recompute-mask) echo rng_ledger;; twin-fails) echo 'recompute_on_off|memory';; no-graphs) echo eager_vs_graphed;; none) echo hygiene;; esac)"; then
      fail "$f: the check it starves passed"
    fi
  done
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
merge_shards_equal_one_run)
  # recap merge (issue 20): the reports and corpora of --shard 0/3, 1/3 and 2/3 (each with its own
  # --corpus-dir) merged equal one --jobs 3 run's: the report in canonical form byte for byte, the
  # corpus file for file. Not vacuous: the campaign fails (exit 1) with counterexamples written, and
  # the shards wrote more files than the campaign keeps (a bucket found in several shards keeps the
  # lowest chunk's), so a merge that dropped a case or a file, or copied every shard's, differs.
  # Then every refusal (exit 2, one line naming the file), and a partial shard: refused, merged with
  # --allow-partial, and finished by fuzz --resume into the whole campaign.
  py=$(command -v /usr/bin/python3 || command -v python3)
  canon="$src/scripts/report-canon.py"
  args="--backend sim --seed 7 --cases 450 --shrink-limit 5"
  for i in 0 1 2; do
    "$recap" fuzz $args --shard $i/3 --corpus-dir c$i --report s$i.json > /dev/null; rc=$?
    [ "$rc" -le 1 ] || fail "shard $i/3: exit $rc"
  done
  "$recap" fuzz $args --jobs 3 --corpus-dir one --report one.json > /dev/null; rc=$?
  [ "$rc" -eq 1 ] || fail "--jobs 3: exit $rc, expected 1"
  "$py" "$canon" one.json > one.canon
  "$recap" merge s2.json s0.json s1.json --report m.json --corpus-dir m --junit m.xml > out.txt; rc=$?
  head -3 out.txt
  [ "$rc" -eq 1 ] || fail "merge: exit $rc, expected 1 (the campaign has failures)"
  "$py" "$canon" m.json > m.canon
  cmp -s one.canon m.canon || { diff one.canon m.canon | head -20; fail "the merged report differs from one --jobs 3 run's"; }
  diff -r one m || fail "the merged corpus differs from one --jobs 3 run's"
  validate_report m.json
  check_junit m.xml
  "$py" - <<'PY' || fail "vacuous, or the merged context"
import json, os
one, m = (json.load(open(p)) for p in ("one.json", "m.json"))
kept = sorted(os.listdir("one"))
shards = sorted({f for d in ("c0", "c1", "c2") for f in os.listdir(d)})
assert kept and set(kept) < set(shards), (kept, shards)  # some shard files are not the campaign's
assert len({c for c in one["summary"]["report_chunks"]}) == 5 and one["summary"]["cases"] == 450
owners = {f["chunk"] % 3 for f in m["summary"]["failures"] if f["corpus_file"]}
assert len(owners) > 1, owners  # the kept counterexamples come from more than one shard
ctx = m["context"]
assert ctx["shard"] == "0/1" and ctx["merged_from"] == ["s0.json", "s1.json", "s2.json"] and ctx["command"] == "fuzz", ctx
assert all(f["corpus_file"].startswith("m/") for f in m["summary"]["failures"] if f["corpus_file"])
print("merged:", m["summary"]["cases"], "cases,", len(kept), "corpus files of", len(shards), "the shards wrote, from shards", sorted(owners))
PY
  # --known-findings: the shards' judgements sum up to the campaign's (one bucket known in every
  # shard, the others new), the same report and corpus as one run; a bucket known in one shard but
  # with new cases in another (made up here) is refused.
  "$py" - <<'PY' || fail "cannot make the known findings"
import json
b = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
assert b in json.load(open("one.json"))["summary"]["buckets"]
json.dump({"schema": "recap.known-findings/1", "findings": [{"id": "K1", "summary": "naive capture", "buckets": [b], "when": {}}]}, open("known.json", "w"))
PY
  for i in 0 1 2; do "$recap" fuzz $args --known-findings known.json --shard $i/3 --corpus-dir kc$i --report ks$i.json > /dev/null; done
  "$recap" fuzz $args --known-findings known.json --jobs 3 --corpus-dir kone --report kone.json > /dev/null; rc=$?
  [ "$rc" -eq 1 ] || fail "--known-findings --jobs 3: exit $rc, expected 1"
  "$recap" merge ks0.json ks1.json ks2.json --report km.json --corpus-dir km > km.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat km.txt; fail "--known-findings merge: exit $rc, expected 1"; }
  grep -q "(known: K1 [0-9]*)" km.txt || fail "--known-findings merge: the known bucket is not marked"
  "$py" "$canon" kone.json > kone.canon; "$py" "$canon" km.json > km.canon
  cmp -s kone.canon km.canon || { diff kone.canon km.canon | head -20; fail "--known-findings: the merged report differs from one run's"; }
  diff -r kone km || fail "--known-findings: the merged corpus differs from one run's"
  "$py" - <<'PY' || fail "--known-findings: vacuous, or cannot make the inconsistent shard"
import json
m = json.load(open("km.json"))["summary"]
k = m["known_findings"]["buckets"]["capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"]
assert k["known"] and k["accepted"]["K1"] > 1 and any(f["known"] for f in m["failures"]) and any(not f["known"] for f in m["failures"]), k
r = json.load(open("ks1.json"))
r["summary"]["known_findings"]["buckets"]["capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"]["new"] = 1
json.dump(r, open("ks1-new.json", "w"))
print("known findings merged:", k)
PY
  # Refusals: exit 2 and one line naming the file and the problem.
  refused() {  # PATTERN REPORT...
    pat="$1"; shift
    "$recap" merge "$@" --report bad.json > /dev/null 2> err.txt; rc=$?
    { [ "$rc" -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -Eq "$pat" err.txt; } ||
      { cat err.txt; fail "merge $*: exit $rc, expected 2 and one line matching '$pat'"; }
    echo "refused: $(cat err.txt)"
  }
  "$py" - <<'PY' || fail "cannot make the bad reports"
import json, os, shutil
s0, s1, s2 = (json.load(open(f"s{i}.json")) for i in range(3))
def bad(name, base, edit):
    r = json.loads(json.dumps(base)); edit(r); json.dump(r, open(name, "w"))
bad("seed.json", s1, lambda r: r["context"].update(seed=8))
bad("cases.json", s1, lambda r: r["context"].update(cases_requested=451))
bad("flag.json", s1, lambda r: r["context"]["flags"].update(shrink_limit=6))
bad("commit.json", s1, lambda r: r["context"].update(git_commit="0" * 40))
bad("version.json", s1, lambda r: r["context"].update(recap_version="0.0.9"))
bad("sut.json", s1, lambda r: r["context"]["sut"].update(name="recap-worker"))
bad("count.json", s1, lambda r: r["context"].update(shard="1/4"))
bad("old.json", s1, lambda r: r["context"].pop("flags"))
bad("overlap.json", s1, lambda r: r["summary"]["report_chunks"].__setitem__(0, 0))
bad("gate.json", s1, lambda r: r["context"].update(command="gate"))
open("truncated.json", "w").write(open("s1.json").read()[:1000])
# a kept counterexample of shard 1 whose file is gone; shard 0's kept file copied under shard 1's name with other bytes
m = json.load(open("m.json"))
mine = lambda k: [f for f in m["summary"]["failures"] if f["corpus_file"] and f["chunk"] % 3 == k]
k = 1 if mine(1) else 2
f1 = os.path.basename(mine(k)[0]["corpus_file"])
shutil.copytree(f"c{k}", "gone"); os.remove(f"gone/{f1}")
bad("gone.json", [s0, s1, s2][k], lambda r: [f.update(corpus_file="gone/" + os.path.basename(f["corpus_file"])) for f in r["summary"]["failures"] if f["corpus_file"]])
f0 = os.path.basename(mine(0)[0]["corpus_file"])
os.makedirs("clash"); open(f"clash/{f0}", "w").write(open(f"c{k}/{f1}").read())
def clash(r):
    for f in r["summary"]["failures"]:
        if os.path.basename(f["corpus_file"]) == f1: f["corpus_file"] = f"clash/{f0}"
bad("clash.json", [s0, s1, s2][k], clash)
print(f"shard {k}: its kept file {f1}")
open("k.txt", "w").write(str(k))
PY
  k=$(cat k.txt)
  others=$(for i in 0 1 2; do [ $i -eq $k ] || printf 's%s.json ' $i; done)
  refused "^recap: error: cannot open 'nope.json'" s0.json nope.json s2.json
  refused "^recap: error: truncated.json: malformed JSON" s0.json truncated.json s2.json
  refused "^recap: error: .*pool-order.json: not a recap.report/1" s0.json "$src/corpus/mutants/pool-order.json"
  refused "^recap: error: gate.json: a report of recap gate, not of recap fuzz$" s0.json gate.json s2.json
  refused "^recap: error: old.json: its context names no flags" s0.json old.json s2.json
  refused "^recap: error: seed.json: not a shard of the campaign of s0.json: its seed is 8, 7 there$" s0.json seed.json s2.json
  refused "^recap: error: cases.json: .*its cases_requested is 451, 450 there$" s0.json cases.json s2.json
  refused "^recap: error: flag.json: .*its flags.shrink_limit is 6, 5 there$" s0.json flag.json s2.json
  refused "^recap: error: commit.json: .*its git_commit is \"0000" s0.json commit.json s2.json
  refused "^recap: error: version.json: .*its recap_version is \"0.0.9\"" s0.json version.json s2.json
  refused "^recap: error: sut.json: .*its system under test is .*recap-worker" s0.json sut.json s2.json
  refused "^recap: error: count.json: shard 1/4, but s0.json is shard 0/3: the shard counts differ$" s0.json count.json s2.json
  refused "^recap: error: s1.json: shard 1/3 is given twice \\(also s1.json\\)$" s0.json s1.json s1.json s2.json
  refused "^recap: error: shard 2/3 is missing: .*--allow-partial" s0.json s1.json
  refused "^recap: error: overlap.json: it holds chunk 0 \\(cases 0-99\\), which shard 1/3 does not run" s0.json overlap.json s2.json
  refused "^recap: error: gone.json: its corpus file gone/.* is missing" gone.json $others --corpus-dir mg
  refused "^recap: error: two different corpus files named " clash.json $others --corpus-dir mc
  refused "^recap: error: ks0.json: bucket capture_clean/failed/.* is known there but has new cases in shard 1/3" ks0.json ks1-new.json ks2.json
  # A partial shard: shard 0 stopped by SIGTERM in its first chunk (0), its second (3) complete, as
  # when a worker of --jobs 2 was stopped (one that stopped before a case ended has no case of the chunk).
  "$py" - <<'PY' || fail "cannot make the partial shard"
import json
r = json.load(open("s0.json")); s = r["summary"]
gone = [c for c in s["chunks"] if c["chunk"] == 0][0]
s["chunks"] = [c for c in s["chunks"] if c["chunk"] != 0]
keep = [i for i, c in enumerate(s["report_chunks"]) if c != 0]
r["cases"] = [r["cases"][i] for i in keep]; s["report_chunks"] = [s["report_chunks"][i] for i in keep]
s["failures"] = [f for f in s["failures"] if f["chunk"] != 0]
s["cases"] -= gone["cases"]
for key in ("by_disposition", "classification", "buckets"):
    for k, v in gone[key].items():
        s[key][k] -= v
        if s[key][k] == 0: del s[key][k]
s["interrupted"] = "Terminated"; s["exit_code"] = 143
json.dump(r, open("s0-cut.json", "w"))
PY
  refused "^recap: error: shard 0/3 \\(s0-cut.json\\) was interrupted \\(Terminated\\): .*--allow-partial" s0-cut.json s1.json s2.json
  "$recap" merge s0-cut.json s1.json s2.json --allow-partial --report part.json --corpus-dir fin > part.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat part.txt; fail "--allow-partial: exit $rc, expected 1"; }
  grep -q "interrupted (shard 0/3 (s0-cut.json) was interrupted (Terminated))" part.txt || { cat part.txt; fail "--allow-partial: the partial shard is not named"; }
  validate_report part.json
  "$py" -c 'import json,sys; s=json.load(open("part.json"))["summary"]; assert s["cases"] == 350 and "shard 0/3" in s["interrupted"], (s["cases"], s.get("interrupted")); print("partial merge:", s["cases"], "cases:", s["interrupted"])' ||
    fail "--allow-partial: the partial report"
  # later chunks stood for buckets whose lowest chunk (0) is missing: their files go when it runs
  "$py" -c 'import os,sys; extra=set(os.listdir("fin")) - set(os.listdir("one")); assert extra, "vacuous"; print("partial corpus:", len(extra), "files of later chunks that chunk 0 replaces")' ||
    fail "--allow-partial: no counterexample of a later chunk for the resumed run to replace"
  "$recap" fuzz $args --corpus-dir fin --report fin.json --resume part.json > /dev/null; rc=$?
  [ "$rc" -eq 1 ] || fail "--resume of the partial merge: exit $rc, expected 1"
  "$py" "$canon" fin.json > fin.canon
  cmp -s one.canon fin.canon || { diff one.canon fin.canon | head -20; fail "--resume of the partial merge: not the campaign's report"; }
  diff -r one fin || fail "--resume of the partial merge: not the campaign's corpus"
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
mutants_kill_gate)
  # recap mutants on sim: clean baselines; every fault killed but the listed survivors (and a
  # listed survivor that is killed fails too, so the list stays true); time to kill median <= 2 s,
  # none over 30 s; every shrunk case at most 3 layers; each kill's corpus file carries its fault
  # and replays with its verdict; the report validates in shape; exit 1 while any survives.
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$recap" mutants --backend sim --seed 1 --cases 300 --report m.json --corpus-dir mc > out.txt; rc=$?
  cat out.txt
  survivors=$(grep -v '^#' "$src/tests/cli/data/mutants-survivors.txt" | grep -c .)
  if [ "$survivors" -gt 0 ]; then [ "$rc" -eq 1 ] || fail "exit $rc with survivors, expected 1"; else [ "$rc" -eq 0 ] || fail "exit $rc"; fi
  "$py" - m.json "$src/tests/cli/data/mutants-survivors.txt" <<'PY' || fail "mutants report"
import json, sys, statistics
r = json.load(open(sys.argv[1]))
allowed = {l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")}
assert r["schema"] == "recap.mutants/1"
assert r["baselines"] and all(b["passed"] and b["cases"] == 300 for b in r["baselines"]), r["baselines"]
ms = r["mutants"]
assert len(ms) >= 13, len(ms)
survived = {m["fault"] for m in ms if m["verdict"] == "survived"}
assert survived == allowed, f"survived {sorted(survived)}, listed {sorted(allowed)}"
killed = [m for m in ms if m["verdict"] == "killed"]
times = [m["seconds"] for m in killed]
assert statistics.median(times) <= 2.0 and max(times) <= 30.0, times
assert all(1 <= m["layers"] <= 3 for m in killed), [(m["fault"], m["layers"]) for m in killed]
for m in killed:
    case = json.load(open(m["corpus_file"]))
    assert case["faults"] == [m["fault"]], (m["fault"], case.get("faults"))
    assert case["expected"]["property"] == m["property"], m
print(len(killed), "killed, median", statistics.median(times), "s")
PY
  for f in mc/*.json; do "$recap" replay --backend sim "$f" > rep.txt || { cat rep.txt; fail "$f does not replay as expected"; }; done
  ;;
fuzz_three_faults_three_buckets)
  # Three faults at once, each breaking another mechanism: one campaign reports a bucket for each
  # (a divergence from eager, hygiene after a failed capture, a recompute that differs from the
  # forward), shrinks each and writes each with the three faults it needs.
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$recap" fuzz --backend sim --policy skip --seed 1 --cases 300 --fault rng-snapshot-is-handle \
    --fault static-input-stale --fault phase-flag-leak --corpus-dir f3 --report f3.json > out.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat out.txt; fail "exit $rc, expected 1"; }
  "$py" - f3.json <<'PY' || fail "three buckets"
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
b = [f["bucket"] for f in s["failures"]]
props = {x.split("/")[0] for x in b}
assert "eager_vs_graphed" in props and "hygiene" in props and props & {"recompute_on_off", "rng_ledger"}, b
# A bucket that did not fail again when its case ran alone is flaky and has no file: here the
# memory model's, in cases after one whose failed capture leaked its phase flag (hygiene's bucket).
written = [f for f in s["failures"] if not f.get("flaky")]
assert {f["bucket"].split("/")[0] for f in written} >= {"eager_vs_graphed", "hygiene"}, b
for f in written:
    c = json.load(open(f["corpus_file"]))
    assert sorted(c["faults"]) == ["phase-flag-leak", "rng-snapshot-is-handle", "static-input-stale"], c.get("faults")
print(len(b), "buckets:", ", ".join(b))
PY
  for f in f3/*.json; do "$recap" replay --backend sim "$f" > rep.txt || { cat rep.txt; fail "$f does not replay as expected"; }; done
  ;;
fuzz_segfault_is_a_finding)
  # layer-segfault kills the process that runs a case. In recap's own process it is refused (exit
  # 2); with --sut recap-worker each case runs in a worker: the case that killed it is crashed with
  # its signal, shrunk in workers (each death costs one), written as `crashed`, and the campaign
  # goes on to its last case.
  "$recap" fuzz --backend sim --fault layer-segfault --cases 5 --seed 1 > refused.txt 2>&1; rc=$?
  [ "$rc" -eq 2 ] && grep -q "use --sut recap-worker" refused.txt || { cat refused.txt; fail "in process: exit $rc, expected 2"; }
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$recap" fuzz --backend sim --sut recap-worker --policy graph-safe --fault layer-segfault --seed 1 --cases 40 \
    --corpus-dir seg --report seg.json > out.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat out.txt; fail "exit $rc, expected 1"; }
  "$py" - seg.json <<'PY' || fail "crashed bucket"
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
assert s["cases"] == 40, s["cases"]  # every case ran: a dead worker costs its case only
assert s["buckets"].get("capture_clean/crashed//SIGSEGV/", 0) > 0, s["buckets"]
f = [f for f in s["failures"] if f["bucket"] == "capture_clean/crashed//SIGSEGV/"][0]
c = json.load(open(f["corpus_file"]))
assert c["expected"] == {"disposition": "crashed", "property": "capture_clean", "error": "SIGSEGV"}, c["expected"]
assert c["sut"]["name"] == "recap-worker" and c["faults"] == ["layer-segfault"], (c["sut"], c["faults"])
assert len(c["layers"]) == 1 and f["shrinks"] > 0, (len(c["layers"]), f["shrinks"])
print("crashed:", f["reason"][:120])
PY
  for f in seg/*.json; do "$recap" replay --backend sim "$f" > rep.txt || { cat rep.txt; fail "$f does not replay as expected"; }; done
  ;;
mutants_diagnosed)
  # Every fault's reproducer is diagnosed as its bug class (docs/faults.md's table): the rules read
  # symptoms and configuration only, never the case's "faults".
  bad=0
  while read -r fault want; do
    d=$("$recap" replay --backend sim "$src/corpus/mutants/$fault.json" | grep "^  diagnosis: " | head -n 1)
    case "$want" in
      [0-9]*) classes=$(printf '%s' "$d" | sed -n 's/^  diagnosis: class \([^:]*\):.*/\1/p' | tr -c '0-9\n' ' ')
              case " $classes " in *" $want "*) ;; *) echo "$fault: want class $want, got: $d"; bad=1 ;; esac ;;
      *) case "$d" in *"$want"*) ;; *) echo "$fault: want '$want', got: $d"; bad=1 ;; esac ;;
    esac
  done <<'ROWS'
rng-snapshot-is-handle 3
rng-offset-baked 4
generator-not-registered 5
phase-flag-leak 6
warmup-consumes-rng 7
static-input-stale 8
free-under-graph 9
microbatch-index 10
hidden-param-grad 11
pool-order 13
alloc-in-capture 14
side-stream-unjoined 15
restore-across-capture 16
tracker-keys-drift 17
output-aliases-input-freed 19
warmup-mutates-buffers 21
grad-aliases-static 24
philox-increment-short 26
graph-pool-leak 27
without-output-not-rebound 19
recompute-saves-nothing 2
pool-no-reuse graph pools reserve other bytes than the memory model predicts
grad-accum-not-zeroed gradients not zeroed
grad-buffer-empty nothing wrote since it was allocated
layer-segfault died of a signal
ROWS
  [ "$bad" -eq 0 ] || fail "a reproducer is not diagnosed as its class"
  [ "$(ls "$src"/corpus/mutants/*.json | wc -l)" -eq 25 ] || fail "a fault without a row here"
  ;;
fuzz_differential_sim)
  # Property differential, sim against sim (a self-check: the only pair the CPU runs). 50 cases of
  # every policy judged by differential alone: exit 0, each case checked, passed with its evidence
  # (runs that fail, fail the same way on both), none failing. 20 graph-safe cases with every
  # property: exit 0, differential among the checks. Without --differential no case has the check
  # (off unless asked). The reports validate.
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$recap" fuzz --backend sim --differential sim --property differential --cases 50 --seed 1 --report d.json --corpus-dir dc > out.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat out.txt; fail "exit $rc"; }
  validate_report d.json
  "$recap" fuzz --backend sim --differential sim --policy graph-safe --cases 20 --seed 1 --report all.json --corpus-dir ac > out2.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat out2.txt; fail "exit $rc with every property"; }
  "$recap" fuzz --backend sim --policy graph-safe --cases 5 --seed 1 --report plain.json --corpus-dir pc > /dev/null || fail "fuzz without --differential"
  "$py" - d.json all.json plain.json <<'PY' || fail "differential report"
import json, sys
def diff_checks(r):
    return [c for case in r["cases"] for c in case["checks"] if c["property"] == "differential"]
r = json.load(open(sys.argv[1]))
assert r["context"]["flags"]["differential"] == "sim", r["context"]["flags"]
checks = diff_checks(r)
passed = [c for c in checks if c["disposition"] == "passed"]
assert len(checks) >= 45, len(checks)
assert len(passed) >= 40, [c.get("reason") for c in checks if c["disposition"] != "passed"][:5]
assert all(c["disposition"] in ("passed", "skipped") for c in checks), [c for c in checks if c["disposition"] not in ("passed", "skipped")][:2]
for c in passed:
    e = c["evidence"]
    assert e.startswith("sim vs sim: both "), e
    assert "ledger entries bitwise equal" in e and "worst relative error 0.00e+00" in e, e
failed_alike = [c for c in passed if "both failed the same way" in c["evidence"]]
a = json.load(open(sys.argv[2]))
assert len([c for c in diff_checks(a) if c["disposition"] == "passed"]) >= 15, diff_checks(a)[:3]
assert {c["property"] for case in a["cases"] for c in case["checks"]} >= {"capture_clean", "eager_vs_graphed", "differential"}
plain = json.load(open(sys.argv[3]))
assert "differential" not in plain["context"]["flags"], plain["context"]["flags"]
assert not diff_checks(plain)
print(len(passed), "of", len(checks), "differential checks passed,", len(failed_alike), "of them runs that failed alike; e.g.", passed[0]["evidence"])
PY
  # A counterexample's file names the backend it was judged against (expected.differential):
  # replay judges differential without the flag, and not without that key.
  "$py" - "$src/corpus/graph-safe-eager.json" named.json <<'PY' || fail "writing named.json"
import json, sys
c = json.load(open(sys.argv[1]))
c["expected"] = {"disposition": "passed", "differential": "sim"}
json.dump(c, open(sys.argv[2], "w"))
PY
  "$recap" replay --backend sim named.json > rn.txt || { cat rn.txt; fail "replay of named.json"; }
  grep -Eq "^  differential +passed" rn.txt || { cat rn.txt; fail "replay did not judge differential from expected.differential"; }
  "$recap" replay --backend sim "$src/corpus/graph-safe-eager.json" > rp.txt || fail "plain replay"
  ! grep -Eq "^  differential " rp.txt || { cat rp.txt; fail "plain replay judged differential"; }
  ;;
report_names_the_given_commit)
  # RECAP_GIT_COMMIT names the commit in the report (a copy of the tree whose .git is not the
  # tree's), full or abbreviated; anything else is not a commit and is ignored.
  py=$(command -v /usr/bin/python3 || command -v python3)
  for given in 7baef9e 0123456789abcdef0123456789abcdef01234567 not-a-hash; do
    RECAP_GIT_COMMIT=$given "$recap" fuzz --backend sim --policy graph-safe --cases 2 --seed 1 --corpus-dir found \
      --report "r-$given.json" > /dev/null || fail "fuzz with RECAP_GIT_COMMIT=$given"
    got=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["context"]["git_commit"])' "r-$given.json")
    if [ "$given" = not-a-hash ]; then [ "$got" != "$given" ] || fail "a non-hash was taken as the commit"
    else [ "$got" = "$given" ] || fail "RECAP_GIT_COMMIT=$given: the report names '$got'"; fi
  done
  ;;
fuzz_resume_finishes_the_campaign)
  # A campaign stopped by SIGTERM and resumed from its partial report (--resume) ends with the
  # report and corpus of the uninterrupted run, timings and context aside: in process and with
  # --jobs 2. A report of another campaign, or a file that is not a report, is a one-line exit 2.
  py=$(command -v /usr/bin/python3 || command -v python3)
  canon="$src/scripts/report-canon.py"
  args="--backend sim --seed 2 --cases 800 --shrink-limit 5"
  "$recap" fuzz $args --corpus-dir full --report full.json > /dev/null; rc=$?
  [ "$rc" -eq 1 ] || fail "uninterrupted: exit $rc, expected 1"
  "$py" "$canon" full.json > full.canon
  for jobs in 1 2; do
    # stopped after 2 s; on a loaded machine no case may have ended by then: later, up to 8 s
    for after in 2 4 8; do
      rm -rf c$jobs
      "$recap" fuzz $args --jobs $jobs --corpus-dir c$jobs --report part$jobs.json > /dev/null 2>&1 &
      pid=$!
      sleep $after
      kill -TERM $pid
      wait $pid; rc=$?
      [ "$rc" -eq 143 ] || fail "--jobs $jobs: exit $rc after SIGTERM at $after s, expected 143"
      "$py" - part$jobs.json <<'PY' && break
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
ok = 0 < s["cases"] < 800 and not all(c["complete"] for c in s["chunks"])
print("partial:" if ok else "not partial:", s["cases"], "cases,", sum(c["complete"] for c in s["chunks"]), "complete chunks")
sys.exit(0 if ok else 1)
PY
      [ "$after" -lt 8 ] || fail "--jobs $jobs: no partial report after 2, 4 or 8 s"
    done
    "$recap" fuzz $args --jobs $jobs --corpus-dir c$jobs --report final$jobs.json --resume part$jobs.json > /dev/null; rc=$?
    [ "$rc" -eq 1 ] || fail "--jobs $jobs: resumed: exit $rc, expected 1"
    "$py" "$canon" final$jobs.json > final$jobs.canon
    cmp -s full.canon final$jobs.canon || { diff full.canon final$jobs.canon | head -20; fail "--jobs $jobs: the resumed report differs"; }
    diff -r full c$jobs > /dev/null || fail "--jobs $jobs: the resumed corpus differs"
  done
  # A counterexample the interrupted run wrote for a chunk that runs again (a shrink cut short, or a
  # later chunk's case standing for a bucket whose lowest chunk had not reached it) is removed when
  # the resumed run does not write it again (CI once kept such a file): one made up here.
  "$py" - part1.json full.json <<'PY' || fail "cannot make the partial report with a stale file"
import json, sys
part, full = (json.load(open(p)) for p in sys.argv[1:])
rerun = [c["chunk"] for c in part["summary"]["chunks"] if not c["complete"]]
f = dict(full["summary"]["failures"][0], chunk=rerun[0], corpus_file="c1/stale-from-the-interrupted-run.json")
part["summary"]["failures"].append(f)
json.dump(part, open("part1-stale.json", "w"))
open(f["corpus_file"], "w").write("{}")
PY
  "$recap" fuzz $args --corpus-dir c1 --report final-stale.json --resume part1-stale.json > /dev/null; rc=$?
  [ "$rc" -eq 1 ] || fail "resumed with a stale file: exit $rc, expected 1"
  [ ! -e c1/stale-from-the-interrupted-run.json ] || fail "the interrupted run's file of a re-run chunk was kept"
  diff -r full c1 > /dev/null || fail "resumed with a stale file: the corpus differs"
  "$recap" fuzz --backend sim --seed 3 --cases 800 --resume part1.json > e1.txt 2>&1; rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l < e1.txt)" -eq 1 ] && grep -q "its seed is 2, this campaign's 3" e1.txt || { cat e1.txt; fail "another seed: exit $rc"; }
  "$recap" fuzz $args --chunk-cases 50 --resume part1.json > e3.txt 2>&1; rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l < e3.txt)" -eq 1 ] && grep -q "its chunk_cases is 100, this campaign's 50" e3.txt || { cat e3.txt; fail "another chunk size: exit $rc"; }
  "$recap" fuzz $args --resume "$src/corpus/mutants/pool-order.json" > e2.txt 2>&1; rc=$?
  [ "$rc" -eq 2 ] && grep -q "not a recap.report/1" e2.txt || { cat e2.txt; fail "a case file: exit $rc"; }
  ;;
report_to_a_fifo)
  # --report to a fifo writes the report into it (a reader gets it) and leaves a fifo, not a
  # regular file renamed over it (devices: cli.report_to_dev_null_keeps_the_device, /dev/full:
  # cli.replay_report_full_disk).
  good="$src/corpus/graph-safe-eager.json"
  mkfifo out.fifo
  cat out.fifo > got.json &
  reader=$!
  "$recap" replay --backend sim "$good" --report out.fifo > /dev/null || fail "--report a fifo: exit $?"
  wait $reader
  [ -p out.fifo ] || fail "the fifo was replaced"
  grep -q '"schema": "recap.report/1"' got.json || fail "the reader did not get the report"
  ;;
compare_findings_matrix)
  # Issue 20: recap compare. Sim campaigns stand in for versions (their context.sut.version set
  # here): 1.2 = the naive policy, two seeds (merged into one column), 1.9 = every policy drawn,
  # 1.10 = graph-safe (no failure). Each cell must be the reports' own failing cases of its bucket
  # (the two 1.2 reports summed), split by the known finding that accepts each case (CAP: the naive
  # capture failure in per-layer cases only), with the bucket's counterexample file; a row goes
  # "gone" / "appears in" where its counts go to or from zero; plain text and Markdown hold the same
  # table; the output is deterministic; bad input is one line, exit 2.
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$recap" fuzz --backend sim --policy naive --seed 5 --cases 60 --shrink-limit 20 --corpus-dir f --report a.json > /dev/null
  "$recap" fuzz --backend sim --policy naive --seed 6 --cases 60 --shrink-limit 20 --corpus-dir f --report a2.json > /dev/null
  "$recap" fuzz --backend sim --seed 2 --cases 100 --shrink-limit 5 --corpus-dir f --report b.json > /dev/null
  "$recap" fuzz --backend sim --policy graph-safe --seed 1 --cases 60 --corpus-dir f --report c.json > /dev/null || fail "graph-safe failed"
  "$py" - <<'PY' || fail "making the versions"
import json
for f, v in (("a.json", "1.2"), ("a2.json", "1.2"), ("b.json", "1.9"), ("c.json", "1.10")):
    r = json.load(open(f))
    assert r["context"]["sut"]["name"] == "recap", r["context"]["sut"]
    r["context"]["sut"]["version"] = v
    json.dump(r, open(f, "w"))
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
json.dump({"schema": "recap.known-findings/1", "findings": [
    {"id": "CAP", "summary": "naive capture failure, per-layer", "buckets": [B], "when": {"executor": ["per-layer"]}},
    {"id": "NEVER", "summary": "not on recap's runtime", "buckets": ["capture_clean/failed//NameError/"], "when": {}}]},
    open("known.json", "w"))
PY
  # reports in no order; the two 1.2 reports merge, a.json (given first) gives 1.2's files
  "$recap" compare c.json a.json b.json a2.json --known-findings known.json --markdown > md.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat md.txt; fail "compare --markdown: exit $rc"; }
  "$recap" compare c.json a.json b.json a2.json --known-findings known.json > txt.txt || fail "compare: exit $?"
  cat txt.txt
  "$recap" compare c.json a.json b.json a2.json --known-findings known.json --markdown > md2.txt
  cmp -s md.txt md2.txt || fail "two runs differ"
  "$py" - md.txt txt.txt <<'PY' || fail "the matrix"
import json, os, re, sys
md, txt = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read().splitlines()
def bucket(r):
    for c in r["checks"]:
        if c["disposition"] in ("failed", "incorrect", "crashed"):
            e = c.get("capture_error", {})
            t = c.get("divergence", {}).get("tensor", "")
            return "/".join([c["property"], c["disposition"], e.get("api", ""), e.get("error", ""), t.split(" ")[0]])
    return ""
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
cols = [("recap 1.2", ["a.json", "a2.json"]), ("recap 1.9", ["b.json"]), ("recap 1.10", ["c.json"])]
counts, files, summ = [], [], []
for label, fs in cols:
    n, rep, s = {}, {}, {"reports": len(fs), "cases run": 0}
    for f in fs:
        r = json.load(open(f))
        own = {}
        for c in r["cases"]:
            b = bucket(c)
            if not b: continue
            own[b] = own.get(b, 0) + 1
            k = ("CAP" if b == B and c["spec"]["executor"] == "per-layer" else "-", b)
            n[k] = n.get(k, 0) + 1
        assert own == r["summary"]["buckets"], (f, own, r["summary"]["buckets"])
        s["cases run"] += r["summary"]["cases"]
        for d in ("passed", "failed", "incorrect", "crashed", "out-of-memory", "skipped"):
            s[d] = s.get(d, 0) + r["summary"]["by_disposition"].get(d, 0)
        for x in r["summary"]["failures"]:
            if x["bucket"] not in rep:
                rep[x["bucket"]] = os.path.basename(x["corpus_file"]) if x["corpus_file"] else None
    counts.append(n); files.append(rep); summ.append(s)
assert counts[0] and counts[1] and not counts[2], counts  # failures in 1.2 and 1.9, none in 1.10
rows = sorted({k for n in counts for k in n}, key=lambda k: (k[0] == "-", k[0], k[1]))
assert ("CAP", B) in rows and ("-", B) in rows, rows  # one bucket, split by the finding
# expected cells and the last column
want = []
for k in rows:
    cells, changes, before = [], [], None
    for (label, _), n, rep in zip(cols, counts, files):
        c = n.get(k, 0)
        if c:
            f = rep.get(k[1])
            cells.append((c, f))  # f None: not written (flaky): the cell ends in *
        else:
            cells.append("gone" if before else "-")
        if before == 0 and c: changes.append("appears in " + label)
        if before and not c: changes.append("gone in " + label)
        before = c
    want.append((k, cells, "; ".join(changes)))
assert any("appears in" in w[2] for w in want), "no finding appears: choose other seeds"
assert any("gone in" in w[2] for w in want), want
# Markdown: a table of 6 cells a line, the separator second, rows in order
t = [l for l in md if l.startswith("|")]
cells = [[c.replace("\\*", "*") for c in l[2:-2].split(" | ")] for l in t]
assert all(len(c) == 6 for i, c in enumerate(cells) if i != 1), [len(c) for c in cells]
assert t[1] == "|---|---|---|---|---|---|", t[1]
assert cells[0] == ["finding", "bucket", "recap 1.2", "recap 1.9", "recap 1.10", "appears in / gone in"], cells[0]
body = cells[2:]
for i, key in enumerate(["reports", "cases run", "passed", "failed", "incorrect", "crashed", "out-of-memory", "skipped"]):
    assert body[i] == [key, ""] + [str(s[key]) for s in summ] + [""], (body[i], key)
findings = body[8:]
assert [tuple(r[:2]) for r in findings] == rows, ([r[:2] for r in findings], rows)
for r, (k, exp, changes) in zip(findings, want):
    assert r[5] == changes, (k, r[5], changes)
    for got, e in zip(r[2:5], exp):
        if isinstance(e, str):
            assert got == e, (k, got, e)
        else:
            n, f = e
            assert got == (f"{n} {f}" if f else got) and got.startswith(f"{n} "), (k, got, e)
            if not f: assert got.endswith("*"), (k, got)
for k, exp, _ in want:  # the written counterexamples exist
    for e in exp:
        if not isinstance(e, str) and e[1]: assert os.path.exists("f/" + e[1]), e[1]
assert "Known findings in no report: NEVER" in md, md[-3:]
# plain text: the same rows, cells two or more spaces apart
for r in [cells[0]] + body:
    pat = r"\s{2,}".join(re.escape(c) for c in r if c)
    assert any(re.fullmatch(pat, l.rstrip()) for l in txt), ("not in the text table:", r)
print(len(rows), "rows;", "; ".join(f"{k[0]} {k[1]}: {c}" for k, _, c in want if c))
PY
  # A file that names a report's version judges that report alone (its triage names its cases):
  # twelve.json (known.json for 1.2) and nine.json (1.9's, which accepts B everywhere), given in
  # either order: 1.2's B cases are CAP's or nobody's, 1.9's are NINE's.
  "$py" - <<'PY' || fail "making nine.json"
import json
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
json.dump({"schema": "recap.known-findings/1", "sut": {"name": "recap", "version": "1.9"},
           "findings": [{"id": "NINE", "summary": "1.9's own", "buckets": [B], "when": {}}]}, open("nine.json", "w"))
k = json.load(open("known.json"))
k["sut"] = {"name": "recap", "version": "1.2"}
json.dump(k, open("twelve.json", "w"))
PY
  for order in "nine.json twelve.json" "twelve.json nine.json"; do
    "$recap" compare a.json b.json a2.json --known-findings $order --markdown > own.txt || fail "compare $order: exit $?"
    "$py" - own.txt <<'PY' || fail "the version's own file ($order)"
import sys
rows = {}
for l in open(sys.argv[1]).read().splitlines():
    if l.startswith("| "):
        c = [x.strip() for x in l.strip("|").split("|")]
        rows[(c[0], c[1])] = c
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
nine, cap = rows.get(("NINE", B)), rows.get(("CAP", B))
assert nine and nine[2] == "-" and nine[3] not in ("-", "gone"), nine  # columns: 1.2, 1.9
assert cap and cap[2] not in ("-", "gone") and cap[3] in ("-", "gone"), cap
print("1.2 by twelve.json:", cap[2], "; 1.9 by nine.json:", nine[3])
PY
  done
  # Bad input: one line, exit 2.
  "$py" - <<'PY'
import json
r = json.load(open("a.json"))
b = next(iter(r["summary"]["buckets"]))
r["summary"]["buckets"][b] += 1
json.dump(r, open("edited.json", "w"))
r = json.load(open("a.json"))
del r["context"]["sut"]
json.dump(r, open("nosut.json", "w"))
PY
  "$recap" replay --backend sim "$src/corpus/graph-safe-eager.json" --report replay.json > /dev/null
  bad() {  # EXPECTED-TEXT ARGS...
    want="$1"; shift
    "$recap" compare "$@" > /dev/null 2> err.txt; rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -qF -- "$want" err.txt || { cat err.txt; fail "compare $*: exit $rc"; }
  }
  bad "compare: cannot open 'nope.json'" a.json nope.json
  bad "compare $src/corpus/graph-safe-eager.json: not a recap.report/1" "$src/corpus/graph-safe-eager.json"
  bad "compare replay.json: no campaign summary" replay.json
  bad "compare nosut.json: context.sut has no name and version" nosut.json
  bad "compare edited.json: its cases give" edited.json
  bad "compare: ./a.json given twice" a.json b.json ./a.json
  bad "--known-findings" a.json --known-findings a.json
  bad "reports is required" --markdown
  ;;
known_findings_not_seen)
  # Issue 20: gate and fuzz with --known-findings name each finding of the file that accepted no
  # case (a line on the console, its id in summary.known_findings_not_seen), and that is not a
  # failure; without a finding's bucket the gate fails with exactly that one new bucket. The file
  # holds one finding that occurs (the naive policy's capture failure) and one that cannot on
  # recap's runtime (a Python NameError).
  py=$(command -v /usr/bin/python3 || command -v python3)
  mkdir corp && cp "$src/corpus/graph-safe-eager.json" corp/
  g="gate --backend sim --policy naive --seed 5 --cases 100 --shrink-limit 20 --no-coverage --corpus corp"
  "$recap" $g --corpus-dir g0 --report g0.json > /dev/null; rc=$?
  [ "$rc" -eq 1 ] || fail "the naive gate without known findings: exit $rc, expected 1"
  "$py" - g0.json <<'PY' || fail "known-findings files"
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
assert B in s["buckets"], s["buckets"]
rest = sorted(b for b in s["buckets"] if b != B)
occurs = {"id": "OCCURS", "summary": "naive capture failure", "buckets": [B], "when": {}}
never = {"id": "NEVER", "summary": "not on recap's runtime", "buckets": ["capture_clean/failed//NameError/"], "when": {}}
others = [{"id": "REST", "summary": "the other buckets", "buckets": rest, "when": {}}] if rest else []
json.dump({"schema": "recap.known-findings/1", "findings": [occurs, never] + others}, open("known.json", "w"))
json.dump({"schema": "recap.known-findings/1", "findings": [never] + others}, open("known2.json", "w"))
print("buckets:", list(s["buckets"]))
PY
  line="known finding NEVER (bucket capture_clean/failed//NameError/) did not occur in"
  "$recap" $g --known-findings known.json --corpus-dir g1 --report g1.json > g1.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat g1.txt; fail "gate, every bucket known: exit $rc, expected 0"; }
  "$recap" fuzz --backend sim --policy naive --seed 5 --cases 100 --shrink-limit 20 --require-memory-savings \
    --known-findings known.json --corpus-dir f1 --report f1.json > f1.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat f1.txt; fail "fuzz, every bucket known: exit $rc, expected 0"; }
  "$recap" $g --known-findings known2.json --corpus-dir g2 --report g2.json > g2.txt; rc=$?
  [ "$rc" -eq 1 ] || { cat g2.txt; fail "gate without OCCURS: exit $rc, expected 1"; }
  grep -q "recap gate: FAILED (corpus 1/1 as expected, 1 new bucket, " g2.txt || { cat g2.txt; fail "not exactly one new bucket"; }
  for o in g1 f1 g2; do
    n=$("$py" -c "import json; print(json.load(open('$o.json'))['summary']['judged_cases'])")
    [ "$n" -gt 0 ] || fail "$o: no judged case"
    grep -qxF "  $line $n judged cases" $o.txt || { cat $o.txt; fail "$o: no 'did not occur' line for NEVER"; }
    ! grep -q "known finding OCCURS\|known finding REST" $o.txt || { cat $o.txt; fail "$o: a finding that occurred is listed"; }
    validate_report $o.json
  done
  "$py" - g1.json f1.json g2.json <<'PY' || fail "known_findings_not_seen in the reports"
import json, sys
B = "capture_clean/failed/cudaStreamSynchronize/cudaErrorStreamCaptureUnsupported/"
g1, f1, g2 = (json.load(open(p))["summary"] for p in sys.argv[1:4])
for s in (g1, f1, g2):
    assert s["known_findings_not_seen"] == ["NEVER"], s["known_findings_not_seen"]
assert g1["known_findings"]["buckets"][B]["accepted"] == {"OCCURS": g1["buckets"][B]}, g1["known_findings"]
assert [f["bucket"] for f in g2["failures"] if not f["known"]] == [B], g2["failures"]
print("not seen:", g1["known_findings_not_seen"], "; new in g2:", B)
PY
  # a gate's report is a column of recap compare like a fuzz report
  "$py" -c "import json; r=json.load(open('f1.json')); r['context']['sut']['version']='2'; json.dump(r, open('f1v2.json','w'))"
  "$recap" compare g1.json f1v2.json > cmp.txt || { cat cmp.txt; fail "compare of a gate and a fuzz report: exit $?"; }
  n=$("$py" -c "import json; print(json.load(open('g1.json'))['summary']['cases'])")
  grep -qE "^cases run +$n +100 *$" cmp.txt || { cat cmp.txt; fail "the gate's column"; }
  ;;
out_of_memory_is_its_own_verdict)
  # A device that is too small (RECAP_SIM_MEMORY_BYTES: sim's capacity) makes cases run out of
  # memory: they are `out-of-memory`, judged by no oracle and never a failure (exit 0, nothing
  # shrunk or written), while the cases that fit are judged as usual; the report validates.
  RECAP_SIM_MEMORY_BYTES=300000 "$recap" fuzz --backend sim --policy graph-safe --seed 1 --cases 300 \
    --corpus-dir oom --report oom.json > out.txt; rc=$?
  [ "$rc" -eq 0 ] || { cat out.txt; fail "exit $rc, expected 0"; }
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$py" - oom.json <<'PY' || fail "out-of-memory counts"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
d = s["by_disposition"]
assert d.get("out-of-memory", 0) > 0 and d.get("passed", 0) > 0, d  # both kinds of case: not vacuous
assert not s["failures"] and not s["buckets"], (s["failures"], s["buckets"])
oom = [c for c in r["cases"] if c["disposition"] == "out-of-memory"][0]
assert [k["property"] for k in oom["checks"]] == ["capture_clean"] and "out of device memory" in oom["checks"][0]["reason"], oom["checks"]
print("dispositions:", d)
PY
  [ -z "$(ls oom 2>/dev/null)" ] || fail "an out-of-memory case was written to the corpus"
  validate_report oom.json
  ;;
*) fail "unknown check $name" ;;
esac
echo "ok: $name"
