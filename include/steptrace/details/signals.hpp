// steptrace/details/signals.hpp - signals on steptrace's own threads. A write to a pipe whose reader
// left raises SIGPIPE, and one past the file size limit (ulimit -f) SIGXFSZ, in the writing thread;
// both end the process by default. steptrace's threads block them, so such a write fails with EPIPE
// or EFBIG instead (counted and warned like any failed write) and training goes on.
#pragma once
#include "../version.hpp"
#include <csignal>

#include <pthread.h>

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// Called first thing in each thread steptrace starts (the mask is per thread, signal(7)).
inline void block_write_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  sigaddset(&set, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
