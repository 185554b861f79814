// recap report FILE.json... [-o PAGE.html] [--text]: renders campaign and gate reports
// (recap.report/1) and trade-off reports (recap.tradeoff/1) as one self-contained HTML page
// (reports/html.cpp) and as plain-text tables on stdout (reports/text.cpp). Exit 0 rendered, 2 bad
// input (a missing file, malformed JSON, an unknown schema, an unwritable -o): one line.
#include <cstdio>
#include <cstdlib>

#include "harness/base/json_read.h"
#include "harness/cli/cli.h"
#include "reports/render.h"
#include "reports/reporter.h"

namespace recap::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> files;
  std::string output;
  bool text = false;
};

// plotly.js, inlined into the page: RECAP_PLOTLY_JS, else the file CMake found (Debian's
// python3-plotly ships it; scripts/bootstrap.sh installs it).
std::string plotly_js() {
  std::string path;
  if (const char* env = std::getenv("RECAP_PLOTLY_JS"); env && *env) path = env;
#ifdef RECAP_PLOTLY_JS
  if (path.empty()) path = RECAP_PLOTLY_JS;
#endif
  if (path.empty())
    throw UsageError("-o: no plotly.js to draw the page's plots with (install Debian's python3-plotly and configure again, "
                     "or set RECAP_PLOTLY_JS); --text needs none");
  std::string js;
  if (std::string err = read_bounded_file(path, size_t{64} << 20, &js); !err.empty())
    throw UsageError("-o: plotly.js: " + err + " (RECAP_PLOTLY_JS names another)");
  return js;
}

int report(const ReportArgs& a) {
  if (!a.output.empty()) check_output_file("-o", a.output);
  std::vector<reports::LoadedReport> loaded;
  for (const auto& f : a.files) {
    reports::LoadedReport r;
    if (std::string err = reports::load_report(f, &r); !err.empty()) throw UsageError(err);
    loaded.push_back(std::move(r));
  }
  reports::label_reports(&loaded);
  if (!a.output.empty()) {
    const std::string page = reports::render_html(loaded, plotly_js());
    reports::write_or_throw(a.output, page, "-o");
    std::printf("recap report: %zu report%s to %s\n", loaded.size(), loaded.size() == 1 ? "" : "s", a.output.c_str());
  }
  if (a.text || a.output.empty()) std::fputs(reports::render_text(loaded).c_str(), stdout);
  return kExitOk;
}

}  // namespace

void add_report_command(CLI::App& app, Runner* run) {
  auto [cmd, args] = add_command<ReportArgs>(
      app, run, report, "report",
      "Render campaign and gate reports (recap.report/1) and trade-off reports (recap.tradeoff/1): one self-contained "
      "HTML page (-o; no network needed to view it) and plain-text tables (stdout, with --text or without -o).");
  cmd->add_option("files", args->files, "report files (JSON), drawn in this order; trade-off reports of the same size "
                                        "are compared side by side")
      ->required();
  cmd->add_option("-o,--output", args->output, "the HTML page to write");
  cmd->add_flag("--text", args->text, "print the tables on stdout too when -o is given");
}

}  // namespace recap::cli
