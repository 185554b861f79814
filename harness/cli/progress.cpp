#include "harness/cli/progress.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace recap::cli {

namespace {
std::string fmt_time(double s) {
  char buf[32];
  if (s < 0) return "-";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

}  // namespace

bool progress_as_lines() { return std::getenv("RECAP_PROGRESS_LINES") != nullptr; }

void progress_line(int done, int total, int failures, double elapsed, double left, const std::string& extra) {
  const std::string tail = extra.empty() ? "" : ", " + extra;
  double rate = elapsed > 0 ? done / elapsed : 0.0;
  if (progress_as_lines()) {  // a log, not a terminal: a whole line every 10 s
    static auto last = std::chrono::steady_clock::time_point{};
    auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(10)) return;
    last = now;
    std::fprintf(stderr, "progress: %d/%d cases, %.1f cases/s, %d failure%s, %.0f s elapsed, %s left%s\n", done, total,
                 rate, failures, failures == 1 ? "" : "s", elapsed, fmt_time(left).c_str(), tail.c_str());
    std::fflush(stderr);
    return;
  }
  std::fprintf(stderr, "\r  %d/%d cases, %.1f cases/s, %d failure%s, %s left%s   ", done, total, rate, failures,
               failures == 1 ? "" : "s", fmt_time(left).c_str(), tail.c_str());
  std::fflush(stderr);
}

void clear_progress_line() {
  if (!progress_as_lines()) std::fprintf(stderr, "\r%*s\r", 78, "");
}

}  // namespace recap::cli
