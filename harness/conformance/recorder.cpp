// Recorder, run_scenario, compare_outcomes: the plumbing under the conformance scenarios.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <thread>

#include "harness/conformance/scenario.h"

namespace recap::conformance {

using device::CaptureMode;
using device::CaptureStatus;
using device::CopyKind;
using device::Device;
using device::MemCategory;
using device::Status;
using device::Stream;

std::string words_text(const std::vector<uint32_t>& words) {
  std::string out = "[";
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(words[i]);
  }
  return out + "]";
}

std::string graph_text(int64_t nodes) {
  if (nodes < 0) return "none";
  return "graph with " + std::to_string(nodes) + (nodes == 1 ? " node" : " nodes");
}

std::string update_result_name(device::GraphExecUpdateResult r) {
  using R = device::GraphExecUpdateResult;
  switch (r) {
    case R::Success: return "cudaGraphExecUpdateSuccess";
    case R::Error: return "cudaGraphExecUpdateError";
    case R::ErrorTopologyChanged: return "cudaGraphExecUpdateErrorTopologyChanged";
    case R::ErrorNodeTypeChanged: return "cudaGraphExecUpdateErrorNodeTypeChanged";
    case R::ErrorFunctionChanged: return "cudaGraphExecUpdateErrorFunctionChanged";
    case R::ErrorParametersChanged: return "cudaGraphExecUpdateErrorParametersChanged";
    case R::ErrorNotSupported: return "cudaGraphExecUpdateErrorNotSupported";
    case R::ErrorUnsupportedFunctionChange: return "cudaGraphExecUpdateErrorUnsupportedFunctionChange";
    case R::ErrorAttributesChanged: return "cudaGraphExecUpdateErrorAttributesChanged";
  }
  return "cudaGraphExecUpdateResult" + std::to_string(static_cast<int>(r));
}

// ---- Recorder ---------------------------------------------------------------------------

// One persistent thread that runs posted functions one at a time.
struct Recorder::Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> task;
  bool has_task = false;
  bool done = false;
  bool stop = false;
  std::thread thread;

  Worker() {
    thread = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        cv.wait(lock, [this] { return has_task || stop; });
        if (has_task) {
          auto fn = std::move(task);
          has_task = false;
          lock.unlock();
          fn();
          lock.lock();
          done = true;
          cv.notify_all();
        } else if (stop) {
          return;
        }
      }
    });
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void run(std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu);
    task = std::move(fn);
    has_task = true;
    done = false;
    cv.notify_all();
    cv.wait(lock, [this] { return done; });
  }
};

Recorder::Recorder(Device& dev) : dev_(dev), baseline_(dev.memory_stats()) {}

Recorder::~Recorder() {
  try {
    finish();
  } catch (...) {
  }
}

void Recorder::record(const std::string& label, const std::string& got, const std::string& expected) {
  std::lock_guard<std::mutex> lock(mu_);
  outcome_.observations.push_back(Observation{label, got, expected});
}

Status Recorder::call(const std::string& label, Status got, Status expected) {
  record(label, device::error_name(got), device::error_name(expected));
  return got;
}

void Recorder::must(const std::string& label, Status got) {
  call(label, got, Status::Success);
  if (!device::ok(got)) abort(label + " failed: " + device::error_name(got));
}

CaptureStatus Recorder::capture(const std::string& label, Stream s, CaptureStatus expected) {
  CaptureStatus st = CaptureStatus::None;
  uint64_t id = 0;
  Status code = dev_.stream_get_capture_info(s, &st, &id);
  record(label, device::ok(code) ? device::capture_status_name(st) : device::error_name(code),
         device::capture_status_name(expected));
  return st;
}

void Recorder::buffer(const std::string& label, const void* ptr, size_t n, const std::vector<uint32_t>& expected) {
  require_no_capture("reading a buffer (" + label + ")");
  std::string got;
  Status st = dev_.device_synchronize();
  if (!device::ok(st)) {
    got = "cudaDeviceSynchronize: " + device::error_name(st);
  } else {
    std::vector<uint32_t> words(n, 0xDEADBEEFu);
    st = dev_.memcpy(words.data(), ptr, n * sizeof(uint32_t), CopyKind::DeviceToHost);
    got = device::ok(st) ? words_text(words) : "cudaMemcpy: " + device::error_name(st);
  }
  record(label, got, words_text(expected));
}

