#include "harness/cli/gpus.h"

#include <algorithm>
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


int auto_jobs(int cores, const std::vector<long long>& free_mib, long long per_job_mib, std::string* why) {
  constexpr int kMaxJobs = 256;
  const int by_cores = std::max(1, cores);
  std::ostringstream os;
  os << by_cores << " CPU core" << (by_cores == 1 ? "" : "s");
  int jobs = by_cores;
  if (!free_mib.empty() && per_job_mib > 0) {
    long long fit = 0;
    os << "; GPU memory free:";
    for (size_t i = 0; i < free_mib.size(); ++i) {
      fit += std::max(1LL, free_mib[i] / per_job_mib);
      os << (i ? "," : "") << " " << free_mib[i] << " MiB";
    }
    os << ", " << per_job_mib << " MiB a job: " << fit;
    jobs = static_cast<int>(std::min<long long>(jobs, fit));
  }
  jobs = std::min(jobs, kMaxJobs);
  if (why) *why = std::to_string(jobs) + " (" + os.str() + ")";
  return jobs;
}

std::vector<long long> parse_free_mib(const std::string& output) {
  std::vector<long long> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    size_t b = line.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    line = line.substr(b);
    if (line.size() > 12 || line.find_first_not_of("0123456789") != std::string::npos) return {};
    out.push_back(std::stoll(line));
  }
  return out;
}

std::string free_mib_of(const std::vector<int>& ordinals, const char* parent, const std::vector<long long>& physical_free,
                        std::vector<long long>* out) {
  out->clear();
  std::vector<std::string> visible;
  if (parent != nullptr) visible = split(parent, ',');
  for (int g : ordinals) {
    long long index = g;
    if (parent != nullptr) {
      if (g < 0 || static_cast<size_t>(g) >= visible.size()) return "GPU " + std::to_string(g) + " is not visible";
      const std::string& e = visible[static_cast<size_t>(g)];
      if (e.empty() || e.size() > 4 || e.find_first_not_of("0123456789") != std::string::npos)
        return "CUDA_VISIBLE_DEVICES entry '" + e + "' is not a device index";
      index = std::stoll(e);
    }
    if (index < 0 || static_cast<size_t>(index) >= physical_free.size())
      return "nvidia-smi lists " + std::to_string(physical_free.size()) + " GPUs, not GPU " + std::to_string(index);
    out->push_back(physical_free[static_cast<size_t>(index)]);
  }
  return "";
}

}  // namespace recap::cli
