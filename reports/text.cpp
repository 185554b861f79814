// `recap report` on a terminal: the page's tables as plain text. A number from a configuration
// that did not pass is in brackets, with its verdict and finding on the line under it.
#include <algorithm>

#include "reports/render.h"
#include "reports/report.h"

namespace recap::reports {

namespace {

// Text from a report on one terminal line: control bytes (an escape sequence in a bucket string)
// as \xNN; UTF-8 kept.
std::string clean(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o;
}
size_t columns(const std::string& s) {  // code points, not bytes
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}
// At most n characters (code points), "..." in place of the rest.
std::string cut(const std::string& s, size_t n) {
  if (columns(s) <= n) return s;
  size_t chars = 0, i = 0;
  for (; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++chars > n - 3) break;
  return s.substr(0, i) + "...";
}

// Columns padded to their widest cell; a row may carry lines printed under it.
struct TextTable {
  std::vector<std::string> head;
  std::vector<bool> right;  // numbers are right-aligned
  struct Row {
    std::vector<std::string> cells;
    std::vector<std::string> under;
  };
  std::vector<Row> rows;

  // A cell is at most this many characters: one long name must not pad every row to its width.
  static constexpr size_t kMaxCell = 80;

  std::string str(const std::string& indent) const {
    std::vector<Row> rows = this->rows;
    for (auto& r : rows) {
      for (auto& c : r.cells) c = cut(c, kMaxCell);
      for (auto& u : r.under) u = cut(u, 4 * kMaxCell);
    }
    std::vector<size_t> w(head.size());
    for (size_t i = 0; i < head.size(); ++i) w[i] = columns(head[i]);
    for (const auto& r : rows)
      for (size_t i = 0; i < r.cells.size() && i < w.size(); ++i) w[i] = std::max(w[i], columns(r.cells[i]));
    auto line = [&](const std::vector<std::string>& cells) {
      std::string s = indent;
      for (size_t i = 0; i < cells.size(); ++i) {
        const std::string pad(w[i] - columns(cells[i]), ' ');
        s += (i ? "  " : "") + (right[i] ? pad + cells[i] : cells[i] + (i + 1 < cells.size() ? pad : ""));
      }
      return s + "\n";
    };
    std::string s = line(head);
    for (const auto& r : rows) {
      s += line(r.cells);
      for (const auto& u : r.under) s += indent + "    " + u + "\n";
    }
    return s;
  }
};

bool passed(const Configuration& c) { return c.verdict == "passed"; }
// A number of a configuration: bracketed when the configuration did not pass.
std::string num(const std::string& text, const Configuration& c) {
  if (text.empty()) return "-";
  return passed(c) ? text : "[" + text + "]";
}
std::string bytes(std::optional<int64_t> b, const ByteUnit& u, const Configuration& c) {
  return num(b ? bytes_in(*b, u) : "", c);
}

std::string size_table(const TradeoffSize& size) {
  std::vector<std::optional<int64_t>> headline, pool, act, saved;
  for (const auto& c : size.configurations) {
    for (auto v : {c.memory.peak_allocated, c.memory.peak_reserved, c.memory.device_used}) headline.push_back(v);
    pool.push_back(c.memory.graph_pool);
    act.push_back(c.memory.activations_in_graphs);
    saved.push_back(c.memory.saved_by_recompute);
  }
  const ByteUnit uh = byte_unit(headline), up = byte_unit(pool), ua = byte_unit(act), us = byte_unit(saved);
  TextTable t;
  t.head = {"configuration", "verdict", "TFLOP/s", "share", "ms median (p10-p90)", std::string("alloc ") + uh.name,
            std::string("reserved ") + uh.name, std::string("device ") + uh.name, std::string("pool ") + up.name,
            std::string("in graphs ") + ua.name, std::string("saved ") + us.name, "overhead", "capture ms"};
  t.right = {false, false, true, true, true, true, true, true, true, true, true, true, true};
  bool tainted = false;
  for (const auto& c : size.configurations) {
    TextTable::Row r;
    r.cells = {clean(c.name),
               c.verdict,
               num(c.tflops ? fixed(*c.tflops, 1) : "", c),
               num(c.matmul_share ? fixed(*c.matmul_share * 100, 1) + "%" : "", c),
               num(c.step_ms ? fixed(c.step_ms->median, 2) + " (" + fixed(c.step_ms->p10, 2) + "-" + fixed(c.step_ms->p90, 2) + ")" : "", c),
               bytes(c.memory.peak_allocated, uh, c),
               bytes(c.memory.peak_reserved, uh, c),
               bytes(c.memory.device_used, uh, c),
               bytes(c.memory.graph_pool, up, c),
               bytes(c.memory.activations_in_graphs, ua, c),
               bytes(c.memory.saved_by_recompute, us, c),
               num(c.recompute_overhead ? percent(*c.recompute_overhead, 1) : "", c),
               num(c.capture_ms ? fixed(*c.capture_ms, 1) : "", c)};
    const std::string mark = passed(c) ? "finding: " : "! " + c.verdict + ": ";
    for (const auto& f : c.findings)
      r.under.push_back(clean(mark + finding_text(f) + (f.reason.empty() ? "" : ": " + f.reason)));
    if (!passed(c) && !c.reason.empty()) r.under.push_back(clean("! " + c.reason));
    if (!passed(c) && c.findings.empty() && c.reason.empty()) r.under.push_back("! " + c.verdict + " (no finding recorded)");
    tainted = tainted || !passed(c);
    t.rows.push_back(r);
  }
  std::string s = t.str("  ");
  if (tainted) s += "  [..]: measured on a configuration that did not pass (its verdict and finding under it): not a result\n";
  return s;
}

std::string tradeoff_text(const LoadedReport& rep) {
  const TradeoffContext& c = rep.tradeoff.context;
  std::string s = "== Trade-off: " + clean(rep.label) + " ==\n";
  s += "  system under test " + clean(c.sut_name + " " + c.sut_version + (c.sut_device.empty() ? "" : " on " + c.sut_device));
  if (!c.device_name.empty()) s += "; GPU " + clean(c.device_name);
  if (c.matmul_bf16_tflops) s += ", bf16 matmul " + fixed(*c.matmul_bf16_tflops, 1) + " TFLOP/s (measured)";
  s += "\n  recap " + clean(c.recap_version) + (c.git_commit.empty() ? "" : " at " + clean(c.git_commit));
  if (c.measured_steps) s += "; " + std::to_string(*c.measured_steps) + " timed steps";
  if (c.warmup_steps) s += " after " + std::to_string(*c.warmup_steps) + " warmup steps";
  if (!c.clock.empty()) s += " (" + clean(c.clock) + ")";
  s += "\n  command: " + clean(c.command) + "\n";
  for (const auto& size : rep.tradeoff.sizes) {
    s += "\n  " + clean(size.name) + ": " + clean(size_text(size));
    if (size.flops_per_step) s += ", " + flops_text(*size.flops_per_step) + " a step";
    s += "\n";
    for (const auto& n : judged_size_notes(size)) s += "  judged size: " + clean(n) + "\n";
    s += size_table(size);
  }
  return s + "\n";
}

std::string comparison_text(const std::vector<LoadedReport>& reports, const Comparison& c) {
  const ComparisonUnits units = comparison_units(c);
  const ByteUnit &ua = units.allocated, &ug = units.in_graphs;
  std::string s = "  " + clean(c.size) + ":";
  for (size_t k = 0; k < c.reports.size(); ++k) s += " [" + std::to_string(k + 1) + "] " + clean(reports[c.reports[k]].label);
  s += "\n";
  TextTable t;
  t.head = {"configuration"};
  t.right = {false};
  for (size_t k = 0; k < c.reports.size(); ++k) {
    const std::string n = "[" + std::to_string(k + 1) + "] ";
    for (const std::string& h : {n + "verdict", n + "ms", n + "d ms", n + "alloc " + ua.name, n + "d alloc", n + "in graphs " + ug.name}) {
      t.head.push_back(h);
      t.right.push_back(h != n + "verdict");
    }
  }
  for (const auto& row : c.rows) {
    TextTable::Row r;
    r.cells.push_back(clean(row.configuration));
    const Configuration* base = nullptr;
    for (const Configuration* x : row.in)
      if (x && !base) base = x;
    for (const Configuration* x : row.in) {
      if (!x) {
        for (int i = 0; i < 6; ++i) r.cells.push_back(i == 0 ? "absent" : "");
        continue;
      }
      r.cells.push_back(x->verdict);
      r.cells.push_back(num(x->step_ms ? fixed(x->step_ms->median, 2) : "", *x));
      r.cells.push_back(x != base && x->step_ms && base->step_ms && base->step_ms->median > 0
                            ? num(percent(x->step_ms->median / base->step_ms->median - 1, 1), *x)
                            : "");
      r.cells.push_back(bytes(x->memory.peak_allocated, ua, *x));
      r.cells.push_back(x != base && x->memory.peak_allocated && base->memory.peak_allocated
                            ? num((*x->memory.peak_allocated >= *base->memory.peak_allocated ? "+" : "") +
                                      bytes_in(*x->memory.peak_allocated - *base->memory.peak_allocated, ua),
                                  *x)
                            : "");
      r.cells.push_back(bytes(x->memory.activations_in_graphs, ug, *x));
    }
    t.rows.push_back(r);
  }
  return s + t.str("  ");
}

std::string campaign_text(const LoadedReport& rep) {
  const CampaignView& v = rep.campaign;
  const std::string title = v.command == "gate" ? "Gate" : v.command == "replay" ? "Replay" : "Campaign";
  std::string s = "== " + title + ": " + clean(rep.label) + " ==\n";
  s += "  system under test " + clean(v.sut_name + (v.sut_version.empty() ? "" : " " + v.sut_version) +
                                       (v.sut_device.empty() ? "" : " on " + v.sut_device));
  s += "; recap " + clean(v.recap_version) + (v.git_commit.empty() ? "" : " at " + clean(v.git_commit));
  s += "; backend " + clean(v.backend) + "; seed " + clean(v.seed) + "; policy " + clean(v.policy) + "\n";
  std::string disp;
  for (const auto& [k, n] : v.by_disposition) disp += (disp.empty() ? "" : ", ") + k + " " + std::to_string(n);
  s += "  " + std::to_string(v.cases) + " cases (" + clean(disp) + "), " + std::to_string(v.judged_cases) + " judged, " +
       fixed(v.seconds, 1) + " s, exit code " + std::to_string(v.exit_code) +
       (v.interrupted.empty() ? "" : ", interrupted by " + clean(v.interrupted)) + "\n";
  if (!v.known_findings_file.empty()) s += "  known findings: " + clean(v.known_findings_file) + "\n";
  if (v.buckets.empty()) {
    s += "  buckets: no failing case\n";
  } else {
    TextTable t;
    t.head = {"bucket", "cases", "known findings"};
    t.right = {false, true, false};
    for (const auto& b : v.buckets) {
      TextTable::Row r;
      r.cells = {clean(b.bucket), std::to_string(b.cases),
                 b.new_cases < 0 ? "" : b.known ? "known: " + clean(b.accepted)
                                                : std::to_string(b.new_cases) + " new" + (b.accepted.empty() ? "" : "; accepted: " + clean(b.accepted))};
      if (!b.corpus_file.empty()) r.under.push_back("counterexample " + clean(b.corpus_file));
      if (!b.replay_command.empty()) r.under.push_back("replay: " + clean(b.replay_command));
      if (!b.diagnosis.empty()) r.under.push_back("diagnosis: " + clean(b.diagnosis));
      if (!b.flaky.empty()) r.under.push_back("flaky: " + clean(b.flaky));
      t.rows.push_back(r);
    }
    s += "  buckets:\n" + t.str("    ");
  }
  if (!v.properties.empty()) {
    TextTable t;
    t.head = {"property", "judged", "skipped", "verdicts", "commonest reason for skipping"};
    t.right = {false, true, true, false, false};
    for (const auto& q : v.properties) {
      std::string d;
      for (const auto& [k, n] : q.by_disposition) d += (d.empty() ? "" : ", ") + k + " " + std::to_string(n);
      const std::string why = q.skip_reasons.empty() ? "" : std::to_string(q.skip_reasons[0].second) + "x " + q.skip_reasons[0].first;
      t.rows.push_back({{clean(q.property), std::to_string(q.judged), std::to_string(q.skipped), clean(d), clean(why)}, {}});
    }
    s += "  properties:\n" + t.str("    ");
  }
  if (v.has_coverage && !v.coverage.empty()) {
    TextTable t;
    t.head = {"coverage label", "cases", "share", "needs", "met"};
    t.right = {false, true, true, true, false};
    for (const auto& q : v.coverage)
      t.rows.push_back({{clean(q.label), std::to_string(q.count), fixed(q.share * 100, 1) + "%", fixed(q.min_share * 100, 0) + "%",
                         q.met ? "yes" : "NO"},
                        {}});
    s += std::string("  coverage (") + (v.coverage_checked ? (v.coverage_ok ? "checked: met" : "checked: SHORT") : "not checked") +
         "):\n" + t.str("    ");
  }
  for (const auto& f : v.findings) s += "  finding: " + clean(f) + "\n";
  for (const auto& f : v.crashes) s += "  crashed worker: " + clean(f) + "\n";
  if (!v.replays.empty()) {
    int as_expected = 0;
    for (const auto& x : v.replays) as_expected += x.as_expected;
    s += "  replays: " + std::to_string(as_expected) + " of " + std::to_string(v.replays.size()) + " as expected\n";
    for (const auto& x : v.replays)
      if (!x.as_expected) s += "    NOT as expected: " + clean(x.file) + ": " + clean(x.mismatch) + "\n";
  }
  return s + "\n";
}

std::string campaigns_text(const std::vector<LoadedReport>& reports) {
  TextTable t;
  t.head = {"report", "command", "commit", "seed", "cases", "by disposition", "buckets", "new failing cases"};
  t.right = {false, false, false, true, true, false, true, true};
  for (const auto& r : reports) {
    if (r.schema != kReportSchema) continue;
    const CampaignView& v = r.campaign;
    std::string disp;
    for (const auto& [k, n] : v.by_disposition) disp += (disp.empty() ? "" : ", ") + k + " " + std::to_string(n);
    int fresh = 0;
    for (const auto& b : v.buckets) fresh += b.new_cases < 0 ? b.cases : b.new_cases;
    t.rows.push_back({{clean(r.label), clean(v.command), clean(v.git_commit.substr(0, 12)), clean(v.seed), std::to_string(v.cases),
                       clean(disp), std::to_string(v.buckets.size()), std::to_string(fresh)},
                      {}});
  }
  return t.rows.size() < 2 ? "" : "== Campaigns side by side ==\n" + t.str("  ") + "\n";
}

}  // namespace

std::string render_text(const std::vector<LoadedReport>& reports) {
  std::string s;
  for (const auto& r : reports) s += r.schema == kTradeoffSchema ? tradeoff_text(r) : campaign_text(r);
  const std::vector<Comparison> cmp = compare_tradeoffs(reports);
  if (!cmp.empty()) {
    s += "== Trade-off reports side by side (d: against the first report that has the configuration) ==\n";
    for (const auto& c : cmp) s += comparison_text(reports, c) + "\n";
  }
  return s + campaigns_text(reports);
}

}  // namespace recap::reports
