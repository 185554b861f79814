// The page of `recap report`: one self-contained HTML file. Tables are written here as HTML;
// plots are Plotly figures (JSON written here) drawn by plotly.js, which the page inlines.
//
// Why plotly.js: Debian ships it (python3-plotly), as one file that needs no other script; it
// draws scatter plots with a marker shape per trace, grouped bars and box plots as SVG in the
// page's DOM (so a browser test can count the markers), with the exact values on hover, zoom and
// legend toggles, which a reviewer comparing a dozen configurations uses. The cost: about 8.6 MB
// of script in every page (Debian's copy is not minified). D3 (libjs-d3, 3.5) would have meant
// writing the charts ourselves; Chart.js draws on a canvas, with nothing in the DOM to check;
// SVG written here would have no hover or zoom.
//
// Everything taken from a report is escaped: as HTML text (esc), inside the figures' JSON (no
// '<', '>' or '&' survive in the script element), and for Plotly's own markup in labels
// (plot_text), so a bucket string cannot add an element to the page.
#include <algorithm>
#include <cmath>
#include <functional>

#include "harness/base/hash.h"
#include "reports/render.h"
#include "reports/report.h"

namespace recap::reports {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  return o;
}
// Plotly reads a few tags (<br>, <b>, <a href>) in its labels and decodes entities after: text
// from a report has its '<', '>' and '&' as entities, shown as themselves.
std::string plot_text(const std::string& s) {
  std::string o;
  for (char c : s) switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      default: o += c;
    }
  return o;
}
// JSON inside <script type="application/json">: '<' could close the element, so the three
// characters HTML cares about are \u escapes (they appear only inside JSON strings).
std::string script_json(const Json& j) {
  std::string s = j.dump(-1, ' ', false, Json::error_handler_t::replace), o;
  o.reserve(s.size());
  for (char c : s) switch (c) {
      case '<': o += "\\u003c"; break;
      case '>': o += "\\u003e"; break;
      case '&': o += "\\u0026"; break;
      default: o += c;
    }
  return o;
}
// A number in a figure (JSON has no NaN: not drawn).
Json fig_number(std::optional<double> v) { return v && std::isfinite(*v) ? Json(*v) : Json(nullptr); }

// One colour per checkpointing, one marker shape per executor (the legend says which).
const char* checkpoint_colour(const std::string& c) {
  if (c == "none") return "#1f77b4";
  if (c == "selective") return "#ff7f0e";
  return "#2ca02c";
}
const char* executor_symbol(const std::string& e) {
  if (e == "eager") return "circle";
  if (e == "per-layer") return "square";
  return "diamond";
}
const char* executor_glyph(const std::string& e) {
  if (e == "eager") return "&#9679;";
  if (e == "per-layer") return "&#9632;";
  return "&#9670;";
}

bool passed(const Configuration& c) { return c.verdict == "passed"; }
// What stands next to the numbers of a configuration that did not pass.
std::string taint_text(const Configuration& c) {
  std::string s = c.verdict;
  for (const auto& f : c.findings) s += "; " + finding_text(f);
  if (!c.reason.empty()) s += "; " + c.reason;
  return s;
}
std::string ids_text(const Configuration& c) {
  std::string s;
  for (const auto& f : c.findings) s += (s.empty() ? "" : ",") + (f.id.empty() ? f.bucket : f.id);
  return s;
}
// At most n bytes, cut on a character's boundary (a label that long would squeeze its plot; the
// table and the hover text have it whole).
std::string cut(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "\xE2\x80\xA6";
}
// The label of a configuration in plots: a configuration that did not pass says so.
std::string plot_label(const Configuration& c) {
  if (passed(c)) return cut(c.name, 48);
  std::string ids = ids_text(c);
  return cut(c.name, 48) + " \xE2\x9C\x97 " + c.verdict + (ids.empty() ? "" : " " + cut(ids, 24));
}

class Page {
 public:
  std::string body;
  Json figures = Json::object();

  // A plot: its div, and its figure. `kind` and the data attributes are what the browser test
  // counts markers by.
  void plot(const std::string& kind, const std::string& attrs, Json data, Json layout, const std::string& caption) {
    const std::string id = "fig-" + std::to_string(figures.size());
    layout["margin"] = {{"t", 40}, {"r", 20}, {"b", 60}, {"l", 70}};
    layout["font"] = {{"size", 12}};
    figures[id] = {{"data", std::move(data)}, {"layout", std::move(layout)}};
    body += "<figure><div class=\"plot\" id=\"" + id + "\" data-kind=\"" + kind + "\" " + attrs +
            "><noscript>plots need JavaScript</noscript></div><figcaption>" + caption + "</figcaption></figure>\n";
  }
};

std::string td_num(const std::string& text, const Configuration* c, const std::string& title = "") {
  if (text.empty()) return "<td class=\"num na\">&mdash;</td>";
  if (c && !passed(*c))
    return "<td class=\"num tainted\" title=\"" + esc("measured on a configuration that did not pass: " + taint_text(*c)) +
           "\">" + esc(text) + "&nbsp;&dagger;</td>";
  return "<td class=\"num\"" + (title.empty() ? "" : " title=\"" + esc(title) + "\"") + ">" + esc(text) + "</td>";
}
std::string bytes_cell(std::optional<int64_t> b, const ByteUnit& u, const Configuration* c) {
  if (!b) return td_num("", c);
  return td_num(bytes_in(*b, u), c, with_commas(*b) + " bytes");
}
std::string opt_fixed(std::optional<double> v, int decimals) { return v ? fixed(*v, decimals) : ""; }

