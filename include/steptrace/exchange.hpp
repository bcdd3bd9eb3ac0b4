// steptrace/exchange.hpp - how the session talks to other ranks, whatever carries it: the interface a
// program (or steptrace/nccl.hpp, which builds the NCCL one from the program's communicator) hands to
// details::use_cross_rank_exchange. Tests use an in-process one.
#pragma once
#include "version.hpp"
#include <string>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

class CrossRankExchange {
 public:
  virtual ~CrossRankExchange() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Training thread, at a step boundary, at the same steps on every rank: starts gathering this
  /// rank's summary (floats) from all ranks. Asynchronous: never waits for the other ranks.
  /// Returns "" or an error (the exchange is then switched off).
  virtual std::string post(const std::vector<float>& summary) = 0;
  /// Background thread: if the oldest exchange not yet returned has completed, moves every rank's
  /// summary (world_size x summary size floats, rank order) into `out` and returns true.
  virtual bool poll(std::vector<float>& out) = 0;
  /// Training thread, once, when the exchange is handed over (before any post): every rank learns rank
  /// 0's run_id, so that one run's lines share it. Returns "" with `agreed` set, or an error. Bounded
  /// in time; a collective, in order with the later posts.
  virtual std::string agree_run_id(const std::string& mine, std::string& agreed) {
    agreed = mine;
    return {};
  }
};

namespace details {
using CrossRankExchange = steptrace::CrossRankExchange;  // its earlier name (details/exchange.hpp)
}  // namespace details

STEPTRACE_END_NAMESPACE  // steptrace
