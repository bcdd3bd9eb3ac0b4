// steptrace/details/worker.hpp - the background thread, whole: Worker's class (worker_decl.hpp), its
// lines (worker_lines.hpp) and its part in the overhead budget (worker_overhead.hpp). Include this one.
#pragma once
#include "worker_decl.hpp"
#include "worker_lines.hpp"
#include "worker_overhead.hpp"
