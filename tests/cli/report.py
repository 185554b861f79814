#!/usr/bin/env python3
"""`recap report`'s tests (issue 19). Python's standard library only, and jsonschema for the schema.

usage: report.py text RECAP SRCDIR WORKDIR
       report.py browser RECAP SRCDIR WORKDIR SCREENSHOT

text: the trade-off fixture (tests/cli/data/tradeoff-small.json) and a second report derived from
  it validate against reports/schema/recap.tradeoff.schema.json; `recap report` prints a row per
  configuration, brackets every number of a configuration that did not pass and puts its finding
  under it, and compares the two reports configuration by configuration.

browser: renders the two trade-off reports and two campaign reports made here (a naive `recap fuzz`
  with counterexamples, a `recap gate` with replays and coverage) into one page, loads it in
  headless Chromium with the network blocked, and checks in the DOM Chromium dumps after the
  scripts ran: a table row per configuration (with its finding beside the numbers of one that did
  not pass), every plot drawn with a marker per data point, the buckets, properties and coverage
  of the campaigns, the comparison, and that no string from a report became markup. The same
  checks run on two broken copies of the page (a row removed, a marker removed) and must fail
  there. A screenshot of the page is kept at SCREENSHOT. Exit 77 (skipped) without Chromium.
"""

import copy
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys

mode, recap, src = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
work = os.path.abspath(sys.argv[4])
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
FIXTURE = os.path.join(src, "tests", "cli", "data", "tradeoff-small.json")
SCHEMA = os.path.join(src, "reports", "schema", "recap.tradeoff.schema.json")
# A string from a report that would become markup if anything were not escaped.
HOSTILE = "x</td></table><script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">&amp;<b>"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, expect):
    p = subprocess.run([recap] + args, capture_output=True, text=True, cwd=work)
    if p.returncode != expect:
        fail(f"recap {' '.join(args)}: exit {p.returncode}, expected {expect}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def derived_report():
    """A second trade-off report: another version, slower, one configuration fewer, one hostile."""
    doc = json.load(open(FIXTURE))
    doc["context"]["sut"]["version"] = "0.15.3"
    for size in doc["sizes"]:
        for c in size["configurations"]:
            if c["step_ms"]:
                for k in ("median", "p10", "p90", "mean"):
                    c["step_ms"][k] = round(c["step_ms"][k] * 1.1, 3)
                c["step_ms"]["samples"] = [round(v * 1.1, 3) for v in c["step_ms"]["samples"]]
                c["tflops"] = round(c["tflops"] / 1.1, 2)
                c["matmul_share"] = round(c["matmul_share"] / 1.1, 4)
    lb = doc["sizes"][0]["configurations"]
    lb[:] = [c for c in lb if c["name"] != "none/full-iteration"]
    bad = copy.deepcopy(lb[1])  # none/per-layer, with numbers
    bad["name"] = HOSTILE
    bad["verdict"] = "crashed"
    bad["reason"] = HOSTILE
    bad["findings"] = [{"bucket": "capture_clean/crashed/" + HOSTILE, "corpus_file": HOSTILE + ".json"}]
    lb.append(bad)
    path = os.path.join(work, "tradeoff-b.json")
    json.dump(doc, open(path, "w"), indent=1)
    return path


def check_schema(paths):
    import jsonschema  # python3-jsonschema (scripts/bootstrap.sh)

    schema = json.load(open(SCHEMA))
    jsonschema.Draft202012Validator.check_schema(schema)
    for p in paths:
        errors = list(jsonschema.Draft202012Validator(schema).iter_errors(json.load(open(p))))
        if errors:
            fail(f"{p}: not valid against {SCHEMA}: {errors[0].message} at {list(errors[0].absolute_path)}")


def text_mode():
    b = derived_report()
    check_schema([FIXTURE, b])
    a_doc, b_doc = json.load(open(FIXTURE)), json.load(open(b))
    out = run(["report", FIXTURE, b], 0)
    lines = out.splitlines()
    problems = []
    for doc in (a_doc, b_doc):
        for size in doc["sizes"]:
            for c in size["configurations"]:
                shown = c["name"] if len(c["name"]) <= 80 else c["name"][:77] + "..."  # a cell has 80 characters at most
                rows = [l for l in lines if l.startswith("  " + shown + " ")]
                if not rows:
                    problems.append(f"no row for {size['name']} / {c['name']!r}")
                    continue
                row = rows[0]
                numbers = re.findall(r"\[[0-9.+%,-]+", row)
                if c["verdict"] != "passed":
                    if c["step_ms"] and not numbers:
                        problems.append(f"{c['name']!r} did not pass, yet its numbers are not bracketed: {row}")
                    after = lines[lines.index(row) + 1] if lines.index(row) + 1 < len(lines) else ""
                    if not after.lstrip().startswith("! "):
                        problems.append(f"{c['name']!r} did not pass: no finding under its row: {after!r}")
                    for f in c["findings"]:
                        if f["bucket"] not in out:
                            problems.append(f"finding {f['bucket']!r} not printed")
                elif numbers:
                    problems.append(f"{c['name']!r} passed, yet a number is bracketed: {row}")
    if "Trade-off reports side by side" not in out:
        problems.append("no comparison of the two reports")
    if "\x1b" in out:
        problems.append("a control byte reached the terminal")
    # a report is refused with one line: the text mode owns these (no browser needed)
    bad = json.load(open(FIXTURE))
    bad["sizes"][0]["configurations"][2]["executor"] = "lazy"
    json.dump(bad, open(os.path.join(work, "bad.json"), "w"))
    p = subprocess.run([recap, "report", "bad.json"], capture_output=True, text=True, cwd=work)
    want = "recap: error: bad.json: sizes[0].configurations[2].executor: must be one of eager, per-layer, full-iteration, got 'lazy'\n"
    if p.returncode != 2 or p.stderr != want:
        problems.append(f"a bad executor: exit {p.returncode}, stderr {p.stderr!r}, expected exit 2 and {want!r}")
    if problems:
        fail("\n  ".join([""] + problems))
    print(f"ok: {sum(len(s['configurations']) for d in (a_doc, b_doc) for s in d['sizes'])} configuration rows, "
          "findings under the rows that did not pass, the comparison, the schema")


# ---- the browser's DOM ---------------------------------------------------------------------------


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    def cls(self):
        return (self.attrs.get("class") or "").split()

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)

    def find(self, tag=None, cls=None, **attrs):
        for n in self.walk():
            if (tag is None or n.tag == tag) and (cls is None or cls in n.cls()) and all(
                n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()
            ):
                yield n


