// Consumer of the package: two steps (steps.cpp), then checks that two lines were written.
#include <steptrace/steptrace.hpp>

#if defined(STEPTRACE_EXPECT_COMPILED) != defined(STEPTRACE_COMPILED_LIB)
#error "steptrace::steptrace did not bring the mode this consumer was configured for"
#endif

#include <cstdio>
#include <fstream>
#include <string>

void run_steps(int n);  // steps.cpp

int main() {
  std::remove("consumer.jsonl");
  steptrace::Config cfg;
  cfg.log_path = "consumer.jsonl";
  cfg.summary = false;
  cfg.gpu = steptrace::Mode::off;
  if (!steptrace::start(cfg)) return 2;
  run_steps(2);  // in another translation unit: the runtime is compiled once for both
  const auto summary = steptrace::stop();
  std::ifstream in("consumer.jsonl");
  int lines = 0;
  for (std::string line; std::getline(in, line);) lines += line.rfind("{\"event\"", 0) != 0;  // step lines, not the end record
  std::printf("consumer: %d lines, summary says %llu\n", lines, static_cast<unsigned long long>(summary.lines_written));
  return lines == 2 && summary.lines_written == 2 ? 0 : 1;
}
