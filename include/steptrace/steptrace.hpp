// steptrace/steptrace.hpp - the only header a program includes.
//
//   #include <steptrace/steptrace.hpp>
//
//   steptrace::Config cfg;
//   cfg.log_path = "steps.jsonl";
//   cfg.tokens_per_step = batch * seq_len;
//   cfg.flops_per_token = steptrace::transformer_flops_per_token({/*layers*/ 12, /*d_model*/ 768,
//                                                                 /*seq*/ 1024, /*vocab*/ 50257});
//   steptrace::start(cfg);
//   for (int i = 0; i < steps; ++i) {
//     TRACE_STEP();
//     { TRACE_PHASE(input);    batch = loader.next(); }
//     { TRACE_PHASE(forward);  loss = model.forward(batch); }
//     { TRACE_PHASE(backward); loss.backward(); }
//     { TRACE_PHASE(optimizer); opt.step(); }
//     steptrace::record("loss", loss.item<double>());
//   }
//   steptrace::stop();   // last line, summary table, everything released
//
// Each step becomes one JSON line (schema: docs/schema.md). Compile-time switches:
//   STEPTRACE_DISABLE          every macro and function becomes a no-op (nothing is linked in)
//   STEPTRACE_NO_SHORT_MACROS  only the STEPTRACE_-prefixed macro names are defined
//   STEPTRACE_COMPILED_LIB     the runtime is linked from the library CMake builds with
//                              -DSTEPTRACE_COMPILED_LIB=ON (set for you by that target); this header
//                              then declares the API and includes no vendor header (version.hpp)
#pragma once

#include "config.hpp"
#include "core/metrics.hpp"
#include "macros.hpp"