// A two-column table of what produced a report.
std::string context_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string s = "<table class=\"context\">\n";
  for (const auto& [k, v] : rows)
    if (!v.empty()) s += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>\n";
  return s + "</table>\n";
}

// ---- trade-off reports --------------------------------------------------------------------------

// A reason of more than a line folds under its first words: a framework's error message can run to
// a paragraph, and unfolded it made its row a screen tall (results/h200/2026-12-03-issue19-s10).
std::string folded(const std::string& text) {
  constexpr size_t kShown = 120;
  if (text.size() <= kShown) return esc(text);
  size_t cut = text.rfind(' ', kShown);
  if (cut == std::string::npos || cut < kShown / 2) cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return "<details><summary>" + esc(text.substr(0, cut)) + " &hellip;</summary>" + esc(text) + "</details>";
}

void verdict_cell(std::string* s, const Configuration& c) {
  *s += "<td class=\"verdict\"><span class=\"v v-" + esc(c.verdict) + "\">" + esc(c.verdict) + "</span>";
  for (const auto& f : c.findings) {
    *s += "<div class=\"finding\">" + (f.id.empty() ? "" : "<b>" + esc(f.id) + "</b> ") + "<code>" + esc(f.bucket) + "</code>";
    if (!f.reason.empty()) *s += "<div>" + folded(f.reason) + "</div>";
    if (!f.corpus_file.empty()) *s += "<div><code class=\"cmd\">recap replay " + esc(f.corpus_file) + "</code></div>";
    *s += "</div>";
  }
  if (!c.reason.empty()) *s += "<div class=\"reason\">" + folded(c.reason) + "</div>";
  *s += "</td>";
}

void size_table(Page* p, const TradeoffSize& size, size_t r) {
  std::vector<std::optional<int64_t>> alloc, reserved, used, pool, cap, act, saved;
  for (const auto& c : size.configurations) {
    alloc.push_back(c.memory.peak_allocated);
    reserved.push_back(c.memory.peak_reserved);
    used.push_back(c.memory.device_used);
    pool.push_back(c.memory.graph_pool);
    cap.push_back(c.memory.capture_peak);
    act.push_back(c.memory.activations_in_graphs);
    saved.push_back(c.memory.saved_by_recompute);
  }
  // one unit for the three headline memory columns, as PR #6429 writes them
  std::vector<std::optional<int64_t>> headline = alloc;
  headline.insert(headline.end(), reserved.begin(), reserved.end());
  headline.insert(headline.end(), used.begin(), used.end());
  const ByteUnit uh = byte_unit(headline), up = byte_unit(pool), uc = byte_unit(cap), ua = byte_unit(act),
                 us = byte_unit(saved);
  std::string& s = p->body;
  s += "<div class=\"wide\"><table class=\"configs\" data-report=\"" + std::to_string(r) + "\" data-size=\"" + esc(size.name) + "\">\n<thead><tr>";
  for (const std::string& h : std::vector<std::string>{"configuration", "verdict", "TFLOP/s (median)", "share of bf16 matmul", "iteration ms: median (p10&ndash;p90)",
        std::string("peak allocated (") + uh.name + ")", std::string("peak reserved (") + uh.name + ")",
        std::string("device memory used (") + uh.name + ")", std::string("graph pool (") + up.name + ")",
        std::string("capture peak (") + uc.name + ")", std::string("activations in graphs (") + ua.name + ")",
        std::string("saved by recompute (") + us.name + ")", "recompute overhead", "capture ms"})
    s += "<th>" + h + "</th>";
  s += "</tr></thead>\n<tbody>\n";
  bool any_tainted = false;
  for (const auto& c : size.configurations) {
    any_tainted = any_tainted || !passed(c);
    s += "<tr class=\"config " + std::string(passed(c) ? "passed" : "not-passed") + "\" data-config=\"" + esc(c.name) + "\">";
    s += "<td class=\"name\"><span class=\"glyph\" style=\"color:" + std::string(checkpoint_colour(c.checkpoint)) + "\">" +
         executor_glyph(c.executor) + "</span> " + esc(c.name) + "<div class=\"choice\">checkpoint " + esc(c.checkpoint);
    if (!c.selective_modules.empty()) {
      std::string m;
      for (const auto& x : c.selective_modules) m += (m.empty() ? "" : ", ") + x;
      s += " (" + esc(m) + ")";
    }
    s += ", executor " + esc(c.executor) + (c.choice.empty() ? "" : "; " + esc(choice_text(c))) + "</div></td>";
    verdict_cell(&s, c);
    s += td_num(opt_fixed(c.tflops, 1), &c);
    s += td_num(c.matmul_share ? fixed(*c.matmul_share * 100, 1) + "%" : "", &c);
    s += td_num(c.step_ms ? fixed(c.step_ms->median, 2) + " (" + fixed(c.step_ms->p10, 2) + "\xE2\x80\x93" +
                                fixed(c.step_ms->p90, 2) + ")"
                          : "",
                &c, c.step_ms ? std::to_string(c.step_ms->samples.size()) + " timed steps" : "");
    s += bytes_cell(c.memory.peak_allocated, uh, &c) + bytes_cell(c.memory.peak_reserved, uh, &c) +
         bytes_cell(c.memory.device_used, uh, &c) + bytes_cell(c.memory.graph_pool, up, &c) +
         bytes_cell(c.memory.capture_peak, uc, &c) + bytes_cell(c.memory.activations_in_graphs, ua, &c) +
         bytes_cell(c.memory.saved_by_recompute, us, &c);
    s += td_num(c.recompute_overhead ? percent(*c.recompute_overhead, 1) : "", &c);
    s += td_num(opt_fixed(c.capture_ms, 1), &c);
    s += "</tr>\n";
  }
  s += "</tbody></table></div>\n";
  if (any_tainted)
    s += "<p class=\"note\">&dagger; measured on a configuration that did not pass: its verdict and finding stand in its "
         "row, and its numbers are not a result.</p>\n";
}

