// steptrace/details/environment.hpp - what start() reads from the process: STEPTRACE_* variables,
// and the rank, world size and host that the launcher (torchrun, mpirun, srun) announces.
#pragma once
#include "../version.hpp"
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <initializer_list>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "../config.hpp"
#include "../core/reasons.hpp"
#include "../core/run_info.hpp"
#include "../settings.hpp"
#include "log.hpp"

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

/// The first of `names` that is set, if it is an integer within [lo, hi]; otherwise (not set, or
/// unusable: warned once, naming the variable) `fallback`. A later name is not tried after an unusable
/// one: the launcher meant that value, and a guess from another launcher's variable would be worse.
inline int launcher_int(std::initializer_list<const char*> names, long long lo, long long hi, int fallback) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (!v) continue;
    long long i = 0;
    if (parse_int(v, i) && i >= lo && i <= hi) return static_cast<int>(i);
    warn_once(std::string("launcher.") + name, std::string("configuration error in ") + name + ": cannot use value '" +
                                                   printable(v, 32) + "' (not an integer in " + std::to_string(lo) +
                                                   " - " + std::to_string(hi) + "); using " + std::to_string(fallback));
    return fallback;
  }
  return fallback;
}

/// A job id from the environment, at most kMaxJobIdBytes (a longer one is cut, and a warning says so).
inline constexpr std::size_t kMaxJobIdBytes = 128;
inline std::string job_id_from(const char* var, const std::string& v) {
  if (v.size() > kMaxJobIdBytes)
    warn_once(std::string("job_id.cut.") + var, std::string(var) + " is " + std::to_string(v.size()) + " bytes: job_id keeps its first " +
                                                std::to_string(kMaxJobIdBytes) + " (set job_id / STEPTRACE_JOB_ID for another)");
  return v.substr(0, kMaxJobIdBytes);
}

/// The scheduler's job: job_id, else Slurm's, torchelastic's, or the Kubernetes pod's name (a pod's
/// HOSTNAME is its name, and KUBERNETES_SERVICE_HOST is set in every pod).
inline void find_job_id(const Config& cfg, RunInfo& run) {
  run.job_id.clear();
  if (!cfg.job_id.empty()) {
    run.job_id = cfg.job_id;
    return;
  }
  for (const char* var : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* v = std::getenv(var);
    if (v && *v) {
      run.job_id = job_id_from(var, v);
      return;
    }
  }
  const char* pod = std::getenv("HOSTNAME");
  if (std::getenv("KUBERNETES_SERVICE_HOST") && pod && *pod) {
    run.job_id = job_id_from("HOSTNAME", pod);
    return;
  }
  run.job_id_source = reason_text(Reason::no_job_id);
}

/// 16 hex digits, new at every start(): tells two runs of one job apart (restarts, a second start()).
inline std::string new_run_id() {
  uint64_t bits = 0;
  try {
    std::random_device rd;
    bits = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  } catch (...) {
  }
  bits ^= static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) ^
          (static_cast<uint64_t>(getpid()) << 40);
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

/// Rank, local rank and world size (Config first, then torchrun's, Open MPI's and Slurm's
/// variables; each within the ranges of the Config fields), host name and pid. The device is the
/// backend's to fill in.
inline RunInfo discover_run(const Config& cfg) {
  constexpr long long kMaxRanks = 1 << 24;  // as settings.hpp
  RunInfo run;
  run.rank = cfg.rank >= 0 ? cfg.rank : launcher_int({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, 0, kMaxRanks - 1, 0);
  run.local_rank = cfg.local_rank >= 0
                       ? cfg.local_rank
                       : launcher_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0, kMaxRanks - 1, 0);
  run.world_size = cfg.world_size >= 0
                       ? cfg.world_size
                       : launcher_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1, kMaxRanks, 1);
  // Launchers that set no global rank (PyTorch Lightning's: LOCAL_RANK, NODE_RANK, WORLD_SIZE): on one
  // node (NODE_RANK/GROUP_RANK absent or 0) the local rank is the rank; on node N with LOCAL_WORLD_SIZE
  // known, N x LOCAL_WORLD_SIZE + LOCAL_RANK (torchrun's rule). Otherwise the rank is not known, and
  // is not guessed silently: a warning names the setting (the Python package takes the rank from
  // torch.distributed or the framework's trainer when it can).
  const auto any_set = [](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (std::getenv(n)) return true;
    return false;
  };
  if (cfg.rank < 0 && run.world_size > 1 && !any_set({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) &&
      any_set({"LOCAL_RANK"})) {
    const int node = launcher_int({"NODE_RANK", "GROUP_RANK"}, 0, kMaxRanks - 1, 0);
    const int local_world = launcher_int({"LOCAL_WORLD_SIZE"}, 1, kMaxRanks, 0);
    // The node must be said (Lightning sets NODE_RANK), or the node hold the whole world: a launcher
    // that sets LOCAL_RANK alone on several nodes would give every node's processes the same ranks.
    const bool one_node = local_world == run.world_size;
    if (!any_set({"NODE_RANK", "GROUP_RANK"}) && !one_node) {
      run.rank = run.local_rank;
      warn_once("launcher.no_rank", "the launcher set LOCAL_RANK " + std::to_string(run.local_rank) + " but neither RANK "
                                        "nor NODE_RANK: the global rank is not known here (set rank / STEPTRACE_RANK); "
                                        "the lines say rank " + std::to_string(run.rank));
    } else if (node == 0) {
      run.rank = run.local_rank;
    } else if (local_world > 0 && static_cast<long long>(node) * local_world + run.local_rank < kMaxRanks) {
      run.rank = node * local_world + run.local_rank;
    } else {
      run.rank = run.local_rank;
      warn_once("launcher.no_rank_node", "the launcher set LOCAL_RANK " + std::to_string(run.local_rank) + " and NODE_RANK " +
                                        std::to_string(node) + " but no RANK: the global rank is not known here (set "
                                        "rank / STEPTRACE_RANK); the lines say rank " + std::to_string(run.rank));
    }
  }
  if (run.rank >= run.world_size)
    warn_once("launcher.rank", "rank " + std::to_string(run.rank) + " is not below world_size " +
                                   std::to_string(run.world_size) + " (set rank/world_size or the launcher's RANK/WORLD_SIZE); "
                                   "the lines say what was given");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) run.hostname = host;
  run.pid = static_cast<int64_t>(getpid());
  find_job_id(cfg, run);
  run.run_id = new_run_id();
  return run;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
