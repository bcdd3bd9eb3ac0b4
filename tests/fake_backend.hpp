// A GpuBackend for CPU tests: no CUDA, no CUPTI. The test's "program" calls launch() where a real
// one would launch a kernel; the fake files the launch under the step and phase open on the calling
// thread (as the CUPTI callback does) and hands over a kernel record when the test's delivery rule
// says so. Every call the runtime makes is recorded, so a test can check the runtime's rules.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <steptrace/backend/gpu_backend.hpp>
#include <steptrace/core/clock.hpp>
#include <steptrace/core/clock.hpp>
#include <steptrace/details/launch_context.hpp>

namespace steptrace_test {

class FakeBackend final : public steptrace::backend::GpuBackend {
 public:
  enum class Delivery { at_once, at_flush, never };

  // ---- what the test sets (before start()) ----
  std::string probe_error;      // "" = a device is found
  std::string attribution_error, counters_error, device_state_error;
  std::string resume_counters_error;  // returned by resume_counters()
  std::string tracing_error;    // returned by set_tracing(true)
  Delivery delivery = Delivery::at_once;
  int sm_count = 100;
  int64_t start_delay_ns = 1000;  // from a launch call to its kernel's start (a deep queue: milliseconds)
  bool with_markers = false;       // stream markers (markers()) on the stream of id marker_stream
  uint32_t marker_stream = 7;
  bool untraced_work_runs = false;  // launches on untraced steps still occupy their stream (no records)
  steptrace::LaunchStreams launch_streams;  // what take_launch_streams() answers (the launches' stream)

