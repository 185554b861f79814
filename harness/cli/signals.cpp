// The stop handlers: they only set an atomic flag (async-signal-safe); SIGINT's also restores the
// default action, so that a second Ctrl-C kills a campaign that is stuck in a long case (SIGKILL
// does that after a SIGTERM).
#include "harness/cli/signals.h"

#include <csignal>
#include <cstring>

namespace recap::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
std::atomic<bool> g_second_kills{true};

extern "C" void on_stop(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
  // Only a second Ctrl-C kills. coreutils' timeout sends SIGTERM to the command and then to its
  // whole process group, so the command can get two at once: the second must not kill it before
  // it writes what it has (the H200 lost three campaigns' reports and logs that way).
  if (sig == SIGINT && g_second_kills.load()) std::signal(sig, SIG_DFL);
}

}  // namespace

void install_stop_handlers(bool second_signal_kills) {
  g_second_kills.store(second_signal_kills);
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read from a worker in the middle of a case goes on: cases finish
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

const std::atomic<bool>* stop_flag() { return &g_stop; }

int stop_signal() { return g_signal.load(); }

int exit_code_after_stop(int rc, std::string* interrupted) {
  const int sig = stop_signal();
  if (sig == 0) return rc;
  *interrupted = strsignal(sig);
  return 128 + sig;
}

}  // namespace recap::cli