void size_plots(Page* p, const TradeoffSize& size, size_t r) {
  const std::string attrs = "data-report=\"" + std::to_string(r) + "\" data-size=\"" + esc(size.name) + "\"";
  // peak memory against step time: a trace per configuration, so the legend names each
  std::vector<std::optional<int64_t>> alloc;
  for (const auto& c : size.configurations) alloc.push_back(c.memory.peak_allocated);
  const ByteUnit u = byte_unit(alloc);
  Json data = Json::array();
  for (const auto& c : size.configurations) {
    if (!c.step_ms || !c.memory.peak_allocated) continue;
    const StepTimes& t = *c.step_ms;
    const std::string colour = checkpoint_colour(c.checkpoint);
    std::string hover = plot_text(c.name) + "<br>" + plot_text(c.verdict) + "<br>median " + fixed(t.median, 3) +
                        " ms (p10 " + fixed(t.p10, 3) + ", p90 " + fixed(t.p90, 3) + ")<br>peak allocated " +
                        with_commas(*c.memory.peak_allocated) + " B";
    if (c.memory.peak_reserved) hover += "<br>peak reserved " + with_commas(*c.memory.peak_reserved) + " B";
    for (const auto& f : c.findings) hover += "<br>" + plot_text(finding_text(f));
    data.push_back({{"type", "scatter"},
                    {"mode", "markers"},
                    {"name", plot_text(plot_label(c))},
                    {"x", {fig_number(t.median)}},
                    {"y", {double(*c.memory.peak_allocated) / u.bytes}},
                    {"error_x", {{"type", "data"}, {"symmetric", false}, {"array", {fig_number(t.p90 - t.median)}},
                                 {"arrayminus", {fig_number(t.median - t.p10)}}, {"color", colour}, {"thickness", 1}}},
                    {"text", {hover}},
                    {"hoverinfo", "text"},
                    {"marker", {{"symbol", std::string(executor_symbol(c.executor)) + (passed(c) ? "" : "-open")},
                                {"color", colour},
                                {"size", 13},
                                {"line", {{"color", colour}, {"width", 2}}}}}});
  }
  const std::string legend =
      "marker: &#9679; eager, &#9632; per-layer graphs, &#9670; full-iteration graph; colour: checkpointing "
      "<span style=\"color:#1f77b4\">none</span>, <span style=\"color:#ff7f0e\">selective</span>, "
      "<span style=\"color:#2ca02c\">full</span>; hollow: did not pass";
  if (!data.empty())
    p->plot("mem-time", attrs, data,
            {{"title", {{"text", "peak memory against step time"}}},
             {"xaxis", {{"title", {{"text", "iteration ms (median; bars p10 to p90)"}}}, {"rangemode", "tozero"}}},
             {"yaxis", {{"title", {{"text", std::string("peak allocated (") + u.name + ")"}}}, {"rangemode", "tozero"}}},
             {"height", 460},
             {"hovermode", "closest"},
             {"legend", {{"font", {{"size", 10}}}}}},
            legend);

  // activation bytes inside graphs, per configuration (graphed executors only)
  std::vector<const Configuration*> graphed;
  std::vector<std::optional<int64_t>> bytes;
  for (const auto& c : size.configurations)
    if (c.executor != "eager" && (c.memory.activations_in_graphs || c.memory.saved_by_recompute)) {
      graphed.push_back(&c);
      bytes.push_back(c.memory.activations_in_graphs);
      bytes.push_back(c.memory.saved_by_recompute);
    }
  if (!graphed.empty()) {
    const ByteUnit ub = byte_unit(bytes);
    Json x = Json::array(), kept = Json::array(), saved = Json::array(), colours = Json::array(), pattern = Json::array();
    for (const Configuration* c : graphed) {
      x.push_back(plot_text(plot_label(*c)));
      kept.push_back(c->memory.activations_in_graphs ? Json(double(*c->memory.activations_in_graphs) / ub.bytes) : Json(nullptr));
      saved.push_back(c->memory.saved_by_recompute ? Json(double(*c->memory.saved_by_recompute) / ub.bytes) : Json(nullptr));
      colours.push_back(checkpoint_colour(c->checkpoint));
      pattern.push_back(passed(*c) ? "" : "/");
    }
    Json bars = Json::array();
    bars.push_back({{"type", "bar"}, {"name", "kept inside graphs"}, {"x", x}, {"y", kept},
                    {"marker", {{"color", colours}, {"pattern", {{"shape", pattern}}}}}});
    bars.push_back({{"type", "bar"}, {"name", "saved by recompute"}, {"x", x}, {"y", saved},
                    {"marker", {{"color", "#9e9e9e"}, {"pattern", {{"shape", pattern}}}}}});
    p->plot("activations", attrs, bars,
            {{"title", {{"text", "activation bytes inside graphs, per policy"}}},
             {"barmode", "group"},
             {"yaxis", {{"title", {{"text", ub.name}}}, {"rangemode", "tozero"}}},
             {"xaxis", {{"automargin", true}, {"type", "category"}}},
             {"height", 460}},
            "kept: activations the graphs hold from forward to backward; saved: what recompute does not keep, against "
            "the same executor without checkpointing; hatched: did not pass");
  }

  // the spread of step times: every timed step of each configuration
  Json boxes = Json::array();
  int n = 0;
  for (auto it = size.configurations.rbegin(); it != size.configurations.rend(); ++it) {  // first on top
    const Configuration& c = *it;
    if (!c.step_ms) continue;
    Json samples = Json::array();
    for (double v : c.step_ms->samples) samples.push_back(fig_number(v));
    const std::string colour = checkpoint_colour(c.checkpoint);
    boxes.push_back({{"type", "box"}, {"name", plot_text(plot_label(c))}, {"x", samples}, {"boxpoints", "all"},
                     {"jitter", 0.4}, {"pointpos", 0}, {"marker", {{"color", colour}, {"size", 4}}},
                     {"line", {{"color", colour}}}, {"hoverinfo", "x+name"}});
    ++n;
  }
  if (n)
    p->plot("spread", attrs, boxes,
            {{"title", {{"text", "spread of step times"}}},
             {"showlegend", false},
             {"xaxis", {{"title", {{"text", "iteration ms (every timed step)"}}}, {"rangemode", "tozero"}}},
             {"yaxis", {{"automargin", true}, {"type", "category"}}},
             {"height", 120 + 34 * n}},
            "box: quartiles and median of the timed steps; dots: each step");
}