  // ---- what the runtime did ----
  struct Calls {
    std::vector<bool> set_tracing;
    std::string switches;  // in order: '+' set_tracing(true), '-' set_tracing(false), 'a' attach_ahead()
    std::vector<uint64_t> detach_requests;
    int detaches = 0;              // requests the collector would act on: records off, every traced step begun has its line
    int switches_to_detach = 0;    // switch_to_detach() calls
    int64_t detach_in_force_at = -1;  // the step whose begin put detach mode in force
    int flushes = 0, forced_flushes = 0, synchronizes = 0;
    int attribution_starts = 0, attribution_stops = 0, counters_starts = 0, counters_stops = 0;
    int counters_pauses = 0, counters_resumes = 0;
    bool counters_paused = false;
    bool detach_mode = false;
    bool device_state_open = false, device_state_closed = false;
  };
  Calls calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  /// A kernel of `duration_ns` launched now by the calling thread on `stream`; its record starts
  /// start_delay_ns after the launch, or when the stream's previous record ends.
  void launch(int64_t duration_ns, uint64_t blocks = 100, const char* name = "fake_kernel", uint32_t stream = 7) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tracing_) {  // callbacks and records off (sampled attribution, untraced step)
      if (untraced_work_runs)
        stream_end_[stream] = std::max(steptrace::monotonic_ns() + start_delay_ns, stream_end_[stream]) + duration_ns;
      return;
    }
    const steptrace::LaunchRecord l = launch_record();
    steptrace::KernelRecord k;
    k.correlation = l.correlation;
    k.stream = stream;
    k.start_ns = std::max(l.enter_ns + start_delay_ns, stream_end_[stream]);
    k.end_ns = stream_end_[stream] = k.start_ns + duration_ns;
    k.blocks = blocks;
    k.threads_per_block = 128;
    k.sm_efficiency = steptrace::kernel_sm_efficiency(blocks, sm_count);
    k.name = name;
    if (delivery == Delivery::at_once) kernels_.push_back(k);
    else if (delivery == Delivery::at_flush) held_.push_back(k);
  }
  /// A kernel whose launch call entered while records were off (another thread, at the switch into
  /// tracing): its record comes, its launch site never does. Numbered before the launches after it.
  void launch_entered_before_switch(int64_t duration_ns, uint32_t stream = 9) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tracing_) return;
    steptrace::KernelRecord k;
    k.correlation = ++next_correlation_;
    k.stream = stream;
    k.start_ns = std::max(steptrace::monotonic_ns(), stream_end_[stream]);
    k.end_ns = stream_end_[stream] = k.start_ns + duration_ns;
    k.blocks = 1;
    k.threads_per_block = 128;
    k.sm_efficiency = steptrace::kernel_sm_efficiency(1, sm_count);
    k.name = "straddling_kernel";
    kernels_.push_back(k);
  }
  /// A copy (or memset) of `bytes` taking `duration_ns`, as launch() does kernels.
  void copy(uint64_t bytes, steptrace::CopyKind kind, int64_t duration_ns, uint32_t stream = 7) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tracing_) return;
    const steptrace::LaunchRecord l = launch_record();
    steptrace::CopyRecord c;
    c.correlation = l.correlation;
    c.stream = stream;
    c.start_ns = std::max(l.enter_ns + start_delay_ns, stream_end_[stream]);
    c.end_ns = stream_end_[stream] = c.start_ns + duration_ns;
    c.bytes = bytes;
    c.kind = kind;
    copies_.push_back(c);
  }

  /// Waits until the GPU has run what `stream` was given (a synchronizing call of the program).
  void wait_stream(uint32_t stream = 7) {
    int64_t end = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      end = stream_end_[stream];
    }
    while (steptrace::monotonic_ns() < end) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  /// Markers on the fake stream: reached when the stream's work launched before them has run.
  class Markers final : public steptrace::backend::MarkerEvents {
   public:
    explicit Markers(FakeBackend& b) : b_(b) {}
    std::string open(uint32_t slots, std::uintptr_t stream, bool*) override {
      opened_on = stream;
      gpu_.assign(slots, 0);
      ++opens;
      return {};
    }
    bool record(uint32_t slot, bool, int64_t* host_ns, std::string* why) override {
      if (record_cost_ns > 0) {  // what an event record costs the training thread, if a test says
        const int64_t until = steptrace::monotonic_ns() + record_cost_ns;
        while (steptrace::monotonic_ns() < until) {
        }
      }
      std::lock_guard<std::mutex> lock(b_.mutex_);
      const int n = calls_++;
      if (n >= refuse_from_record && n < refuse_from_record + refuse_count) {
        *why = "a CUDA graph capture was in progress";  // as the real one says
        return false;
      }
      *host_ns = steptrace::monotonic_ns();
      gpu_[slot] = lag_ns ? *host_ns + *lag_ns : std::max(*host_ns, b_.stream_end_[b_.marker_stream]);
      if (gpu_cost_ns > 0) {  // the record holds the stream: the work after it starts that much later
        int64_t& end = b_.stream_end_[b_.marker_stream];
        end = std::max(end, *host_ns) + gpu_cost_ns;
      }
      ++records;
      return true;
    }
    // The host clock of `record`, pushed far ahead unless a test asks for boundaries to share markers
    // (MarkerRing::kShareWithinNs: whether two boundaries share depends on the host's timing).
    int64_t now_ns() const override { return steptrace::monotonic_ns() + (share_boundaries ? 0 : int64_t{1} << 50); }
    Read read(uint32_t slot, int64_t* gpu_ns) override {
      std::lock_guard<std::mutex> lock(b_.mutex_);
      if (!lag_ns && steptrace::monotonic_ns() < gpu_[slot]) return Read::pending;
      *gpu_ns = gpu_[slot];
      return Read::done;
    }
    std::optional<uint32_t> stream_record_id(std::uintptr_t) override { return b_.marker_stream; }
    void set_stream(std::uintptr_t stream) override { stream_set = stream; }
    void close() override { ++closes; }
    std::uintptr_t stream_set = 0;  // the last set_stream()
    bool share_boundaries = false;
    int64_t record_cost_ns = 0;
    int64_t gpu_cost_ns = 0;  // what each record holds the marker stream for, a cost its call does not pay
    std::uintptr_t opened_on = 0;   // the stream open() was given
    std::atomic<int> opens{0}, closes{0}, records{0};
    int refuse_from_record = -1, refuse_count = 0;  // record() calls (from 0) that fail
    // Set: a synthetic GPU, every marker reached `lag_ns` after it was recorded and read back at once
    // (no real time in the answer); unset: the fake stream's own end.
    std::optional<int64_t> lag_ns;

   private:
    FakeBackend& b_;
    std::vector<int64_t> gpu_;
    int calls_ = 0;
  };
  Markers fake_markers{*this};

  // ---- GpuBackend ----
  steptrace::backend::MarkerEvents* markers() override { return with_markers ? &fake_markers : nullptr; }
  steptrace::backend::DeviceProbe probe(int requested) override {
    steptrace::backend::DeviceProbe p;
    if (!probe_error.empty()) {
      p.null_reason = probe_error;
      return p;
    }
    steptrace::DeviceInfo d;
    d.index = requested < 0 ? 0 : requested;
    d.name = "Fake GPU";
    d.sm_count = sm_count;
    d.total_memory_bytes = int64_t{80} << 30;
    d.uuid = "GPU-00000000-1111-2222-3333-444444444444";
    d.pci_bus_id = "00000000:3B:00.0";
    p.device = d;
    return p;
  }
  /// As cudaDeviceSynchronize: returns once every stream has run what it was given (stop() relies on
  /// it: the last step's markers and records are in when its line is written).
  void synchronize(int) override {
    int64_t end = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++calls_.synchronizes;
      for (const auto& s : stream_end_) end = std::max(end, s.second);
    }
    while (steptrace::monotonic_ns() < end) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::string start_attribution(bool detach, const steptrace::backend::LaunchContextSource& launches) override {
    std::lock_guard<std::mutex> lock(mutex_);
    launch_context_ = launches;  // as the CUDA backend: launches are placed only through what the session hands over
    ++calls_.attribution_starts;
    calls_.detach_mode = detach;
    traced_begun_ = 0;
    pending_detach_ = false;
    if (!attribution_error.empty()) return attribution_error;
    tracing_ = true;
    return {};
  }
  /// Whether records are on now (what a traced step pays for).
  bool tracing() {
    std::lock_guard<std::mutex> lock(mutex_);
    return tracing_;
  }
  /// What the fake's CUPTI attach (ahead of a traced step, detached) and detach take, as the collector
  /// times them and hands them on (GpuDrain::attach_ms, detach_ms); negative: not timed (the default).
  double attach_ms_each = -1, detach_ms_each = -1;
  std::string attach_ahead() override {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.switches += 'a';
    if (calls_.detach_mode && attach_ms_each >= 0) attach_ms_.push_back(attach_ms_each);
    return {};
  }
  steptrace::LaunchStreams take_launch_streams() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return launch_streams;
  }
  std::string set_tracing(bool on) override {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.set_tracing.push_back(on);
    calls_.switches += on ? '+' : '-';
    if (on) ++traced_begun_;
    if (on && !tracing_error.empty()) return tracing_error;
    if (!on && tracing_ && pending_detach_) {  // as the collector: in force when records go off
      pending_detach_ = false;
      calls_.detach_mode = true;
      calls_.detach_in_force_at = steptrace::last_step_of_key(launch_context_.step_key());
    }
    tracing_ = on;
    return {};
  }
  bool request_detach(uint64_t traced) override {  // as the collector: refused only while records are on
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.detach_requests.push_back(traced);
    if (!calls_.detach_mode || traced != traced_begun_) return true;
    if (tracing_) return false;
    ++calls_.detaches;
    detached_at_.push_back(steptrace::monotonic_ns());  // the fake detaches at once (the collector: at the next API exit)
    if (detach_ms_each >= 0) detach_ms_.push_back(detach_ms_each);
    return true;
  }
  void switch_to_detach() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_.switches_to_detach;
    if (!calls_.detach_mode) pending_detach_ = true;
  }
  std::optional<uint64_t> detach_since() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!calls_.detach_mode) return std::nullopt;
    return static_cast<uint64_t>(std::max<int64_t>(0, calls_.detach_in_force_at));
  }
  std::string kernel_timestamps() override { return "instrumented (fake backend)"; }
  void flush_records(bool forced) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++(forced ? calls_.forced_flushes : calls_.flushes);
    kernels_.insert(kernels_.end(), held_.begin(), held_.end());
    held_.clear();
  }
  steptrace::GpuDrain drain_records() override {
    std::lock_guard<std::mutex> lock(mutex_);
    steptrace::GpuDrain d;
    d.launches.swap(launches_);
    d.kernels.swap(kernels_);
    d.copies.swap(copies_);
    d.detached_at_ns.swap(detached_at_);
    d.attach_ms.swap(attach_ms_);
    d.detach_ms.swap(detach_ms_);
    return d;
  }
  void stop_attribution() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_.attribution_stops;
    tracing_ = false;
  }
  std::string start_counters(int, uint64_t, std::size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_.counters_starts;
    return counters_error;
  }
  std::string counters_description() override { return "fake PM sampler"; }
  /// From now on the GPU reads `v` in every counter: a sample ending after this call has that value, whenever
  /// the collector polls it (a value read at poll time would let a late poll give a step the next one's values).
  void set_sample_value(double v) {
    std::lock_guard<std::mutex> lock(mutex_);
    sample_values_.emplace_back(steptrace::monotonic_ns(), v);
  }
  /// Samples from the previous poll to now, 1 ms each at most (GPU clock = host clock here), each with the
  /// value in effect when it ended.
  std::string poll_counters(std::vector<steptrace::CounterSample>& out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t now = calls_.counters_paused ? paused_at_ : steptrace::monotonic_ns();
    if (last_sample_end_ == 0) last_sample_end_ = now - 1000;
    // Samples of at most the 1 ms default interval, as the hardware takes them, up to now.
    while (now > last_sample_end_) {
      steptrace::CounterSample c;
      c.start_ns = last_sample_end_;
      c.end_ns = last_sample_end_ = std::min(now, last_sample_end_ + 1'000'000);
      double v = 0.5;
      for (const auto& [since, value] : sample_values_)
        if (since <= c.end_ns) v = value;
      c.sm_active = c.tensor_active = c.dram = c.occupancy = v;
      out.push_back(c);
    }
    return {};
  }
  std::string pause_counters() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_.counters_pauses;
    calls_.counters_paused = true;
    paused_at_ = steptrace::monotonic_ns();
    return {};
  }
  std::string resume_counters() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_.counters_resumes;
    if (!resume_counters_error.empty()) return resume_counters_error;
    calls_.counters_paused = false;
    last_sample_end_ = steptrace::monotonic_ns();  // nothing was sampled while paused
    return {};
  }
  void stop_counters() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_.counters_stops;
  }
  int64_t gpu_clock_offset_ns() override { return 0; }
  std::string bind_thread(int) override { return {}; }
  std::atomic<int> memory_samples{0};  // device-memory readings taken so far
  std::optional<steptrace::MemorySample> sample_memory(int64_t now_ns, std::string*) override {
    ++memory_samples;
    return steptrace::MemorySample{now_ns, int64_t{1} << 30, int64_t{80} << 30};
  }
  std::string open_device_state(int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.device_state_open = device_state_error.empty();
    return device_state_error;
  }
  steptrace::DeviceStateSample read_device_state(int64_t now_ns) override {
    steptrace::DeviceStateSample s;
    s.time_ns = now_ns;
    s.power_w = 300;
    return s;
  }
  void close_device_state() override {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.device_state_closed = true;
  }

 private:
  std::mutex mutex_;
  Calls calls_;
  bool tracing_ = false;
  uint64_t traced_begun_ = 0;
  bool pending_detach_ = false;
  uint32_t next_correlation_ = 0;
  int64_t last_sample_end_ = 0;
  int64_t paused_at_ = 0;
  std::vector<std::pair<int64_t, double>> sample_values_;  // (since, value), in time order
  std::vector<steptrace::LaunchRecord> launches_;
  std::vector<int64_t> detached_at_;
  std::vector<double> attach_ms_, detach_ms_;  // timed attaches / detaches not yet drained
  std::vector<steptrace::KernelRecord> kernels_, held_;
  std::vector<steptrace::CopyRecord> copies_;
  std::map<uint32_t, int64_t> stream_end_;  // when each stream's last record ends
  steptrace::backend::LaunchContextSource launch_context_;  // start_attribution's

  steptrace::LaunchRecord launch_record() {  // under mutex_
    steptrace::LaunchRecord l;
    l.correlation = ++next_correlation_;
    l.step = launch_context_.step_key();
    l.phase = launch_context_.phase();
    l.enter_ns = steptrace::monotonic_ns();
    l.tid = launch_context_.thread_id();
    launches_.push_back(l);
    return l;
  }
};

}  // namespace steptrace_test