void Recorder::value(const std::string& label, int64_t got, int64_t expected) {
  record(label, std::to_string(got), std::to_string(expected));
}

void Recorder::flag(const std::string& label, bool got, bool expected) {
  record(label, got ? "true" : "false", expected ? "true" : "false");
}

void Recorder::text(const std::string& label, const std::string& got, const std::string& expected) {
  record(label, got, expected);
}

Status Recorder::begin(const std::string& label, Stream s, CaptureMode mode, Status expected) {
  Status got = dev_.stream_begin_capture(s, mode);
  call(label, got, expected);
  track_capture(s);
  return got;
}

device::Graph Recorder::end(const std::string& label, Stream s, Status expected, int expected_nodes) {
  device::Graph g{};
  Status got = dev_.stream_end_capture(s, &g);
  call(label, got, expected);
  std::string got_graph = "none";
  if (g.id != 0) {
    adopt(g);
    size_t n = 0;
    Status st = dev_.graph_node_count(g, &n);
    got_graph = device::ok(st) ? graph_text(static_cast<int64_t>(n)) : "cudaGraphGetNodes: " + device::error_name(st);
  }
  record(label + " -> graph", got_graph, expected == Status::Success ? graph_text(expected_nodes) : "none");
  return g;
}

device::GraphExec Recorder::instantiate(const std::string& label, device::Graph g, unsigned flags, Status expected) {
  device::GraphExec e{};
  if (g.id == 0) {
    record(label, "no graph to instantiate", device::error_name(expected));
    return e;
  }
  Status got = dev_.graph_instantiate(&e, g, flags);
  call(label, got, expected);
  if (device::ok(got) && e.id != 0) adopt(e);
  else e = device::GraphExec{};
  return e;
}

Status Recorder::launch(const std::string& label, device::GraphExec e, Stream s, Status expected) {
  if (e.id == 0) {
    record(label, "no executable to launch", device::error_name(expected));
    return Status::InvalidValue;
  }
  return call(label, dev_.graph_launch(e, s), expected);
}

Status Recorder::kernel(const std::string& label, const device::Kernel& k, Stream s, Status expected) {
  return call(label, dev_.launch(k, s), expected);
}

void Recorder::sync(const std::string& label) {
  require_no_capture(label);
  call(label, dev_.device_synchronize(), Status::Success);
}

Stream Recorder::stream(bool non_blocking) {
  Stream s{};
  Status st = dev_.stream_create(&s, non_blocking);
  if (!device::ok(st)) abort("cudaStreamCreateWithFlags failed: " + device::error_name(st));
  adopt(s);
  return s;
}

device::Event Recorder::event() {
  device::Event e{};
  Status st = dev_.event_create(&e);
  if (!device::ok(st)) abort("cudaEventCreate failed: " + device::error_name(st));
  adopt(e);
  return e;
}

uint32_t* Recorder::alloc(size_t n_words, MemCategory cat) {
  require_no_capture("cudaMalloc (setup)");
  void* p = nullptr;
  size_t bytes = n_words * sizeof(uint32_t);
  Status st = dev_.malloc(&p, bytes, cat);
  if (!device::ok(st) || p == nullptr) abort("cudaMalloc(" + std::to_string(bytes) + ") failed: " + device::error_name(st));
  adopt_device(p);
  st = dev_.memset(p, 0, bytes);
  if (!device::ok(st)) abort("cudaMemset (zeroing a new buffer) failed: " + device::error_name(st));
  st = dev_.device_synchronize();
  if (!device::ok(st)) abort("cudaDeviceSynchronize (after zeroing) failed: " + device::error_name(st));
  return static_cast<uint32_t*>(p);
}

void* Recorder::pinned(size_t bytes) {
  require_no_capture("cudaMallocHost (setup)");
  void* p = nullptr;
  Status st = dev_.malloc_host(&p, bytes);
  if (!device::ok(st) || p == nullptr) abort("cudaMallocHost failed: " + device::error_name(st));
  adopt_pinned(p);
  std::memset(p, 0, bytes);
  return p;
}