void per_layer_tables(std::string* s, const TradeoffSize& size) {
  for (const auto& c : size.configurations) {
    if (c.per_layer.empty()) continue;
    std::vector<std::optional<int64_t>> b;
    for (const auto& l : c.per_layer) {
      b.push_back(l.activations_in_graphs);
      b.push_back(l.graph_pool);
    }
    const ByteUnit u = byte_unit(b);
    *s += "<details><summary>per layer: " + esc(c.name) + "</summary><table class=\"per-layer\"><thead><tr><th>layer</th>"
          "<th>forward ms</th><th>backward ms</th><th>activations in graphs (" + u.name + ")</th><th>graph pool (" +
          u.name + ")</th></tr></thead><tbody>\n";
    for (const auto& l : c.per_layer)
      *s += "<tr><td class=\"num\">" + std::to_string(l.layer) + "</td>" + td_num(opt_fixed(l.forward_ms, 3), &c) +
            td_num(opt_fixed(l.backward_ms, 3), &c) + bytes_cell(l.activations_in_graphs, u, &c) +
            bytes_cell(l.graph_pool, u, &c) + "</tr>\n";
    *s += "</tbody></table></details>\n";
  }
}

void tradeoff_section(Page* p, const LoadedReport& rep, size_t r) {
  const TradeoffReport& t = rep.tradeoff;
  const TradeoffContext& c = t.context;
  std::string& s = p->body;
  s += "<section class=\"tradeoff\" id=\"report-" + std::to_string(r) + "\">\n<h2>Trade-off: " + esc(rep.label) + "</h2>\n";
  std::string timing;
  if (c.measured_steps) timing = std::to_string(*c.measured_steps) + " timed steps";
  if (c.warmup_steps) timing += (timing.empty() ? "" : " after ") + std::to_string(*c.warmup_steps) + " warmup steps";
  if (!c.clock.empty()) timing += (timing.empty() ? "" : ", ") + c.clock;
  s += context_table({{"file", rep.file},
                      {"system under test", c.sut_name + " " + c.sut_version + (c.sut_device.empty() ? "" : " on " + c.sut_device)},
                      {"GPU", c.device_name},
                      {"bf16 matmul rate (measured)", c.matmul_bf16_tflops ? fixed(*c.matmul_bf16_tflops, 1) + " TFLOP/s" : ""},
                      {"timing", timing},
                      {"recap", c.recap_version + (c.git_commit.empty() ? "" : " at " + c.git_commit)},
                      {"command", c.command},
                      {"started", c.started_utc},
                      {"host", c.host}});
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    const TradeoffSize& size = t.sizes[i];
    s += "<h3 id=\"report-" + std::to_string(r) + "-size-" + std::to_string(i) + "\">" + esc(size.name) + ": " +
         esc(size_text(size)) + "</h3>\n";
    if (size.flops_per_step)
      s += "<p class=\"sub\">" + esc(flops_text(*size.flops_per_step)) +
           " a step (model FLOPs, recomputation not counted): TFLOP/s is that over the median step.</p>\n";
    for (const auto& n : judged_size_notes(size)) s += "<p class=\"note judged-size\">Judged size: " + esc(n) + "</p>\n";
    size_table(p, size, r);
    s += "<div class=\"plots\">\n";
    size_plots(p, size, r);
    s += "</div>\n";
    per_layer_tables(&s, size);
  }
  s += "</section>\n";
}

