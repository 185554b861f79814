// SIGINT and SIGTERM during a campaign: no new case starts, a shrink keeps what it has, and recap
// writes the partial report and every counterexample found so far, stops its workers and exits
// 128 + the signal. A second SIGINT ends the process at once (the default action); SIGTERM never
// does (timeout sends it twice: to the command and to its process group).
#pragma once

#include <atomic>
#include <string>

namespace recap::cli {

// Installs the handlers (once; fuzz and gate call it before their campaign). A --jobs worker passes
// false: a signal to the process group (Ctrl-C, `timeout`, Slurm) reaches it twice, directly and
// forwarded by its parent, and the second must not kill it before it hands over its cases.
void install_stop_handlers(bool second_signal_kills = true);
// The flag the campaign polls (properties::FuzzOptions::stop); true once a signal arrived.
const std::atomic<bool>* stop_flag();
// The signal that asked to stop, 0 if none.
int stop_signal();
// A command's exit code once its results are written: 128 + the signal when one cut it short (and
// *interrupted says which), else `rc`.
int exit_code_after_stop(int rc, std::string* interrupted);

}  // namespace recap::cli
