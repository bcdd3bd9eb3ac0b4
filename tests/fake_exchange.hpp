// A simulated cross-rank exchange for CPU tests and the Prometheus end-to-end test.
#pragma once
#include <steptrace/steptrace.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace steptrace_test {
// Four ranks in one process: rank 0 is this program; ranks 1-3 are made up from rank 0's own summary,
// rank 2 with 20 ms more input. Completes at once (no GPU, no NCCL).
class FakeExchange : public steptrace::CrossRankExchange {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 4; }
  std::string post(const std::vector<float>& summary) override {
    sent->push_back(summary);
    std::vector<float> all;
    for (int r = 0; r < 4; ++r) {
      std::vector<float> s = summary;
      s[1] = static_cast<float>(r);
      // Rank 2's input takes 20 ms more; the others wait for it in their nccl phase (their host time
      // there, the wait the summary carries, grows by as much).
      if (r == 2) s[4 + steptrace::phase_tag::input] += 20.f;
      else s[4 + steptrace::phase_tag::nccl] += 20.f, s[steptrace::summary_wait_index(steptrace::WaitBasis::host_nccl)] += 20.f;
      s[3] += 20.f;
      all.insert(all.end(), s.begin(), s.end());
    }
    ready_.push_back(all);
    ++*posts;
    return {};
  }
  bool poll(std::vector<float>& out) override {
    if (ready_.empty()) return false;
    out = ready_.front();
    ready_.erase(ready_.begin());
    return true;
  }
  std::string agree_run_id(const std::string&, std::string& agreed) override {
    agreed = rank0_run_id;
    return {};
  }
  std::string rank0_run_id = "feedfacecafebeef";  // what "rank 0" says its run_id is
  std::shared_ptr<int> posts = std::make_shared<int>(0);  // outlives the exchange (stop() destroys it)
  std::shared_ptr<std::vector<std::vector<float>>> sent =  // this rank's summaries as posted, in order
      std::make_shared<std::vector<std::vector<float>>>();

 private:
  std::vector<std::vector<float>> ready_;
};
/// Steps as the exchange tests run them: 2 ms in `input`, 1 ms in `nccl`.
inline void run_input_nccl_steps(int n) {
  for (int i = 0; i < n; ++i) {
    TRACE_STEP();
    {
      TRACE_PHASE(input);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    TRACE_PHASE(nccl);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
}  // namespace steptrace_test