void comparison_section(Page* p, const std::vector<LoadedReport>& reports, const std::vector<Comparison>& cmp) {
  if (cmp.empty()) return;
  std::string& s = p->body;
  s += "<section class=\"comparison\" id=\"compare\">\n<h2>Trade-off reports side by side</h2>\n"
       "<p class=\"sub\">Each configuration in each report; &Delta; is against the first report that has it. A number "
       "from a configuration that did not pass is marked &dagger;.</p>\n";
  for (const auto& c : cmp) {
    s += "<h3>" + esc(c.size) + "</h3>\n";
    const ComparisonUnits units = comparison_units(c);
    const ByteUnit &ua = units.allocated, &ug = units.in_graphs;
    s += "<div class=\"wide\"><table class=\"compare\" data-size=\"" + esc(c.size) + "\"><thead><tr><th rowspan=\"2\">configuration</th>";
    for (size_t r : c.reports) s += "<th colspan=\"6\">" + esc(reports[r].label) + "</th>";
    s += "</tr><tr>";
    for (size_t k = 0; k < c.reports.size(); ++k)
      s += std::string("<th>verdict</th><th>ms (median)</th><th>&Delta; ms</th><th>peak allocated (") + ua.name +
           ")</th><th>&Delta;</th><th>in graphs (" + ug.name + ")</th>";
    s += "</tr></thead><tbody>\n";
    for (const auto& row : c.rows) {
      const Configuration* base = nullptr;
      for (const Configuration* x : row.in)
        if (x && !base) base = x;
      s += "<tr class=\"compare-row\" data-config=\"" + esc(row.configuration) + "\"><td class=\"name\">" +
           esc(row.configuration) + "</td>";
      for (const Configuration* x : row.in) {
        if (!x) {
          s += "<td class=\"na\" colspan=\"6\">not in this report</td>";
          continue;
        }
        s += "<td><span class=\"v v-" + esc(x->verdict) + "\">" + esc(x->verdict) + "</span>" +
             (x->findings.empty() ? "" : " <small>" + esc(ids_text(*x)) + "</small>") + "</td>";
        s += td_num(x->step_ms ? fixed(x->step_ms->median, 2) : "", x);
        s += td_num(x != base && x->step_ms && base->step_ms && base->step_ms->median > 0
                        ? percent(x->step_ms->median / base->step_ms->median - 1, 1)
                        : "",
                    x);
        s += bytes_cell(x->memory.peak_allocated, ua, x);
        s += td_num(x != base && x->memory.peak_allocated && base->memory.peak_allocated
                        ? (*x->memory.peak_allocated >= *base->memory.peak_allocated ? "+" : "") +
                              bytes_in(*x->memory.peak_allocated - *base->memory.peak_allocated, ua)
                        : "",
                    x);
        s += bytes_cell(x->memory.activations_in_graphs, ug, x);
      }
      s += "</tr>\n";
    }
    s += "</tbody></table></div>\n<div class=\"plots\">\n";
    // the same figures per report, as grouped bars
    for (const std::string kind : {"cmp-time", "cmp-act"}) {
      const bool time = kind == "cmp-time";
      Json data = Json::array();
      for (size_t k = 0; k < c.reports.size(); ++k) {
        Json x = Json::array(), y = Json::array(), pattern = Json::array();
        for (const auto& row : c.rows) {
          const Configuration* v = row.in[k];
          x.push_back(plot_text(cut(row.configuration, 48)));
          if (!v) y.push_back(nullptr);
          else if (time) y.push_back(v->step_ms ? fig_number(v->step_ms->median) : Json(nullptr));
          else y.push_back(v->memory.activations_in_graphs ? Json(double(*v->memory.activations_in_graphs) / ug.bytes) : Json(nullptr));
          pattern.push_back(v && !passed(*v) ? "/" : "");
        }
        data.push_back({{"type", "bar"}, {"name", plot_text(reports[c.reports[k]].label)}, {"x", x}, {"y", y},
                        {"marker", {{"pattern", {{"shape", pattern}}}}}});
      }
      p->plot(kind, "data-size=\"" + esc(c.size) + "\"", data,
              {{"title", {{"text", time ? "iteration ms (median), per report" : "activation bytes inside graphs, per report"}}},
               {"barmode", "group"},
               {"yaxis", {{"title", {{"text", time ? "ms" : ug.name}}}, {"rangemode", "tozero"}}},
               {"xaxis", {{"automargin", true}, {"type", "category"}}},
               {"height", 440}},
              "one bar per report; hatched: did not pass");
    }
    s += "</div>\n";
  }
  s += "</section>\n";
}

// ---- campaign and gate reports ------------------------------------------------------------------

