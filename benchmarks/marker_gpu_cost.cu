// marker_gpu_cost - what stream markers cost a GPU-bound step, not only the thread that records them.
//
//   marker_gpu_cost [steps] [kernels] [kernel_us] [marks]
//
// A step here is `kernels` (default 200) kernels that fill the GPU (one block per SM x 4, each spinning
// `kernel_us`, default 100 µs), launched from the host far ahead of the GPU, then a wait for the stream
// (the step's synchronisation, as a loss read is). Steps alternate in groups of 5 between unmarked and
// marked (each pair of groups starting with the other side than the pair before): `marks` (default 5) stream markers recorded as steptrace records them
// (backend/cuda_markers.hpp: CudaMarkers::record), one before the first kernel and the others spread
// evenly among the launches, as a step's and its phases' boundaries are. Four ways, each its own
// interleaved run of `steps` steps (default 200) per stream:
//   record        markers recorded, never read
//   record_read   recorded and read back by a second thread (CudaMarkers::read, cuEventQuery and
//                 cuEventElapsedTime) from the moment the step's wait returns, while the next step
//                 launches: what steptrace's background thread does with a step's markers
//   read_only     no marker in the step; the second thread reads the last marked step's markers again
//                 at each step's end (the reads' cost on the launches alone)
//   none          no marker, no read (both sides alike: what the comparison's noise is)
// on the legacy default stream (as a program that names no stream) and on a non-blocking stream.
// Prints per way and stream the mean step time of each side and the difference per marker
// (mean over steps; the first group of each run left out), one line each:
//   marker_gpu way=W stream=S marked_ms=.. unmarked_ms=.. diff_us_per_step=.. diff_us_per_marker=.. groups=..
// The marked steps' time over the unmarked ones' is what the markers cost the step: GPU time (an event
// between two kernels holds the next until the one before has finished, a gap the launch queue would
// otherwise hide) and the host's (the record calls, and the reads' driver calls beside the launches).
#include <steptrace/backend/cuda_markers.hpp>

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The second thread: reads the given slots (until each is done or failed) each time it is asked.
class Reader {
 public:
  explicit Reader(steptrace::backend::CudaMarkers& m) : markers_(m), thread_([this] { run(); }) {}
  ~Reader() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void read(std::vector<uint32_t> slots) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slots_ = std::move(slots);
      ++asked_;
    }
    cv_.notify_one();
  }
  long reads() const { return reads_.load(); }

 private:
  void run() {
    long done = 0;
    for (;;) {
      std::vector<uint32_t> slots;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || asked_ != done; });
        if (stop_) return;
        done = asked_;
        slots = slots_;
      }
      for (uint32_t s : slots) {
        int64_t ns = 0;
        for (int tries = 0; tries < 1000; ++tries) {
          const auto r = markers_.read(s, &ns);
          reads_.fetch_add(1);
          if (r != steptrace::backend::MarkerEvents::Read::pending) break;
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
    }
  }
  steptrace::backend::CudaMarkers& markers_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<uint32_t> slots_;
  long asked_ = 0;
  bool stop_ = false;
  std::atomic<long> reads_{0};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(40, std::atoi(argv[1])) : 200;
  const int kernels = argc > 2 ? std::max(10, std::atoi(argv[2])) : 200;
  const double kernel_us = argc > 3 ? std::max(1.0, std::atof(argv[3])) : 100.0;
  const int marks = std::min(kernels, argc > 4 ? std::min(64, std::max(1, std::atoi(argv[4]))) : 5);
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "marker_gpu_cost: needs a CUDA GPU\n");
    return 1;
  }
  int clock_khz = 0, sms = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const long long cycles = static_cast<long long>(kernel_us * 1e-3 * clock_khz);
  constexpr int kGroup = 5;
  for (const bool legacy : {true, false}) {
    cudaStream_t stream = nullptr;
    if (!legacy) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    steptrace::backend::CudaMarkers markers;
    bool transient = false;
    const std::string why = markers.open(256, reinterpret_cast<std::uintptr_t>(stream), &transient);
    if (!why.empty()) {
      std::fprintf(stderr, "marker_gpu_cost: markers not opened: %s\n", why.c_str());
      return 2;
    }
    Reader reader(markers);
    uint32_t next_slot = 0;
    std::vector<uint32_t> last_marked;
    for (const char* way : {"record", "record_read", "read_only", "none"}) {
      const std::string w = way;
      const bool record = w == "record" || w == "record_read";
      const bool read = w == "record_read" || w == "read_only";
      if (w == "read_only" && last_marked.empty()) continue;
      double sum[2] = {0, 0};
      int n[2] = {0, 0};
      const long reads_before = reader.reads();
      // Which side a pair of groups starts with alternates from one pair to the next.
      for (int s = 0; s < steps; ++s) {
        const int g = s / kGroup;
        const bool marked = (g % 2 == 0) == ((g / 2) % 2 == 0);
        std::vector<uint32_t> slots;
        const double t0 = now_ms();
        for (int k = 0; k < kernels; ++k) {
          if (record && marked && (k * marks) % kernels < marks) {  // `marks` records spread over the step
            int64_t host_ns = 0;
            std::string not_recorded;
            const uint32_t slot = next_slot++ % 256;
            if (markers.record(slot, false, &host_ns, &not_recorded)) slots.push_back(slot);
          }
          spin_kernel<<<sms * 4, 32, 0, stream>>>(cycles);
        }
        cudaStreamSynchronize(stream);
        const double t = now_ms() - t0;
        if (read && marked) reader.read(w == "read_only" ? last_marked : slots);
        if (!slots.empty()) last_marked = slots;
        if (s >= kGroup) sum[marked] += t, ++n[marked];
      }
      const double on = sum[1] / std::max(1, n[1]), off = sum[0] / std::max(1, n[0]);
      std::printf("marker_gpu way=%s stream=%s kernels=%d kernel_us=%.0f marks=%d marked_ms=%.4f unmarked_ms=%.4f "
                  "diff_us_per_step=%.2f diff_us_per_marker=%.2f groups=%d reads=%ld\n",
                  way, legacy ? "legacy" : "nonblocking", kernels, kernel_us, marks, on, off, 1e3 * (on - off),
                  record ? 1e3 * (on - off) / marks : 0.0, (steps - kGroup) / kGroup, reader.reads() - reads_before);
      std::fflush(stdout);
    }
    markers.close();
    if (stream) cudaStreamDestroy(stream);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
