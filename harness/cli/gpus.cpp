#include "harness/cli/gpus.h"

#include <set>
#include <sstream>

namespace recap::cli {

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : s) {
    if (ch == sep) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  parts.push_back(cur);
  return parts;
}
}  // namespace

std::string parse_gpus(const std::string& text, int count, const std::string& why_unknown, std::vector<int>* out) {
  out->clear();
  if (text == "all") {
    if (count < 0) return "--gpus all: cannot count the GPUs (" + why_unknown + "); name them (--gpus 0,1)";
    if (count == 0) return "--gpus all: no GPU (" + why_unknown + ")";
    for (int g = 0; g < count; ++g) out->push_back(g);
    return "";
  }
  if (text.empty()) return "--gpus: an empty list (ordinals such as 0,1,2,3, or all)";
  std::set<int> seen;
  for (const std::string& p : split(text, ',')) {
    if (p.empty()) return "--gpus '" + text + "': an empty entry (ordinals such as 0,1,2,3, or all)";
    if (p[0] == '-' && p.size() > 1 && p.find_first_not_of("0123456789", 1) == std::string::npos)
      return "--gpus '" + text + "': " + p + " is negative (device ordinals count from 0)";
    // digits only, at most 4: no sign, no space, no 1e3 (a host has at most a few dozen GPUs)
    if (p.size() > 4 || p.find_first_not_of("0123456789") != std::string::npos)
      return "--gpus '" + text + "': '" + p + "' is not a device ordinal (ordinals such as 0,1,2,3, or all)";
    const int g = std::stoi(p);
    if (!seen.insert(g).second) return "--gpus '" + text + "': " + p + " is listed twice (one job per entry; --jobs sets how many)";
    if (count >= 0 && g >= count)
      return "--gpus '" + text + "': " + p + " is not a device here (" + std::to_string(count) + " visible: " +
             (count == 0 ? "none" : "0.." + std::to_string(count - 1)) + ")";
    out->push_back(g);
  }
  return "";
}

int gpu_of_job(int job, const std::vector<int>& gpus) { return gpus.at(static_cast<size_t>(job) % gpus.size()); }

std::string visible_value(int ordinal, const char* parent) {
  if (parent == nullptr) return std::to_string(ordinal);
  const auto entries = split(parent, ',');
  return ordinal >= 0 && static_cast<size_t>(ordinal) < entries.size() ? entries[ordinal] : std::to_string(ordinal);
}

int visible_count(int physical, const char* parent) {
  if (parent == nullptr) return physical;
  if (*parent == '\0') return 0;
  return static_cast<int>(split(parent, ',').size());
}

int count_nvidia_smi_lines(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  int n = 0;
  while (std::getline(in, line))
    if (line.rfind("GPU ", 0) == 0) ++n;
  return n;
}

}  // namespace recap::cli