void campaign_section(Page* p, const LoadedReport& rep, size_t r) {
  const CampaignView& v = rep.campaign;
  std::string& s = p->body;
  const std::string title = v.command == "gate" ? "Gate" : v.command == "replay" ? "Replay" : "Campaign";
  s += "<section class=\"campaign\" id=\"report-" + std::to_string(r) + "\">\n<h2>" + title + ": " + esc(rep.label) + "</h2>\n";
  s += context_table({{"file", rep.file},
                      {"system under test", v.sut_name + (v.sut_version.empty() ? "" : " " + v.sut_version) +
                                                (v.sut_device.empty() ? "" : " on " + v.sut_device)},
                      {"recap", v.recap_version + (v.git_commit.empty() ? "" : " at " + v.git_commit)},
                      {"backend, device", v.backend + (v.device.empty() ? "" : ", " + v.device)},
                      {"seed", v.seed},
                      {"policy", v.policy},
                      {"cases requested", v.cases_requested ? std::to_string(v.cases_requested) : ""},
                      {"jobs, shard", (v.jobs ? std::to_string(v.jobs) : "") + (v.shard.empty() ? "" : ", shard " + v.shard)},
                      {"known findings", v.known_findings_file},
                      {"started", v.started_utc},
                      {"host", v.host}});
  std::string disp;
  for (const auto& [k, n] : v.by_disposition) disp += (disp.empty() ? "" : ", ") + k + " " + std::to_string(n);
  s += "<p class=\"summary\"><b>" + std::to_string(v.cases) + " cases</b> (" + esc(disp) + "), " +
       std::to_string(v.judged_cases) + " judged, in " + fixed(v.seconds, 1) + " s (" + fixed(v.cases_per_minute, 1) +
       " cases/min); exit code " + std::to_string(v.exit_code) +
       (v.interrupted.empty() ? "" : "; <b>interrupted by " + esc(v.interrupted) + "</b>") + "</p>\n";

  s += "<h3>Buckets</h3>\n";
  if (v.buckets.empty()) {
    s += "<p>No failing case.</p>\n";
  } else {
    s += "<table class=\"buckets\" data-report=\"" + std::to_string(r) + "\"><thead><tr><th>bucket</th><th>failing cases</th>"
         "<th>known findings</th><th>counterexample</th><th>replay command</th><th>diagnosis</th><th>reason</th></tr></thead><tbody>\n";
    for (const auto& b : v.buckets) {
      std::string known = b.new_cases < 0 ? "" : b.known ? "known: " + b.accepted : std::to_string(b.new_cases) + " new" +
                                                                                        (b.accepted.empty() ? "" : "; accepted: " + b.accepted);
      s += "<tr class=\"bucket " + std::string(b.new_cases < 0 ? "" : b.known ? "known" : "new") + "\"><td><code>" + esc(b.bucket) +
           "</code></td><td class=\"num\">" + std::to_string(b.cases) + "</td><td>" + esc(known) + "</td><td>" +
           (b.corpus_file.empty() ? (b.known ? "not written (known)" : "&mdash;") : "<code>" + esc(b.corpus_file) + "</code>") +
           "</td><td>" + (b.replay_command.empty() ? "&mdash;" : "<code class=\"cmd\">" + esc(b.replay_command) + "</code>") +
           (b.reproduce.empty() ? "" : "<div><code class=\"cmd\">" + esc(b.reproduce) + "</code></div>") + "</td><td>" +
           esc(b.diagnosis) + "</td><td>" + esc(b.reason) + (b.flaky.empty() ? "" : " <b>flaky:</b> " + esc(b.flaky)) +
           "</td></tr>\n";
    }
    s += "</tbody></table>\n";
  }

  s += "<h3>Properties: judged and skipped</h3>\n<table class=\"properties\" data-report=\"" + std::to_string(r) +
       "\"><thead><tr><th>property</th><th>judged</th><th>skipped</th><th>verdicts of the judged</th>"
       "<th>commonest reasons for skipping</th></tr></thead><tbody>\n";
  for (const auto& q : v.properties) {
    std::string d, why;
    for (const auto& [k, n] : q.by_disposition) d += (d.empty() ? "" : ", ") + k + " " + std::to_string(n);
    for (const auto& [reason, n] : q.skip_reasons)
      why += "<div>" + std::to_string(n) + "&times; " + esc(reason.empty() ? "(no reason given)" : reason) + "</div>";
    s += "<tr><td>" + esc(q.property) + "</td><td class=\"num\">" + std::to_string(q.judged) + "</td><td class=\"num\">" +
         std::to_string(q.skipped) + "</td><td>" + esc(d) + "</td><td class=\"why\">" + why + "</td></tr>\n";
  }
  s += "</tbody></table>\n<div class=\"plots\">\n";
  const std::string attrs = "data-report=\"" + std::to_string(r) + "\"";
  if (!v.properties.empty()) {
    Json x = Json::array(), judged = Json::array(), skipped = Json::array();
    for (const auto& q : v.properties) {
      x.push_back(plot_text(q.property));
      judged.push_back(q.judged);
      skipped.push_back(q.skipped);
    }
    p->plot("properties", attrs,
            Json::array({{{"type", "bar"}, {"name", "judged"}, {"x", x}, {"y", judged}, {"marker", {{"color", "#2ca02c"}}}},
                         {{"type", "bar"}, {"name", "skipped"}, {"x", x}, {"y", skipped}, {"marker", {{"color", "#bdbdbd"}}}}}),
            {{"title", {{"text", "cases judged and skipped, per property"}}}, {"barmode", "stack"}, {"height", 380},
             {"xaxis", {{"type", "category"}}},
             {"yaxis", {{"title", {{"text", "cases"}}}}}},
            "a property skips a case it cannot judge, with its reason (table above)");
  }
  s += "</div>\n";

  if (v.has_coverage && !v.coverage.empty()) {
    s += "<h3>Coverage</h3>\n<p class=\"sub\">" +
         std::string(v.coverage_checked ? (v.coverage_ok ? "checked: every requirement met" : "checked: <b>short</b>")
                                        : "not checked by this command (shown against the gate's requirements)") +
         "</p>\n<table class=\"coverage\"><thead><tr><th>label</th><th>cases</th><th>share</th><th>needs</th><th>met</th>"
         "<th>why</th></tr></thead><tbody>\n";
    for (const auto& q : v.coverage)
      s += "<tr class=\"" + std::string(q.met ? "met" : "short") + "\"><td>" + esc(q.label) + "</td><td class=\"num\">" +
           std::to_string(q.count) + "</td><td class=\"num\">" + fixed(q.share * 100, 1) + "%</td><td class=\"num\">" +
           fixed(q.min_share * 100, 0) + "%</td><td>" + (q.met ? "yes" : "<b>no</b>") + "</td><td>" + esc(q.why) + "</td></tr>\n";
    s += "</tbody></table>\n";
    for (const auto& f : v.shortfalls) s += "<p class=\"bad\">" + esc(f) + "</p>\n";
    Json x = Json::array(), share = Json::array(), need = Json::array(), colours = Json::array();
    for (const auto& q : v.coverage) {
      x.push_back(plot_text(q.label));
      share.push_back(q.share * 100);
      need.push_back(q.min_share * 100);
      colours.push_back(q.met ? "#2ca02c" : "#d62728");
    }
    s += "<div class=\"plots\">\n";
    p->plot("coverage", attrs,
            Json::array({{{"type", "bar"}, {"name", "share of judged cases"}, {"x", x}, {"y", share}, {"marker", {{"color", colours}}}},
                         {{"type", "scatter"}, {"mode", "markers"}, {"name", "requirement"}, {"x", x}, {"y", need},
                          {"marker", {{"symbol", "line-ew-open"}, {"size", 40}, {"color", "#000"}, {"line", {{"width", 3}}}}}}}),
            {{"title", {{"text", "coverage against its requirements"}}}, {"height", 380}, {"xaxis", {{"type", "category"}}},
             {"yaxis", {{"title", {{"text", "% of judged cases"}}}, {"rangemode", "tozero"}}}},
            "bar: the share of judged cases with the label; line: the share it needs");
    s += "</div>\n";
  }

  if (!v.findings.empty()) {
    s += "<h3>Findings that are not failures</h3><ul>\n";
    for (const auto& f : v.findings) s += "<li>" + esc(f) + "</li>\n";
    s += "</ul>\n";
  }
  if (!v.crashes.empty()) {
    s += "<h3>Crashed workers</h3><ul>\n";
    for (const auto& f : v.crashes) s += "<li>" + esc(f) + "</li>\n";
    s += "</ul>\n";
  }
  if (!v.replays.empty()) {
    s += "<h3>Replays</h3>\n<table class=\"replays\"><thead><tr><th>file</th><th>verdict</th><th>expected</th><th>as expected"
         "</th><th>replay command</th></tr></thead><tbody>\n";
    for (const auto& x : v.replays)
      s += "<tr class=\"" + std::string(x.as_expected ? "met" : "short") + "\"><td><code>" + esc(x.file) + "</code></td><td>" +
           esc(x.disposition) + "</td><td>" + esc(x.expected) + "</td><td>" +
           (x.as_expected ? "yes" : "<b>no</b>: " + esc(x.mismatch)) + "</td><td><code class=\"cmd\">" + esc(x.replay_command) +
           "</code></td></tr>\n";
    s += "</tbody></table>\n";
  }
  s += "</section>\n";
}