uint32_t* Recorder::host(size_t n_words) {
  host_buffers_.push_back(std::make_unique<uint32_t[]>(n_words == 0 ? 1 : n_words));
  uint32_t* p = host_buffers_.back().get();
  std::fill(p, p + n_words, 0u);
  return p;
}

std::shared_ptr<std::atomic<int>> Recorder::counter() { return std::make_shared<std::atomic<int>>(0); }

void Recorder::upload(void* dst, const std::vector<uint32_t>& words) {
  require_no_capture("uploading a buffer");
  Status st = dev_.device_synchronize();
  if (!device::ok(st)) abort("cudaDeviceSynchronize (before upload) failed: " + device::error_name(st));
  st = dev_.memcpy(dst, words.data(), words.size() * sizeof(uint32_t), CopyKind::HostToDevice);
  if (!device::ok(st)) abort("cudaMemcpy (upload) failed: " + device::error_name(st));
  st = dev_.device_synchronize();
  if (!device::ok(st)) abort("cudaDeviceSynchronize (after upload) failed: " + device::error_name(st));
}

int64_t Recorder::live_delta(MemCategory cat) const {
  device::MemoryStats now = dev_.memory_stats();
  if (cat == MemCategory::kCount) return now.live_bytes - baseline_.live_bytes;
  return now[cat].live_bytes - baseline_[cat].live_bytes;
}

void Recorder::adopt(Stream s) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(s);
}
void Recorder::adopt(device::Event e) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(e);
}
void Recorder::adopt(device::Graph g) {
  std::lock_guard<std::mutex> lock(mu_);
  graphs_.push_back(g);
}
void Recorder::adopt(device::GraphExec e) {
  std::lock_guard<std::mutex> lock(mu_);
  execs_.push_back(e);
}
void Recorder::adopt_device(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  device_ptrs_.push_back(p);
}
void Recorder::adopt_pinned(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  pinned_ptrs_.push_back(p);
}
void Recorder::adopt_graph_alloc(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(graph_allocs_.begin(), graph_allocs_.end(), p) == graph_allocs_.end()) graph_allocs_.push_back(p);
}
void Recorder::release(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* v : {&device_ptrs_, &pinned_ptrs_, &graph_allocs_}) v->erase(std::remove(v->begin(), v->end(), p), v->end());
}
void Recorder::at_cleanup(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  cleanup_.push_back(std::move(fn));
}
void Recorder::track_capture(Stream s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(capture_streams_.begin(), capture_streams_.end(), s) == capture_streams_.end())
    capture_streams_.push_back(s);
}

void Recorder::set_thread_mode(CaptureMode mode) {
  CaptureMode m = mode;
  Status st = dev_.thread_exchange_capture_mode(&m);
  if (!device::ok(st)) abort("cudaThreadExchangeStreamCaptureMode failed: " + device::error_name(st));
}

