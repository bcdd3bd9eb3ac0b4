// steptrace/core/gpu_records.hpp - GPU activity as steptrace's own records. The CUPTI backend fills
// them from CUpti_Activity* structs; everything downstream is tested with hand-made ones.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <vector>

#include "phase.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// A launch seen on the host (a CUDA API call that puts work on the GPU), and where it was made.
struct LaunchRecord {
  uint32_t correlation = 0;
  uint32_t outer_correlation = 0;  // != 0: a driver call made inside a runtime call with this id
  int64_t step = -1;               // global_step open on the launching side; -1 = before the first step
  PhaseId phase = kNoPhase;        // innermost phase open on the launching thread
  bool graph = false;              // a CUDA Graph launch: one id, many kernels
  bool failed = false;             // the API returned an error: no GPU record will come
  bool discard = false;            // launched while records stayed on only to settle a traced step's graphs
  int64_t enter_ns = 0;            // the API call's entry on the CUPTI clock; 0 = not read
  int32_t tid = 0;                 // the launching thread (gettid); 0 = unknown
  // Called while records were being switched on or off (another thread's launch at a trace switch):
  // its record may or may not come. Attributed if it does; its step never waits for it.
  bool window = false;
};

/// Graph launches of a traced step whose records may not have been read out when records were
/// switched off: a later replay with records off can overwrite their end times (see
/// backend/cupti/collector.hpp). Records of these launches delivered after `after_ns` are excluded.
struct UnsettledGraphs {
  std::vector<uint32_t> correlations;
  int64_t after_ns = 0;  // CUPTI clock: when records were switched off
};

/// One kernel execution (CUPTI CONCURRENT_KERNEL).
struct KernelRecord {
  uint32_t correlation = 0;
  uint32_t device = 0;
  uint32_t stream = 0;
  int64_t start_ns = 0, end_ns = 0;  // GPU timestamps (CUPTI clock)
  uint64_t blocks = 0;               // grid x*y*z
  uint32_t threads_per_block = 0;
  double sm_efficiency = 0;          // estimate: min(1, blocks / SMs)
  double occupancy = 0;              // estimate, see backend/cupti/convert.hpp; 0 if unknown
  const char* name = "";             // mangled; owned by CUPTI, stable while it runs
  int64_t delivered_ns = 0;          // CUPTI handed over the buffer holding it (CUPTI clock); 0 = unknown
};

enum class CopyKind : uint8_t { h2d, d2h, d2d, h2h, p2p, other, memset };
inline constexpr int kCopyKindCount = 7;
inline const char* copy_kind_name(CopyKind k) {
  static const char* names[] = {"h2d", "d2h", "d2d", "h2h", "p2p", "other", "memset"};
  return names[static_cast<int>(k)];
}

/// One memcpy or memset.
struct CopyRecord {
  uint32_t correlation = 0;
  uint32_t device = 0;
  uint32_t stream = 0;
  int64_t start_ns = 0, end_ns = 0;
  uint64_t bytes = 0;
  CopyKind kind = CopyKind::other;
  int64_t delivered_ns = 0;  // as KernelRecord::delivered_ns
};

/// Kernel launches by stream over the traced steps since the last look (GpuBackend::take_launch_streams).
struct LaunchStreams {
  std::uintptr_t stream = 0;  // the stream most of them went to (0: none, or the legacy default stream)
  uint32_t on_stream = 0;     // launches to it
  uint32_t launches = 0;      // every launch counted
};

/// What the background thread takes from the GPU backend each time it looks: launches first
/// (records join them by correlation id), then graphs left unsettled and launches made the switch's,
/// then the records.
struct GpuDrain {
  std::vector<LaunchRecord> launches;
  std::vector<KernelRecord> kernels;
  std::vector<CopyRecord> copies;
  uint64_t dropped_records = 0;   // the backend could not store them (no free buffer)
  uint64_t dropped_launches = 0;  // launch-site records over the staging bound
  bool correlations_restarted = false;  // attached again: ids start over before these launches
  std::vector<UnsettledGraphs> unsettled;
  // Launches staged earlier (in this drain or before) whose calls had not returned when records went
  // off: their records may not come. They become the switch's (LaunchRecord::window).
  std::vector<uint32_t> windowed;
  // When CUPTI was detached between traced steps (monotonic_ns(), core/clock.hpp), since the last
  // drain: the step or gap that paid for each detach (core/overhead.hpp measures it).
  std::vector<int64_t> detached_at_ns;
  // When CUPTI was attached between steps, ahead of a traced step (detach mode), since the last drain:
  // the gap before that step paid for it.
  std::vector<int64_t> attached_ahead_at_ns;
  // How long each attach (ahead of a traced step or inside it) and each detach took on the thread that
  // made it, since the last drain (ms): what a trace's CUPTI cycle costs on this machine, measured
  // (core/overhead.hpp charges it in place of its model until traced steps are compared).
  std::vector<double> attach_ms;
  std::vector<double> detach_ms;
};

/// SM efficiency of one kernel, estimated from its grid: a grid smaller than the SM count leaves
/// SMs idle. min(1, blocks / numSMs) — the estimate Kineto reports per kernel ("est. SM efficiency",
/// pytorch/kineto libkineto/src/CuptiActivity.cpp, blocksPerSm clamped to 1).
inline double kernel_sm_efficiency(uint64_t blocks, int num_sms) {
  if (num_sms <= 0) return 0;
  return std::min(1.0, static_cast<double>(blocks) / static_cast<double>(num_sms));
}

STEPTRACE_END_NAMESPACE  // steptrace