void campaigns_side_by_side(Page* p, const std::vector<LoadedReport>& reports) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < reports.size(); ++i)
    if (reports[i].schema == kReportSchema) idx.push_back(i);
  if (idx.size() < 2) return;
  std::string& s = p->body;
  s += "<section class=\"comparison\" id=\"compare-campaigns\">\n<h2>Campaigns side by side</h2>\n<table class=\"campaigns\">"
       "<thead><tr><th>report</th><th>command</th><th>commit</th><th>seed</th><th>cases</th><th>by disposition</th>"
       "<th>buckets</th><th>new failing cases</th><th>coverage</th></tr></thead><tbody>\n";
  std::vector<std::string> buckets;
  for (size_t i : idx) {
    const CampaignView& v = reports[i].campaign;
    std::string disp;
    for (const auto& [k, n] : v.by_disposition) disp += (disp.empty() ? "" : ", ") + k + " " + std::to_string(n);
    int fresh = 0;
    for (const auto& b : v.buckets) {
      fresh += b.new_cases < 0 ? b.cases : b.new_cases;
      if (std::find(buckets.begin(), buckets.end(), b.bucket) == buckets.end()) buckets.push_back(b.bucket);
    }
    s += "<tr><td>" + esc(reports[i].label) + "</td><td>" + esc(v.command) + "</td><td><code>" + esc(v.git_commit.substr(0, 12)) +
         "</code></td><td class=\"num\">" + esc(v.seed) + "</td><td class=\"num\">" + std::to_string(v.cases) + "</td><td>" +
         esc(disp) + "</td><td class=\"num\">" + std::to_string(v.buckets.size()) + "</td><td class=\"num\">" +
         std::to_string(fresh) + "</td><td>" +
         (!v.has_coverage ? "&mdash;" : !v.coverage_checked ? "not checked" : v.coverage_ok ? "met" : "<b>short</b>") +
         "</td></tr>\n";
  }
  s += "</tbody></table>\n";
  if (!buckets.empty()) {
    std::sort(buckets.begin(), buckets.end());
    s += "<table class=\"bucket-matrix\"><thead><tr><th>bucket: failing cases</th>";
    for (size_t i : idx) s += "<th>" + esc(reports[i].label) + "</th>";
    s += "</tr></thead><tbody>\n";
    for (const auto& b : buckets) {
      s += "<tr><td><code>" + esc(b) + "</code></td>";
      for (size_t i : idx) {
        std::string cell = "&mdash;";
        for (const auto& x : reports[i].campaign.buckets)
          if (x.bucket == b) cell = std::to_string(x.cases) + (x.known ? " (known)" : x.new_cases > 0 ? " (" + std::to_string(x.new_cases) + " new)" : "");
        s += "<td class=\"num\">" + cell + "</td>";
      }
      s += "</tr>\n";
    }
    s += "</tbody></table>\n";
  }
  s += "</section>\n";
}

