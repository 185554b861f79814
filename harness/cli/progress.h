// The progress line a campaign keeps updated on a terminal's stderr (nothing when stderr is not a
// terminal): cases done, cases/s, failures, time left. With RECAP_PROGRESS_LINES set, whole lines
// every 10 s whatever stderr is (logs of long campaigns on another machine).
#pragma once

#include <string>

namespace recap::cli {

// left_s < 0: no budget. `extra`, when not empty, ends the line (--gpus: cases done per GPU given).
void progress_line(int done, int total, int failures, double elapsed_s, double left_s, const std::string& extra = "");
void clear_progress_line();
bool progress_as_lines();

}  // namespace recap::cli
