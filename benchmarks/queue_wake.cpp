// queue_wake - what handing a closed step to the background thread costs the training thread, waking
// that thread at every step (as steptrace did until session 68) against waking it only at a quarter of
// the queue's bound (details/step_queue.hpp). The real StepQueue, a reader that takes as the worker
// does (sleeping up to 10 ms between looks), steps of --step-us of busy work between pushes; the two
// ways alternate, round by round.
//   queue_wake [--steps N] [--rounds R] [--step-us U]
// Prints per round and way: way=each_step|quarter round=R median_ns=.. mean_ns=.. p90_ns=.. takes=.. wakes=..
// (takes: the reader's looks; wakes: pushes that woke it. With steps shorter than the reader's period /
// 64, `quarter` wakes it only when 64 steps wait; with longer ones, never: it looks every 10 ms.)
#include <steptrace/steptrace.hpp>
#include <steptrace/details/step_queue.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <numeric>
#include <thread>
#include <vector>

namespace {
struct Result {
  double median_ns, mean_ns, p90_ns;
  int takes;
  uint64_t wakes;
};

Result run(std::size_t wake_at, int steps, int step_us) {
  steptrace::details::StepQueue queue;
  queue.reset(256, wake_at);  // the default bound (max_pending_steps); wake_at 1: at every push, the old way
  std::atomic<int> takes{0};
  std::thread reader([&] {
    std::deque<steptrace::StepRecord> batch;
    while (!queue.take(batch, std::chrono::milliseconds(10))) {
      ++takes;
      batch.clear();
    }
  });
  std::vector<double> ns;
  ns.reserve(static_cast<std::size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    const auto work_end = std::chrono::steady_clock::now() + std::chrono::microseconds(step_us);
    while (std::chrono::steady_clock::now() < work_end) {
    }
    steptrace::StepRecord r;
    r.index = static_cast<uint64_t>(i);
    const auto t0 = std::chrono::steady_clock::now();
    queue.push(std::move(r));
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  const uint64_t wakes = queue.wakes();
  queue.stop();
  reader.join();
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], std::accumulate(ns.begin(), ns.end(), 0.0) / static_cast<double>(ns.size()),
          ns[ns.size() * 9 / 10], takes.load(), wakes};
}
}  // namespace

int main(int argc, char** argv) {
  int steps = 3000, rounds = 3, step_us = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--step-us")) step_us = std::atoi(argv[i + 1]);
  }
  steps = std::max(steps, 10);
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const bool each = (k + round) % 2 == 0;
      const Result r = run(each ? 1 : 0, steps, step_us);
      std::printf("way=%s round=%d steps=%d step_us=%d median_ns=%.0f mean_ns=%.0f p90_ns=%.0f takes=%d wakes=%llu\n",
                  each ? "each_step" : "quarter", round, steps, step_us, r.median_ns, r.mean_ns, r.p90_ns, r.takes,
                  static_cast<unsigned long long>(r.wakes));
    }
  }
  return 0;
}
