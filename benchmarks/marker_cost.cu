// marker_cost - what one stream marker costs the thread that records it, and its parts, in one binary.
//
//   marker_cost [records] [queued]
//
// A stream marker (backend/cuda_markers.hpp) is three driver calls on the training thread: the context
// check (cuCtxGetCurrent), the capture check (cuStreamIsCapturing) and the event record (cuEventRecord),
// plus two clock reads. Each is timed here on its own and as steptrace records a marker
// (CudaMarkers::record), `records` times each (default 20 000), on a non-blocking stream in two states:
//   idle   nothing queued: the GPU reaches each event at once
//   busy   in batches of 200 calls: a 5 ms spin kernel holds the stream and `queued` small kernels
//          (default 500) wait behind it, as on a GPU-bound training loop whose host runs ahead; a small
//          kernel is launched before each call, so that the records sit among launches as phase
//          boundaries do (busy's loop_mean is its mean: its calls are timed one by one only)
// and, for comparison, one empty kernel launch. Host ns per call: the median and mean over calls timed one
// by one (steady_clock around each), and the mean from one clock pair around the whole loop.
// Prints one JSON object.
#include <steptrace/backend/cuda_markers.hpp>

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

namespace {

__global__ void empty_kernel() {}
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Stat {
  double median = 0, mean = 0, loop_mean = 0;
};

/// Times `fn` `n` times one by one, then `n` times in one loop; `between` runs untimed before each call.
template <class Fn, class Between>
Stat time_calls(int n, Fn fn, Between between) {
  std::vector<double> each;
  each.reserve(n);
  for (int i = 0; i < n; ++i) {
    between(i);
    const double t0 = now_ns();
    fn(i);
    each.push_back(now_ns() - t0);
  }
  Stat s;
  s.mean = std::accumulate(each.begin(), each.end(), 0.0) / n;
  std::nth_element(each.begin(), each.begin() + n / 2, each.end());
  s.median = each[n / 2];
  // One clock pair around the loop: `between` runs in it too, so it is timed alone and taken out.
  double t0 = now_ns();
  for (int i = 0; i < n; ++i) between(i);
  const double between_ns = now_ns() - t0;
  t0 = now_ns();
  for (int i = 0; i < n; ++i) {
    between(i);
    fn(i);
  }
  s.loop_mean = (now_ns() - t0 - between_ns) / n;
  return s;
}

std::string json(const char* name, const Stat& s) {
  char b[256];
  std::snprintf(b, sizeof b, "\"%s\": {\"median_ns\": %.1f, \"mean_ns\": %.1f, \"loop_mean_ns\": %.1f}", name, s.median,
                s.mean, s.loop_mean);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const int records = argc > 1 ? std::max(100, std::atoi(argv[1])) : 20000;
  const int queued = argc > 2 ? std::min(600, std::max(0, std::atoi(argv[2]))) : 500;
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "marker_cost: needs a CUDA GPU\n");
    return 1;
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  empty_kernel<<<1, 32, 0, stream>>>();
  cudaStreamSynchronize(stream);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);

  steptrace::backend::CudaMarkers markers;
  constexpr uint32_t kSlots = 256;
  bool transient = false;
  const std::string why = markers.open(kSlots, reinterpret_cast<std::uintptr_t>(stream), &transient);
  if (!why.empty()) {
    std::fprintf(stderr, "marker_cost: markers not opened: %s\n", why.c_str());
    return 2;
  }
  CUevent event = nullptr;
  cuEventCreate(&event, CU_EVENT_DEFAULT);
  const CUstream cu_stream = reinterpret_cast<CUstream>(stream);

  const auto record = [&](int i) {
    int64_t host_ns = 0;
    std::string w;
    markers.record(static_cast<uint32_t>(i) % kSlots, false, &host_ns, &w);
  };
  const auto ctx = [&](int) {
    CUcontext c = nullptr;
    cuCtxGetCurrent(&c);
  };
  const auto capturing = [&](int) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuStreamIsCapturing(cu_stream, &st);
  };
  const auto event_record = [&](int) { cuEventRecord(event, cu_stream); };
  const auto launch = [&](int) { empty_kernel<<<1, 32, 0, stream>>>(); };
  const auto nothing = [](int) {};

  std::string out = "{\"records\": " + std::to_string(records) + ", \"queued\": " + std::to_string(queued);
  // Idle: the stream drained before each kind of call.
  cudaStreamSynchronize(stream);
  out += ", \"idle\": {" + json("marker_record", time_calls(records, record, nothing));
  cudaStreamSynchronize(stream);
  out += ", " + json("cuCtxGetCurrent", time_calls(records, ctx, nothing));
  out += ", " + json("cuStreamIsCapturing", time_calls(records, capturing, nothing));
  cudaStreamSynchronize(stream);
  out += ", " + json("cuEventRecord", time_calls(records, event_record, nothing));
  cudaStreamSynchronize(stream);
  out += ", " + json("kernel_launch", time_calls(records, launch, nothing)) + "}";
  cudaStreamSynchronize(stream);

  // Busy: in batches of kBatch calls, a spin kernel holds the stream and `queued` small kernels wait
  // behind it; each call follows a small kernel's launch (untimed). Pending work stays under ~1 000
  // launches a batch, short of the depth where a launch waits for the GPU to drain the queue.
  const auto busy = [&](const char* name, auto fn) {
    constexpr int kBatch = 200;
    std::vector<double> each;
    each.reserve(records);
    int drained_early = 0;
    while (static_cast<int>(each.size()) < records) {
      cudaStreamSynchronize(stream);
      spin_kernel<<<1, 1, 0, stream>>>(static_cast<long long>(5.0 * clock_khz));  // 5 ms
      for (int i = 0; i < queued; ++i) empty_kernel<<<1, 32, 0, stream>>>();
      for (int i = 0; i < kBatch; ++i) {
        launch(i);
        const double t0 = now_ns();
        fn(static_cast<int>(each.size()));
        each.push_back(now_ns() - t0);
      }
      drained_early += cudaStreamQuery(stream) != cudaErrorNotReady;
    }
    cudaStreamSynchronize(stream);
    Stat st;
    st.loop_mean = st.mean = std::accumulate(each.begin(), each.end(), 0.0) / each.size();
    std::nth_element(each.begin(), each.begin() + each.size() / 2, each.end());
    st.median = each[each.size() / 2];
    return json(name, st) + ", \"" + std::string(name) + "_batches_drained_early\": " + std::to_string(drained_early);
  };
  out += ", \"busy\": {" + busy("marker_record", record);
  out += ", " + busy("cuCtxGetCurrent", ctx);
  out += ", " + busy("cuStreamIsCapturing", capturing);
  out += ", " + busy("cuEventRecord", event_record);
  out += ", " + busy("kernel_launch", launch) + "}}";
  std::printf("%s\n", out.c_str());
  cuEventDestroy(event);
  markers.close();
  cudaStreamDestroy(stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