void Recorder::on_other_thread(const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

void Recorder::on_worker(const std::function<void()>& fn) {
  if (!worker_) worker_ = std::make_unique<Worker>();
  std::exception_ptr error;
  worker_->run([&] {
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
}

void Recorder::abort(const std::string& why) { throw ScenarioAbort(why); }

bool Recorder::any_capture_active() {
  std::vector<Stream> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    candidates = capture_streams_;
    candidates.insert(candidates.end(), streams_.begin(), streams_.end());
  }
  for (Stream s : candidates) {
    if (s.id == Stream::kLegacy) continue;  // the legacy stream never captures (begin there is refused)
    CaptureStatus st = CaptureStatus::None;
    uint64_t id = 0;
    if (device::ok(dev_.stream_get_capture_info(s, &st, &id)) && st != CaptureStatus::None) return true;
  }
  return false;
}

void Recorder::require_no_capture(const std::string& what) {
  if (any_capture_active()) abort("scenario bug: " + what + " while a capture is active");
}

void Recorder::finish() {
  if (finished_) return;
  finished_ = true;

  // The owner thread back to the CUDA default, so that cleanup calls are judged as usual.
  CaptureMode m = CaptureMode::Global;
  dev_.thread_exchange_capture_mode(&m);

  // The worker's mode back to global too; a capture it owns is then ended here (from the main
  // thread, which terminates it whatever its mode).
  if (worker_) {
    worker_->run([this] {
      CaptureMode wm = CaptureMode::Global;
      dev_.thread_exchange_capture_mode(&wm);
    });
  }

  // End every capture still running: origins first, then any stream still a member.
  std::vector<Stream> candidates = capture_streams_;
  candidates.insert(candidates.end(), streams_.begin(), streams_.end());
  for (int pass = 0; pass < 4; ++pass) {
    bool any = false;
    for (Stream s : candidates) {
      if (s.id == Stream::kLegacy) continue;
      CaptureStatus st = CaptureStatus::None;
      uint64_t id = 0;
      if (!device::ok(dev_.stream_get_capture_info(s, &st, &id)) || st == CaptureStatus::None) continue;
      any = true;
      device::Graph g{};
      dev_.stream_end_capture(s, &g);
      if (g.id != 0) dev_.graph_destroy(g);
    }
    if (!any) break;
  }

  for (auto it = cleanup_.rbegin(); it != cleanup_.rend(); ++it) {
    try {
      (*it)();
    } catch (...) {
    }
  }
  cleanup_.clear();

  dev_.device_synchronize();
  for (void* p : graph_allocs_) dev_.free(p);
  for (auto e : execs_) dev_.graph_exec_destroy(e);
  for (auto g : graphs_) dev_.graph_destroy(g);
  dev_.device_synchronize();
  for (void* p : device_ptrs_) dev_.free(p);
  for (void* p : pinned_ptrs_) dev_.free_host(p);
  for (auto e : events_) dev_.event_destroy(e);
  for (auto s : streams_) dev_.stream_destroy(s);
  graph_allocs_.clear();
  execs_.clear();
  graphs_.clear();
  device_ptrs_.clear();
  pinned_ptrs_.clear();
  events_.clear();
  streams_.clear();
  capture_streams_.clear();
  dev_.device_synchronize();
  dev_.get_last_error();
  if (worker_) {
    worker_->run([this] { dev_.get_last_error(); });
    worker_.reset();
  }
}

// ---- results ----------------------------------------------------------------------------

std::vector<Observation> ScenarioResult::mismatches() const {
  std::vector<Observation> out;
  for (const auto& o : outcome.observations)
    if (!o.matches()) out.push_back(o);
  return out;
}

ScenarioResult run_scenario(const Scenario& s, Device& dev) {
  ScenarioResult res;
  res.name = s.name;
  res.backend = device::backend_name(dev.backend());
  dev.get_last_error();
  Recorder r(dev);
  try {
    s.run(r);
  } catch (const ScenarioAbort& e) {
    res.error = e.what();
  } catch (const std::exception& e) {
    res.error = std::string("exception: ") + e.what();
  } catch (...) {
    res.error = "unknown exception";
  }
  try {
    r.finish();
  } catch (...) {
  }
  res.outcome = r.outcome();
  return res;
}

std::vector<std::string> compare_outcomes(const ScenarioResult& a, const ScenarioResult& b) {
  std::vector<std::string> out;
  const auto& oa = a.outcome.observations;
  const auto& ob = b.outcome.observations;
  size_t n = std::min(oa.size(), ob.size());
  for (size_t i = 0; i < n; ++i) {
    if (oa[i].got == ob[i].got && oa[i].label == ob[i].label) continue;
    std::string label = oa[i].label == ob[i].label ? oa[i].label : oa[i].label + " | " + ob[i].label;
    out.push_back("#" + std::to_string(i) + " " + label + ": " + a.backend + " got " + oa[i].got + ", " +
                  b.backend + " got " + ob[i].got);
  }
  if (oa.size() != ob.size())
    out.push_back("observation count: " + a.backend + " has " + std::to_string(oa.size()) + ", " + b.backend +
                  " has " + std::to_string(ob.size()));
  if (a.error != b.error)
    out.push_back("scenario error: " + a.backend + " '" + a.error + "', " + b.backend + " '" + b.error + "'");
  return out;
}

}  // namespace recap::conformance
