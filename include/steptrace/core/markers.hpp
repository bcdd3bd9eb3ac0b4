// steptrace/core/markers.hpp - a step's stream markers (CUDA events recorded on the program's stream at
// the step's and its top-level phases' boundaries, backend/cuda_markers.hpp) turned into GPU evidence
// of the step's own, without CUPTI. Pure: tested on the CPU (tests/test_diagnosis.cpp, "[markers]").
//
// A marker recorded at host time h completes on the GPU at g >= h, once the stream has run everything
// launched on it before. If g > h, the stream had work pending (running, or waiting on another stream
// it depends on) throughout [h, g]: the union of these intervals over the step is a lower bound on the
// time the stream was busy or held, and it needs no trace. An upper bound cannot be had this way (a
// marker on an idle stream completes at once, whatever ran before it), so markers can show that the
// GPU held a step back, never that it did not.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "intervals.hpp"
#include "phase.hpp"
#include "reasons.hpp"

STEPTRACE_BEGIN_NAMESPACE

enum class MarkerKind : uint8_t { step_begin, step_end, phase_begin, phase_end };

/// One marker as read back: where it was recorded, when (host clock), and when the GPU reached it
/// (GPU timestamp moved to the host clock by a calibration event, backend/cuda_markers.hpp).
struct MarkerPoint {
  MarkerKind kind = MarkerKind::step_begin;
  PhaseId phase = kNoPhase;
  int64_t host_ns = 0;
  int64_t gpu_ns = 0;
};

struct PhaseMarkers {
  int64_t span_ns = 0;     // GPU time from the phase's begin marker to its end marker (idle gaps included)
  int64_t end_lag_ns = 0;  // how far the GPU was behind the host when the phase's scope ended
  uint32_t count = 0;      // scopes of the phase in the step
};

/// What a step's markers show (docs/schema.md, `gpu_markers`).
struct StepMarkers {
  uint32_t points = 0;
  int64_t pending_ns = 0;              // union of [host_ns, gpu_ns] over the markers, within the step
  int64_t pending_own_ns = 0;          // the same from the GPU's reaching the step's begin marker on: the step's own work
  std::optional<int64_t> span_ns;      // step_begin's GPU time to step_end's (both present)
  std::optional<int64_t> end_lag_ns;   // at the step's end marker
  int64_t max_lag_ns = 0;
  std::map<PhaseId, PhaseMarkers> phases;
};

/// A marker's GPU time may read a little before its host time: the calibration event's own latency
/// (a few microseconds). Beyond this the calibration is wrong and the step's markers are left out.
inline constexpr int64_t kMarkerClockSlackNs = 100'000;

/// The step's markers summarized over its window [begin_ns, end_ns] (host clock). nullopt with `why`
/// when a marker's GPU time precedes its host time by more than the slack (a wrong calibration) or
/// breaks the stream's order.
inline std::optional<StepMarkers> summarize_markers(const std::vector<MarkerPoint>& points, int64_t begin_ns,
                                                    int64_t end_ns, std::string* why) {
  StepMarkers s;
  std::vector<Interval> pending;
  std::map<PhaseId, int64_t> open_phase_gpu;  // phase -> its begin marker's GPU time
  int64_t previous_gpu = INT64_MIN;
  std::optional<int64_t> step_begin_gpu;
  for (const MarkerPoint& p : points) {
    if (p.gpu_ns < p.host_ns - kMarkerClockSlackNs) {
      if (why) *why = reason_text(Reason::markers_before_host);
      return std::nullopt;
    }
    // One stream runs its events in the order they were recorded.
    if (p.gpu_ns + kMarkerClockSlackNs < previous_gpu) {
      if (why) *why = reason_text(Reason::markers_out_of_order);
      return std::nullopt;
    }
    previous_gpu = std::max(previous_gpu, p.gpu_ns);
    ++s.points;
    const int64_t lag = std::max<int64_t>(0, p.gpu_ns - p.host_ns);
    s.max_lag_ns = std::max(s.max_lag_ns, lag);
    const int64_t from = std::max(p.host_ns, begin_ns), to = std::min(p.gpu_ns, end_ns);
    if (to > from) pending.emplace_back(from, to);
    switch (p.kind) {
      case MarkerKind::step_begin: step_begin_gpu = p.gpu_ns; break;
      case MarkerKind::step_end:
        s.end_lag_ns = lag;
        if (step_begin_gpu) s.span_ns = std::max<int64_t>(0, p.gpu_ns - *step_begin_gpu);
        break;
      case MarkerKind::phase_begin: open_phase_gpu[p.phase] = p.gpu_ns; break;
      case MarkerKind::phase_end: {
        auto it = open_phase_gpu.find(p.phase);
        PhaseMarkers& m = s.phases[p.phase];
        ++m.count;
        m.end_lag_ns = lag;
        if (it != open_phase_gpu.end()) {
          m.span_ns += std::max<int64_t>(0, p.gpu_ns - it->second);
          open_phase_gpu.erase(it);
        }
        break;
      }
    }
  }
  if (step_begin_gpu) {
    std::vector<Interval> own;
    for (const auto& [from, to] : pending)
      if (to > std::max(from, *step_begin_gpu)) own.emplace_back(std::max(from, *step_begin_gpu), to);
    s.pending_own_ns = union_length(std::move(own));
  }
  s.pending_ns = union_length(std::move(pending));
  return s;
}

/// Whether a traced step's markers agree with its CUPTI records: the time the marker stream had work
/// pending cannot exceed the time the GPU was busy with the step's work (any stream: the marker stream
/// may wait on another's) by more than a small tolerance (0.5 ms or 3 % of the step).
inline bool markers_agree(int64_t pending_ns, int64_t gpu_busy_ns, int64_t step_ns) {
  const int64_t tolerance = std::max<int64_t>(500'000, step_ns * 3 / 100);
  return pending_ns <= gpu_busy_ns + tolerance;
}

STEPTRACE_END_NAMESPACE  // steptrace