class Dom(html.parser.HTMLParser):
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.children.append(n)
        if tag not in self.VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text += data  # the order of text within a node is not needed here


def bar_heights(plot):
    """The heights of the bars Plotly drew (a path M x0,y0 V y1 H x1 V y0 Z per bar)."""
    out = []
    for g in plot.find("g", cls="bars"):
        for path in g.find("path"):
            if "point" in (path.parent.cls() if path.parent else []):
                m = re.match(r"M[-0-9.e]+,([-0-9.e]+)V([-0-9.e]+)", path.attrs.get("d", ""))
                out.append(abs(float(m.group(2)) - float(m.group(1))) if m else 0.0)
    return out


def markers(plot, trace_cls, shape="point"):
    return sum(1 for g in plot.find("g", cls=trace_cls) for p in g.find("path", cls=shape))


def expected_plots(tradeoffs, campaigns):
    """Each plot the page must have, by (kind, report, size), with the markers it must show."""
    want = {}
    for r, doc in tradeoffs:
        for size in doc["sizes"]:
            cs = size["configurations"]
            timed = [c for c in cs if c["step_ms"]]
            points = [c for c in timed if (c.get("memory") or {}).get("peak_allocated") is not None]
            if points:
                want[("mem-time", str(r), size["name"])] = {"points": len(points)}
            bars = [v for c in cs if c["executor"] != "eager"
                    for v in ((c.get("memory") or {}).get("activations_in_graphs"), (c.get("memory") or {}).get("saved_by_recompute"))]
            if any(v is not None for v in bars):
                want[("activations", str(r), size["name"])] = {"bars": sum(1 for v in bars if v)}
            if timed:
                want[("spread", str(r), size["name"])] = {"boxes": len(timed), "samples": sum(len(c["step_ms"]["samples"]) for c in timed)}
    for r, doc in campaigns:
        props = doc["summary"].get("properties", {})
        if props:
            want[("properties", str(r), None)] = {"bars": sum(1 for p in props.values() for k in ("judged", "skipped") if p.get(k))}
        cov = doc["summary"].get("coverage", {}).get("requirements", [])
        if cov:
            want[("coverage", str(r), None)] = {"bars": sum(1 for q in cov if q["share"] > 0), "points": len(cov)}
    by_size = {}
    for r, doc in tradeoffs:
        for size in doc["sizes"]:
            by_size.setdefault(size["name"], []).append(size)
    for name, sizes in by_size.items():
        if len(sizes) > 1:
            want[("cmp-time", None, name)] = {"bars": sum(1 for s in sizes for c in s["configurations"] if c["step_ms"])}
            want[("cmp-act", None, name)] = {
                "bars": sum(1 for s in sizes for c in s["configurations"] if (c.get("memory") or {}).get("activations_in_graphs"))}
    return want