const char* kStyle = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#222;max-width:1800px}
h1{font-size:1.6em}h2{border-bottom:2px solid #ccc;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.na{color:#999;text-align:center}
table.context th{width:14em}
tr.not-passed{background:#fff1f0}td.tainted{color:#a8071a;font-style:italic}
.v{font-weight:bold}.v-passed{color:#237804}.v-failed,.v-incorrect,.v-crashed{color:#a8071a}.v-skipped,.v-out-of-memory{color:#8c6d00}
.finding{margin-top:.2em;font-size:.9em}.reason{font-size:.85em;color:#555}.choice{font-size:.8em;color:#666}
code{font-size:.9em;word-break:break-all}code.cmd{background:#f6f6f6;padding:0 .2em}
tr.short,tr.new{background:#fff1f0}tr.known{background:#f6ffed}
.plots{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0;flex:1 1 560px;min-width:480px}
figcaption{font-size:.85em;color:#555}.note,.sub{font-size:.85em;color:#555}.bad{color:#a8071a}
nav ul{columns:2}.why div{font-size:.85em}div.wide{overflow-x:auto}
table.configs{font-size:.85em}table.configs td.name{min-width:14em}table.configs td.verdict{min-width:12em;max-width:20em}
table.buckets td:first-child{min-width:16em}table.buckets td:nth-child(5){min-width:18em}
)";

}  // namespace

std::string render_html(const std::vector<LoadedReport>& reports, const std::string& plotly_js) {
  Page p;
  std::string toc;
  for (size_t r = 0; r < reports.size(); ++r) {
    toc += "<li><a href=\"#report-" + std::to_string(r) + "\">" + esc(reports[r].label) + "</a> <small>" +
           esc(reports[r].schema) + "</small></li>\n";
    if (reports[r].schema == kTradeoffSchema) tradeoff_section(&p, reports[r], r);
    else campaign_section(&p, reports[r], r);
  }
  const std::vector<Comparison> cmp = compare_tradeoffs(reports);
  if (!cmp.empty()) toc += "<li><a href=\"#compare\">trade-off reports side by side</a></li>\n";
  comparison_section(&p, reports, cmp);
  size_t campaigns = std::count_if(reports.begin(), reports.end(), [](const auto& r) { return r.schema == kReportSchema; });
  if (campaigns >= 2) toc += "<li><a href=\"#compare-campaigns\">campaigns side by side</a></li>\n";
  campaigns_side_by_side(&p, reports);

  // Only the page's own scripts run (a nonce from its content), and nothing is fetched.
  const std::string nonce = hex64(fnv1a64(p.body + script_json(p.figures)));
  std::string title;
  for (const auto& r : reports) title += (title.empty() ? "" : ", ") + r.label;
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'nonce-" + nonce +
          "'; style-src 'unsafe-inline'; img-src data: blob:\">\n";
  page += "<meta name=\"generator\" content=\"recap report\">\n<title>recap report: " + esc(title) + "</title>\n<style>" +
          kStyle + "</style>\n";
  // plotly.js as Debian ships it (MIT licence), inlined so that the page needs no network.
  std::string js = plotly_js;
  for (size_t at = 0; (at = js.find("</script", at)) != std::string::npos; at += 2) js.replace(at, 2, "<\\/");
  page += "<script nonce=\"" + nonce + "\">\n" + js + "\n</script>\n</head>\n<body>\n<h1>recap report</h1>\n";
  page += "<nav><ul>\n" + toc + "</ul></nav>\n" + p.body;
  page += "<script type=\"application/json\" id=\"recap-figures\">" + script_json(p.figures) + "</script>\n";
  page += "<script nonce=\"" + nonce + R"(">
(function () {
  var figures = JSON.parse(document.getElementById('recap-figures').textContent);
  Object.keys(figures).forEach(function (id) {
    var el = document.getElementById(id);
    if (typeof Plotly === 'undefined') { el.textContent = 'the plotting library did not load'; return; }
    Plotly.newPlot(el, figures[id].data, figures[id].layout, {displaylogo: false, responsive: true})
      .then(function () { el.setAttribute('data-rendered', 'true'); });
  });
})();
</script>
</body>
</html>
)";
  return page;
}

}  // namespace recap::reports
