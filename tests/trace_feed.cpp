// trace_feed - a run with the flight recorder on and a fake GPU (tests/fake_backend.hpp), for the
// trace checks that need no GPU (tests/checks/trace_check.py feed):
//   trace_feed DIR STEPS      lines to DIR/steps.jsonl, traces to DIR
// Each step: `input` on the step thread while a loader thread runs `prefetch` scopes of its own;
// `h2d` copies, `forward` and `backward` kernels on two streams (some of backward's launched from a
// thread with no phase, as autograd's are), `optimizer` kernels and a memset, an NCCL kernel in
// `nccl`. Step 45 is slow (the trigger), STEPTRACE_CAPTURE_STEPS=30-31 is passed as the
// environment, and the program calls capture_steps(1) inside step 50.
#include <steptrace/details/session.hpp>
#include <steptrace/steptrace.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "fake_backend.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: trace_feed DIR STEPS\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int steps = std::atoi(argv[2]);
  using steptrace_test::FakeBackend;
  auto backend = std::make_unique<FakeBackend>();
  FakeBackend& gpu = *backend;
  gpu.start_delay_ns = 20'000;
  steptrace::details::Session session(std::move(backend));
  steptrace::Config cfg;
  cfg.log_path = dir + "/steps.jsonl";
  cfg.summary = false;
  cfg.trace_every = 1;
  cfg.tokens_per_step = 4096;
  cfg.stall_after_s = 0;
  cfg.line_detail = steptrace::LineDetail::full;  // trace_check.py compares the lines' fields with the traces
  if (!session.start(cfg, {{"STEPTRACE_CAPTURE_STEPS", "30-31"}})) return 1;

  std::atomic<bool> done{false};
  std::thread loader([&] {
    while (!done.load()) {
      TRACE_PHASE_NAMED("prefetch");
      std::this_thread::sleep_for(std::chrono::microseconds(700));
    }
  });
  using std::chrono::microseconds;
  for (int i = 0; i < steps; ++i) {
    TRACE_STEP();
    {
      TRACE_PHASE(input);
      std::this_thread::sleep_for(microseconds(300));
    }
    {
      TRACE_PHASE(h2d);
      gpu.copy(1 << 20, steptrace::CopyKind::h2d, 40'000);
      gpu.copy(1 << 16, steptrace::CopyKind::h2d, 5'000);
    }
    {
      TRACE_PHASE(forward);
      for (int k = 0; k < 30; ++k) gpu.launch(15'000 + 500 * k, 132, k % 3 ? "_Z4gemmPfS_" : "_Z7softmaxPf");
      if (i == 45) std::this_thread::sleep_for(microseconds(25'000));  // the slow step
    }
    {
      TRACE_PHASE(backward);
      for (int k = 0; k < 40; ++k) gpu.launch(20'000, 264, "_Z8gemm_bwdPf", k % 2 ? 7 : 13);
      std::thread autograd([&] {  // no phase of its own: its launches count for the step thread's
        for (int k = 0; k < 5; ++k) gpu.launch(8'000, 66, "_Z10reduce_bwdPf", 13);
      });
      autograd.join();
    }
    {
      TRACE_PHASE(optimizer);
      for (int k = 0; k < 6; ++k) gpu.launch(4'000, 50, "_Z4adamPf");
      gpu.copy(4096, steptrace::CopyKind::memset, 1'000);
    }
    {
      TRACE_PHASE(nccl);
      gpu.launch(60'000, 8, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 21);
    }
    if (i == 50) steptrace::capture_steps(1);
    steptrace::record("loss", 5.0 - i * 0.01);
    std::this_thread::sleep_for(microseconds(1'500));  // the GPU's queue drains before the next step
  }
  done = true;
  loader.join();
  session.stop();
  return 0;
}