def check_dom(dom_text, tradeoffs, campaigns):
    """Problems found in the DOM Chromium dumped; [] when the page is whole."""
    dom = Dom(dom_text).root
    problems = []
    # tables: a row per configuration, in order, named as the report names it
    for r, doc in tradeoffs:
        for size in doc["sizes"]:
            tables = list(dom.find("table", cls="configs", data_report=str(r), data_size=size["name"]))
            if len(tables) != 1:
                problems.append(f"report {r} size {size['name']}: {len(tables)} tables")
                continue
            rows = list(tables[0].find("tr", cls="config"))
            names = [row.attrs.get("data-config") for row in rows]
            want = [c["name"] for c in size["configurations"]]
            if names != want:
                problems.append(f"report {r} size {size['name']}: rows {names}, expected a row per configuration {want}")
                continue
            for row, c in zip(rows, size["configurations"]):
                text = row.all_text()
                if c["name"] not in text:
                    problems.append(f"row {c['name']!r}: the name is not its text")
                if c["verdict"] != "passed":
                    if "not-passed" not in row.cls():
                        problems.append(f"row {c['name']!r} did not pass but is not marked so")
                    for f in c["findings"]:
                        if f["bucket"] not in text:
                            problems.append(f"row {c['name']!r}: its finding {f['bucket']!r} is not beside its numbers")
                    plain = [td for td in row.find("td", cls="num") if "tainted" not in td.cls() and "na" not in td.cls()]
                    if plain:
                        problems.append(f"row {c['name']!r} did not pass, yet {len(plain)} of its numbers stand plain")
    for r, doc in campaigns:
        s = doc["summary"]
        tables = list(dom.find("table", cls="buckets", data_report=str(r)))
        rows = list(tables[0].find("tr", cls="bucket")) if tables else []
        if len(rows) != len(s.get("buckets", {})):
            problems.append(f"campaign {r}: {len(rows)} bucket rows, expected {len(s.get('buckets', {}))}")
        for f in s.get("failures", []):
            text = "".join(row.all_text() for row in rows)
            for key in ("bucket", "corpus_file", "replay_command"):
                if f.get(key) and f[key] not in text:
                    problems.append(f"campaign {r}: {key} {f[key]!r} not in the buckets table")
        props = list(dom.find("table", cls="properties", data_report=str(r)))
        if not props or len(list(props[0].find("tbody"))[0].children) != len(s.get("properties", {})):
            problems.append(f"campaign {r}: not a row per property")
    # plots: each one drawn (the script ran), with a marker per data point
    want = expected_plots(tradeoffs, campaigns)
    seen = set()
    for plot in dom.find("div", cls="plot"):
        key = (plot.attrs.get("data-kind"), plot.attrs.get("data-report"), plot.attrs.get("data-size"))
        seen.add(key)
        if key not in want:
            problems.append(f"plot {key}: not expected")
            continue
        if plot.attrs.get("data-rendered") != "true":
            problems.append(f"plot {key}: not drawn")
        w = want[key]
        got = {}
        if "points" in w:
            got["points"] = markers(plot, "scatter")
        if "bars" in w:
            got["bars"] = sum(1 for h in bar_heights(plot) if h > 0)
        if "boxes" in w:
            got["boxes"] = markers(plot, "boxes", "box")
            got["samples"] = markers(plot, "boxes")
        if got != w:
            problems.append(f"plot {key}: markers {got}, expected {w}")
    for key in set(want) - seen:
        problems.append(f"plot {key}: missing")
    # nothing from a report became markup, and nothing was fetched
    title = "".join(n.all_text() for n in dom.find("title"))
    if "pwned" in title:
        problems.append("a report's string ran as a script (the title changed)")
    if list(dom.find("img")):
        problems.append("a report's string became an <img>")
    scripts = list(dom.find("script"))
    if len(scripts) != 3:
        problems.append(f"{len(scripts)} script elements, expected 3 (plotly.js, the figures, the loader)")
    for n in dom.find():
        for a in ("src", "href"):
            if re.match(r"(https?:)?//", n.attrs.get(a) or ""):
                problems.append(f"<{n.tag} {a}={n.attrs[a]!r}> would fetch from the network")
    if tradeoffs and not any(HOSTILE in (row.attrs.get("data-config") or "") for row in dom.find("tr", cls="config")):
        problems.append("the hostile configuration name is not a row's name, as written")
    return problems


def chromium_dom(chromium, page, name):
    profile = os.path.join(work, "profile-" + name)
    p = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=60000", "--dump-dom", "file://" + page],
        capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or "<body" not in p.stdout:
        fail(f"chromium --dump-dom {page}: exit {p.returncode}: {p.stderr[-1500:]}")
    open(os.path.join(work, name + ".dom.html"), "w").write(p.stdout)
    return p.stdout


