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
// Each step becomes one JSON line (schema: docs/schema.md). This header declares the API and includes
// no vendor header; the runtime is compiled once per program. Compile-time switches:
//   STEPTRACE_IMPLEMENTATION   defined in exactly one translation unit before it includes this header:
//                              that unit compiles the runtime (CUPTI, NVML, NVTX, spdlog). CMake's
//                              steptrace::steptrace builds such a file (src/implementation.cpp) and
//                              links it; without CMake, define it in one of your files
//   STEPTRACE_DISABLE          every macro and function becomes a no-op (nothing is linked in)
//   STEPTRACE_NO_SHORT_MACROS  only the STEPTRACE_-prefixed macro names are defined
//   STEPTRACE_COMPILED_LIB     the runtime is linked from the library CMake builds with
//                              -DSTEPTRACE_COMPILED_LIB=ON (set for you by that target); no
//                              translation unit of the program compiles it (version.hpp)
// No include guard here (each header it includes has one): a file that defines STEPTRACE_IMPLEMENTATION
// after an earlier include of this header still gets the runtime.

#include "config.hpp"
#include "settings.hpp"  // the settings table: validate(), apply_environment(), settings()
#include "core/metrics.hpp"
#include "macros.hpp"

#if defined(STEPTRACE_IMPLEMENTATION) && !defined(STEPTRACE_DISABLE) && !defined(STEPTRACE_COMPILED_LIB)
#include "details/api_impl.hpp"
#endif
