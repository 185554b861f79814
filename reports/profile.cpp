// --profile's campaign summary: each phase's median, p90 and share of the cases' time over the case
// reports' timings.profile (docs/profile.md), and its text table.
#include "reports/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "harness/base/profile.h"

namespace recap::reports {

namespace {

// A row's name without its "_ms".
std::string bare(const std::string& key) {
  return key.size() > 3 && key.compare(key.size() - 3, 3, "_ms") == 0 ? key.substr(0, key.size() - 3) : key;
}

double number(const Json& j) { return j.is_number() ? j.get<double>() : 0.0; }

struct Row {
  std::string phase, kind;
  std::vector<double> values;  // per profiled case, 0 where the case has none
  std::vector<bool> has;       // per profiled case, whether it has the phase
};

// The rows in reading order: kinds in this order, and within a kind as profile.h lists the phases,
// then in the order they were first seen.
int kind_rank(const std::string& kind) {
  static const char* order[] = {"case", "run", "phase", "within", "worker", "oracle", "other"};
  for (int i = 0; i < 7; ++i)
    if (kind == order[i]) return i;
  return 7;
}

int phase_rank(const std::string& phase) {
  int i = 0;
  for (const char* k : profile::kDisjoint) {
    if (phase == "runs." + bare(k)) return i;
    ++i;
  }
  if (phase == "runs.other") return i;
  ++i;
  for (const char* k : profile::kWithin) {
    if (phase == "runs." + bare(k)) return i;
    ++i;
  }
  static const char* runs[] = {"case", "eager_twin", "no_checkpoint_twin", "graph_safe_twin", "hygiene_run"};
  for (const char* r : runs) {
    if (phase == std::string("run.") + r) return i;
    ++i;
  }
  return 1000;
}

}  // namespace

Json profile_summary_json(const std::vector<const Json*>& case_reports) {
  std::vector<const Json*> profiles;
  for (const Json* r : case_reports) {
    if (!r || !r->is_object()) continue;
    auto t = r->find("timings");
    if (t == r->end() || !t->is_object()) continue;
    auto p = t->find("profile");
    if (p != t->end() && p->is_object()) profiles.push_back(&*p);
  }
  if (profiles.empty()) return Json();
  const size_t n = profiles.size();
  std::vector<Row> rows;
  std::map<std::string, size_t> index;
  auto put = [&](const std::string& phase, const std::string& kind, size_t c, double v) {
    auto it = index.find(phase);
    if (it == index.end()) {
      it = index.emplace(phase, rows.size()).first;
      rows.push_back({phase, kind, std::vector<double>(n, 0.0), std::vector<bool>(n, false)});
    }
    Row& row = rows[it->second];
    row.has[c] = true;
    row.values[c] += v;
  };
  double wall_total = 0;
  for (size_t c = 0; c < n; ++c) {
    const Json& p = *profiles[c];
    const double wall = number(p.value("wall_ms", Json(0.0)));
    wall_total += wall;
    put("case", "case", c, wall);
    if (auto runs = p.find("runs"); runs != p.end() && runs->is_object())
      for (const auto& [name, run] : runs->items()) {
        if (!run.is_object()) continue;
        put("run." + name, "run", c, number(run.value("total_ms", Json(0.0))));
        for (const auto& [k, v] : run.items()) {
          if (k == "total_ms") continue;
          if (k == "worker" && v.is_object()) {
            for (const auto& [wk, wv] : v.items())
              if (wv.is_number()) put("worker." + bare(wk), "worker", c, number(wv));
            continue;
          }
          if (!v.is_number()) continue;
          bool within = false;
          for (const char* w : profile::kWithin) within = within || k == w;
          put("runs." + bare(k), within ? "within" : "phase", c, number(v));
        }
      }
    if (auto o = p.find("oracles"); o != p.end() && o->is_object())
      for (const auto& [k, v] : o->items()) put("oracle." + bare(k), "oracle", c, number(v));
    put("other", "other", c, number(p.value("other_ms", Json(0.0))));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (kind_rank(a.kind) != kind_rank(b.kind)) return kind_rank(a.kind) < kind_rank(b.kind);
    return phase_rank(a.phase) < phase_rank(b.phase);
  });
  Json phases = Json::array();
  for (Row& row : rows) {
    double total = 0;
    for (double v : row.values) total += v;
    std::vector<double> sorted = row.values;
    std::sort(sorted.begin(), sorted.end());
    // nearest rank: the median is the ceil(n/2)-th value, p90 the ceil(0.9 n)-th
    const double median = sorted[(n + 1) / 2 - 1];
    const double p90 = sorted[static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n))) - 1];
    phases.push_back({{"phase", row.phase},
                      {"kind", row.kind},
                      {"cases", std::count(row.has.begin(), row.has.end(), true)},
                      {"median_ms", median},
                      {"p90_ms", p90},
                      {"total_ms", total},
                      {"share", wall_total > 0 ? total / wall_total : 0.0}});
  }
  return {{"cases", n}, {"wall_ms", wall_total}, {"phases", phases}};
}

std::string profile_table_text(const Json& summary) {
  if (!summary.is_object() || !summary.contains("phases")) return "";
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "  profile (%d cases, %.1f s in them; ms per case; share of the cases' time):\n"
                "    %-32s %10s %10s %7s\n",
                summary.value("cases", 0), summary.value("wall_ms", 0.0) / 1000.0, "phase", "median", "p90", "share");
  out += line;
  for (const Json& r : summary["phases"]) {
    const std::string kind = r.value("kind", std::string());
    std::string name = r.value("phase", std::string());
    // indentation shows what adds up: the case = its runs + its oracles + other; the runs = their
    // phases; within-counters and a worker's own phases sit inside those
    if (kind == "run" || kind == "oracle" || kind == "other") name = "  " + name;
    else if (kind == "phase") name = "    " + name;
    else if (kind == "within" || kind == "worker") name = "      " + name + (kind == "within" ? " (within)" : "");
    std::snprintf(line, sizeof line, "    %-32s %10.2f %10.2f %6.1f%%\n", name.c_str(), r.value("median_ms", 0.0),
                  r.value("p90_ms", 0.0), 100.0 * r.value("share", 0.0));
    out += line;
  }
  return out;
}

}  // namespace recap::reports