def browser_mode(screenshot):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIP: no chromium (Debian's chromium package; scripts/bootstrap.sh installs it)")
        sys.exit(77)
    b = derived_report()
    # two campaign reports: a naive campaign finds and writes counterexamples; a gate replays
    # corpus files and checks coverage
    run(["fuzz", "--backend", "sim", "--policy", "naive", "--cases", "30", "--seed", "1", "--report", "campaign.json",
         "--corpus-dir", "found"], 1)
    os.makedirs(os.path.join(work, "gate-corpus"), exist_ok=True)
    for f in ("graph-safe-eager.json", "naive-capture-failure-min.json"):
        if os.path.exists(os.path.join(src, "corpus", f)):
            shutil.copy(os.path.join(src, "corpus", f), os.path.join(work, "gate-corpus", f))
    if not os.listdir(os.path.join(work, "gate-corpus")):
        fail("no corpus file to replay in the gate")
    p = subprocess.run([recap, "gate", "--backend", "sim", "--corpus", "gate-corpus", "--cases", "30", "--report", "gate.json"],
                       capture_output=True, text=True, cwd=work)
    if p.returncode not in (0, 1) or not os.path.exists(os.path.join(work, "gate.json")):
        fail(f"recap gate: exit {p.returncode}: {p.stderr[-1000:]}")
    files = [FIXTURE, b, os.path.join(work, "campaign.json"), os.path.join(work, "gate.json")]
    docs = [json.load(open(f)) for f in files]
    tradeoffs = [(i, d) for i, d in enumerate(docs) if d["schema"] == "recap.tradeoff/1"]
    campaigns = [(i, d) for i, d in enumerate(docs) if d["schema"] == "recap.report/1"]
    if not docs[2]["summary"]["buckets"] or not docs[2]["summary"]["failures"]:
        fail("the naive campaign found nothing: nothing to check the buckets table with")
    page = os.path.join(work, "report.html")
    out = run(["report"] + files + ["-o", page, "--text"], 0)
    if "Trade-off: megatron 0.19.2" not in out:
        fail("--text with -o printed no tables: " + out[:500])
    text = open(page).read()
    for m in re.finditer(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", text):
        fail(f"the page loads something: {m.group(0)}")

    problems = check_dom(chromium_dom(chromium, page, "report"), tradeoffs, campaigns)
    if problems:
        fail("the page as Chromium shows it:\n  " + "\n  ".join(problems))

    # the checks must fail on a page with a configuration's row removed ...
    row = re.search(r'<tr class="config [^"]*" data-config="[^"]*">.*?</tr>\n', text, re.S)
    broken = os.path.join(work, "no-row.html")
    open(broken, "w").write(text[: row.start()] + text[row.end():])
    found = check_dom(chromium_dom(chromium, broken, "no-row"), tradeoffs, campaigns)
    if not any("rows" in p for p in found):
        fail(f"a page without the row of {row.group(0)[:80]!r} passed the checks: {found}")
    # ... and on one whose first scatter plot lost a marker (its first trace)
    m = re.search(r'(<script type="application/json" id="recap-figures">)(.*?)(</script>)', text, re.S)
    figures = json.loads(m.group(2))
    first = next(k for k, f in figures.items() if f["data"] and f["data"][0]["type"] == "scatter")
    del figures[first]["data"][0]
    payload = json.dumps(figures).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    broken = os.path.join(work, "no-marker.html")
    open(broken, "w").write(text[: m.start(2)] + payload + text[m.end(2):])
    found = check_dom(chromium_dom(chromium, broken, "no-marker"), tradeoffs, campaigns)
    if not any("markers" in p for p in found):
        fail(f"a page whose plot {first} lost a marker passed the checks: {found}")

    # the screenshot, kept as the test's artifact
    if os.path.exists(screenshot):
        os.remove(screenshot)
    p = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
         f"--user-data-dir={os.path.join(work, 'profile-shot')}", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--virtual-time-budget=60000", "--window-size=1600,6000", f"--screenshot={screenshot}", "file://" + page],
        capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or not os.path.exists(screenshot) or open(screenshot, "rb").read(8) != b"\x89PNG\r\n\x1a\n":
        fail(f"no screenshot at {screenshot}: exit {p.returncode}: {p.stderr[-1000:]}")
    n_rows = sum(len(s["configurations"]) for _, d in tradeoffs for s in d["sizes"])
    print(f"ok: {n_rows} configuration rows, {len(expected_plots(tradeoffs, campaigns))} plots with their markers, "
          f"{len(campaigns)} campaign reports; a page without a row or a marker fails; screenshot {screenshot}")


if mode == "text":
    text_mode()
elif mode == "browser":
    browser_mode(os.path.abspath(sys.argv[5]))
else:
    fail("usage: report.py text|browser RECAP SRCDIR WORKDIR [SCREENSHOT]")
