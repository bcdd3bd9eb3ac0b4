// steptrace/details/environment.hpp - what start() reads from the process: STEPTRACE_* variables,
// and the rank, world size and host that the launcher (torchrun, mpirun, srun) announces.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "../config.hpp"
#include "../core/run_info.hpp"

extern char** environ;

STEPTRACE_BEGIN_NAMESPACE namespace details {

inline std::vector<std::pair<std::string, std::string>> read_environment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e && *e; ++e) {
    std::string s(*e);
    const auto eq = s.find('=');
    if (eq != std::string::npos && s.rfind("STEPTRACE_", 0) == 0) env.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  return env;
}

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  long long i = 0;
  return (v && parse_int(v, i)) ? static_cast<int>(i) : fallback;
}

/// Rank, local rank and world size (Config first, then torchrun's, Open MPI's and Slurm's
/// variables), host name and pid. The device is the backend's to fill in.
inline RunInfo discover_run(const Config& cfg) {
  RunInfo run;
  run.rank = cfg.rank >= 0 ? cfg.rank : env_int("RANK", env_int("OMPI_COMM_WORLD_RANK", env_int("SLURM_PROCID", 0)));
  run.local_rank = cfg.local_rank >= 0
                       ? cfg.local_rank
                       : env_int("LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", 0)));
  run.world_size = cfg.world_size >= 0 ? cfg.world_size
                                       : env_int("WORLD_SIZE", env_int("OMPI_COMM_WORLD_SIZE", env_int("SLURM_NTASKS", 1)));
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) run.hostname = host;
  run.pid = static_cast<int64_t>(getpid());
  return run;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
