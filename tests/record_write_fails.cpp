// record_write_fails LOG - a log whose device refuses the compact run record twice (ENOSPC, as a full
// disk that frees a little room between two writes would) while the step lines would still fit: no
// compact line may then be written without its record (it would have no host, pid or settings). The
// record is tried again before each next line; the third try is taken, and the lines after it.
//
// The refusal is made here, in this program's own write(2) (the library is compiled into it, so its
// writes bind to this definition): the first kRefusals writes of a record fail; everything else goes to
// the kernel. No clock and no wait: the verdict is the same however the threads interleave.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include "child_steps.hpp"
#include "host_config.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <sys/syscall.h>
#include <unistd.h>

namespace {
constexpr int kRefusals = 2;
std::atomic<int> refused{0};
}  // namespace

extern "C" ssize_t write(int fd, const void* buf, size_t n) {
  static const char kRecord[] = "{\"event\":\"run\"";
  if (n >= sizeof(kRecord) - 1 && std::memcmp(buf, kRecord, sizeof(kRecord) - 1) == 0 &&
      refused.fetch_add(1) < kRefusals) {
    errno = ENOSPC;
    return -1;
  }
  return ::syscall(SYS_write, fd, buf, n);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // The line detail the test's environment gives (host_config.hpp): the default's compact lines and
  // their run record under `exit_default_lines`, full lines (no run record to refuse) under `exit`.
  steptrace::start(steptrace_test::host_config(argv[1]));
  steptrace_test::forward_steps(10);
  steptrace::stop();
  return 0;  // what was written and counted is the test's to judge (test_exit.cpp)
}
