#include "harness/cli/progress.h"

#include <cstdio>
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

void progress_line(int done, int total, int failures, double elapsed, double left) {
  double rate = elapsed > 0 ? done / elapsed : 0.0;
  std::fprintf(stderr, "\r  %d/%d cases, %.1f cases/s, %d failure%s, %s left   ", done, total, rate, failures,
               failures == 1 ? "" : "s", fmt_time(left).c_str());
  std::fflush(stderr);
}

void clear_progress_line() { std::fprintf(stderr, "\r%*s\r", 78, ""); }

}  // namespace recap::cli
