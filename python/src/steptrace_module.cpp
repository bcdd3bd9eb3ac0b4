// steptrace's Python module (_steptrace): the header's API for Python programs, pybind11 over the same
// runtime a C++ program links. python/steptrace/__init__.py is the API users import; this file holds
// only what needs C++: starting with a Config built from keyword arguments (the settings table parses
// them, the environment still wins), the step and phase scopes (kept in a per-thread stack without
// allocating), record, the allocator hook, capture_steps and stop()'s summary.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <steptrace/steptrace.hpp>
#include <steptrace/core/overhead_parts.hpp>
#include <steptrace/exchange.hpp>

#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace py = pybind11;

namespace {

/// A setting's value as the environment would spell it.
std::string setting_text(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::hasattr(v, "__index__")) return py::str(py::int_(py::reinterpret_borrow<py::object>(v))).cast<std::string>();
  if (py::hasattr(v, "__float__")) {  // float, numpy.float64 ...: the shortest text that reads back the same
    return py::repr(py::float_(py::reinterpret_borrow<py::object>(v))).cast<std::string>();
  }
  throw py::type_error("steptrace.start(" + name + "=...): a bool, int, float or str is wanted, got " +
                       py::type::of(v).attr("__name__").cast<std::string>());
}

const steptrace::Setting* find_setting(const std::string& name) {
  for (const auto& s : steptrace::settings())
    if (s.name == name) return &s;
  return nullptr;
}

void apply(steptrace::Config& cfg, const std::string& name, const py::handle& value) {
  const steptrace::Setting* s = find_setting(name);
  if (!s) {
    std::string known;
    for (const auto& k : steptrace::settings()) known += (known.empty() ? "" : ", ") + k.name;
    throw py::type_error("steptrace.start(): unknown setting '" + name + "' (settings: " + known + ")");
  }
  const std::string text = setting_text(name, value);
  const std::string why = s->parse(cfg, text);
  if (!why.empty())
    throw py::value_error("steptrace.start(" + name + "=" + py::repr(value).cast<std::string>() + "): " + why +
                          " (accepted: " + s->range + ")");
}

/// Config from keyword arguments; model_parallel takes a dict {tensor, pipeline, context}.
steptrace::Config config_from(const py::dict& kwargs) {
  steptrace::Config cfg;
  for (const auto& [k, v] : kwargs) {
    const std::string name = k.cast<std::string>();
    if (name == "model_parallel") {
      if (!py::isinstance<py::dict>(v))
        throw py::type_error("steptrace.start(model_parallel=...): a dict such as {'tensor': 4, 'pipeline': 2} is wanted");
      for (const auto& [kk, vv] : v.cast<py::dict>()) apply(cfg, "model_parallel." + kk.cast<std::string>(), vv);
      continue;
    }
    apply(cfg, name, v);
  }
  // What validate() would replace with a default (and warn about) is refused here instead.
  steptrace::Config checked = cfg;
  for (const auto& e : steptrace::validate(checked)) throw py::value_error("steptrace.start(" + e.setting + "): " + e.message);
  return cfg;
}

/// Scopes live in a per-thread stack of raw storage: entering one constructs it in place, exiting
/// destroys it; nothing is allocated per scope.
template <class Scope>
struct ScopeStack {
  static constexpr int kDepth = 64;
  typename std::aligned_storage<sizeof(Scope), alignof(Scope)>::type slots[kDepth];
  int depth = 0;
  int overflow = 0;  // scopes entered beyond kDepth: not recorded
  static ScopeStack& mine() {
    thread_local ScopeStack s;
    return s;
  }
  template <class... A>
  void push(A&&... a) {
    if (depth >= kDepth) {
      ++overflow;
      return;
    }
    ::new (static_cast<void*>(&slots[depth++])) Scope(std::forward<A>(a)...);  // the scopes' own new is deleted
  }
  void pop() {
    if (overflow) {
      --overflow;
      return;
    }
    if (depth == 0) throw py::value_error("steptrace: a scope was exited more often than entered on this thread");
    reinterpret_cast<Scope*>(&slots[--depth])->~Scope();
  }
};

py::dict summary_dict(const steptrace::Summary& s) {
  py::dict d;
  d["started"] = s.started;
  d["steps"] = s.steps;
  d["lines_written"] = s.lines_written;
  d["lines_failed"] = s.lines_failed;
  d["steps_dropped"] = s.steps_dropped;
  d["log_path"] = s.log_path.empty() ? py::object(py::none()) : py::object(py::str(s.log_path));
  d["step_time_ms_mean"] = s.step_time_ms_mean;
  d["step_time_ms_median"] = s.step_time_ms_median;
  d["step_time_ms_p90"] = s.step_time_ms_p90;
  d["tokens_per_second_mean"] = s.tokens_per_second_mean;
  d["estimated_mfu_mean"] = s.estimated_mfu_mean;
  py::dict phases;
  for (const auto& p : s.phases) {
    py::dict ph;
    ph["host_ms_mean"] = p.host_ms_mean;
    ph["share"] = p.share;
    phases[py::str(p.name)] = ph;
  }
  d["phases"] = phases;
  d["untracked_share"] = s.untracked_share;
  d["diagnosis"] = s.diagnosis;
  d["diagnosis_fraction"] = s.diagnosis_fraction;
  d["table"] = s.table;
  return d;
}

/// The allocator hook's Python callable, released under the GIL (or leaked once the interpreter is gone).
std::shared_ptr<py::object> keep_callable(py::object fn) {
  return std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* o) {
    if (!Py_IsInitialized()) return;  // at process exit after the interpreter: leaked, not touched
    py::gil_scoped_acquire gil;
    delete o;
  });
}

/// The gathered summaries the Python side hands back (steptrace/cross_rank.py), in the order posted.
struct CrossRankInbox {
  std::mutex mutex;
  std::deque<std::vector<float>> gathered;
};
std::shared_ptr<CrossRankInbox>& current_inbox() {
  static auto* inbox = new std::shared_ptr<CrossRankInbox>();  // never destroyed: read at any exit
  return *inbox;
}

/// The cross-rank exchange over torch.distributed: post() hands each rank's summary to a Python function
/// that starts an asynchronous all_gather on a gloo group (CPU tensors: never the program's GPU
/// stream); the Python side hands what was gathered back through cross_rank_deliver(), on the training
/// thread at step boundaries; poll() (the background thread) reads that, never touching Python.
class PyTorchExchange final : public steptrace::CrossRankExchange {
 public:
  // A KeyboardInterrupt or SystemExit raised while the run_id broadcast waited: kept here,
  // raised again by use_cross_rank once the runtime is done with the call (never swallowed).
  std::shared_ptr<py::object> interrupted = keep_callable(py::none());  // released under the GIL, as the callables
  PyTorchExchange(int rank, int world, std::shared_ptr<py::object> post, std::shared_ptr<py::object> agree,
                  std::shared_ptr<CrossRankInbox> inbox)
      : rank_(rank), world_(world), post_(std::move(post)), agree_(std::move(agree)), inbox_(std::move(inbox)) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string post(const std::vector<float>& summary) override {
    if (!Py_IsInitialized()) return "the Python interpreter is gone";
    py::gil_scoped_acquire gil;
    try {
      (*post_)(summary);
      return {};
    } catch (py::error_already_set& e) {
      return std::string("torch.distributed all_gather: ") + e.what();
    }
  }
  bool poll(std::vector<float>& out) override {
    std::lock_guard<std::mutex> lock(inbox_->mutex);
    if (inbox_->gathered.empty()) return false;
    out = std::move(inbox_->gathered.front());
    inbox_->gathered.pop_front();
    return true;
  }
  std::string agree_run_id(const std::string& mine, std::string& agreed) override {
    if (!Py_IsInitialized()) return "the Python interpreter is gone";
    py::gil_scoped_acquire gil;
    try {
      agreed = (*agree_)(mine).cast<std::string>();
      return {};
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_KeyboardInterrupt) || e.matches(PyExc_SystemExit)) {
        *interrupted = py::reinterpret_borrow<py::object>(e.type());
        return "interrupted";
      }
      return std::string("torch.distributed broadcast: ") + e.what();
    } catch (const py::cast_error& e) {
      return std::string("torch.distributed broadcast: ") + e.what();
    }
  }

 private:
  int rank_, world_;
  std::shared_ptr<py::object> post_, agree_;
  std::shared_ptr<CrossRankInbox> inbox_;
};

std::optional<int64_t> int_field(const py::dict& d, const char* k) {
  if (!d.contains(k) || d[k].is_none()) return std::nullopt;
  return d[k].cast<int64_t>();
}

}  // namespace

PYBIND11_MODULE(_steptrace, m) {
  m.doc() = "steptrace's C++ runtime (use the steptrace package)";
  // Scopes and calls from Python cost more than a C++ scope: the overhead's host_api part says so.
  steptrace::details::set_binding_call_ns(steptrace::OverheadLedger::kPythonScopeNs);
  m.def("start", [](py::kwargs kwargs) { return steptrace::start(config_from(kwargs)); },
        "Starts measuring with the given settings (Config fields); STEPTRACE_* variables override them.");
  // stop() waits for the background thread (records, lines, traces): other Python threads run meanwhile.
  m.def("stop", [] {
    steptrace::Summary s;
    {
      py::gil_scoped_release free;
      s = steptrace::stop();
    }
    return summary_dict(s);
  });
  m.def("is_running", [] { return steptrace::is_running(); });
  // The framework callbacks time their own bookkeeping on some steps (steptrace._callback_steps): what
  // one call is modelled to cost, the markers' records to take out, and what they measured beyond it.
  m.attr("python_call_ns") = steptrace::OverheadLedger::kPythonScopeNs;
  m.def("timing_marks", [] {  // what a timed call takes out, read around it: (markers' ns, tracing boundaries)
    return py::make_tuple(steptrace::details::marker_record_ns(), steptrace::details::tracing_boundaries_so_far());
  });
  m.def("set_step_extra_ns", [](double ns) { steptrace::details::set_binding_step_extra_ns(ns); });
  m.def("step_extra_ns", [] { return steptrace::details::binding_step_extra_ns(); });
  // (rank, world_size) the lines say, or None when steptrace is not running.
  m.def("run_rank", []() -> py::object {
    int rank = 0, world = 1;
    if (!steptrace::details::session_rank(rank, world)) return py::none();
    return py::make_tuple(rank, world);
  });
  // The package's own warnings go through the same logger ("steptrace"), once per key.
  m.def("warn_once", [](const std::string& key, const std::string& message) {
    return steptrace::details::binding_warn_once("python." + key, message);
  });
  m.def("record", [](const std::string& name, double value) { steptrace::record(name, value); });
  m.def("set_step_tokens", [](double tokens, std::optional<double> samples) { steptrace::set_step_tokens(tokens, samples); },
        py::arg("tokens"), py::arg("samples") = py::none());
  m.def("capture_steps", [](int n) { return steptrace::capture_steps(n); }, py::arg("n") = 1);
  m.def("builtin_phase", [](const std::string& name) -> int {
    static const char* names[] = {"input", "h2d", "forward", "backward", "optimizer", "nccl"};
    for (int i = 0; i < static_cast<int>(steptrace::kBuiltinPhaseCount); ++i)
      if (name == names[i]) return i;
    return -1;
  });
  m.def("register_phase", [](const std::string& name) -> int {
    if (!steptrace::is_valid_phase_name(name))
      throw py::value_error("steptrace.phase('" + name + "'): a phase name is 1-48 characters of a-z, 0-9, '_', '.', "
                            "'-', starting with a letter");
    const steptrace::PhaseId id = steptrace::register_phase(name);
    if (id == steptrace::kNoPhase)
      throw py::value_error("steptrace.phase('" + name + "'): the table of 64 phase names is full");
    return id;
  });
  m.def("phase_enter", [](int id) { ScopeStack<steptrace::PhaseScope>::mine().push(static_cast<steptrace::PhaseId>(id)); });
  m.def("phase_exit", [] { ScopeStack<steptrace::PhaseScope>::mine().pop(); });
  // The open phase closes and `id` opens, in one call (the framework callbacks' phase changes: a Python
  // call costs ~1-2 us between a framework's work, ten times a warm loop's).
  m.def("phase_switch", [](int id) {
    auto& s = ScopeStack<steptrace::PhaseScope>::mine();
    s.pop();
    s.push(static_cast<steptrace::PhaseId>(id));
  });
  // framework: the step is a framework callback's (its line claims no upper end for the cost).
  m.def("step_enter", [](std::optional<double> tokens, std::optional<double> samples, bool framework) {
    steptrace::details::set_next_step_framework(framework);
    auto& s = ScopeStack<steptrace::StepScope>::mine();
    if (tokens && samples) s.push(*tokens, *samples);
    else if (tokens) s.push(*tokens);
    else s.push();
    steptrace::details::set_next_step_framework(false);  // a step that did not open (not running) took none
  }, py::arg("tokens"), py::arg("samples"), py::arg("framework") = false);
  m.def("step_exit", [] { ScopeStack<steptrace::StepScope>::mine().pop(); });
  m.def("step_work_done", [] { steptrace::details::mark_step_work_done(); });
  // The GIL released: the runtime's lock is taken here, and the exchange is destroyed under that lock in
  // stop() (a Python object: it takes the GIL).
  m.def("collective_wait", [](double ms) { steptrace::details::add_collective_wait(ms); },
        py::call_guard<py::gil_scoped_release>());
  m.def("steps_begun", [] { return steptrace::details::steps_begun(); });
  // Ends the open step where its training work was done (stop() closing a step kept open for the next).
  m.def("step_exit_at_work_end", [] {
    steptrace::details::end_next_step_at_work_end();
    ScopeStack<steptrace::StepScope>::mine().pop();
  });
  m.def("set_marker_stream", [](std::uintptr_t stream) { steptrace::set_marker_stream(reinterpret_cast<void*>(stream)); });
  // steptrace/cross_rank.py: the exchange over torch.distributed, and what it gathered.
  m.def("use_cross_rank", [](int rank, int world, py::object post, py::object agree, int every) {
    auto inbox = std::make_shared<CrossRankInbox>();
    auto exchange = std::make_unique<PyTorchExchange>(rank, world, keep_callable(std::move(post)),
                                                      keep_callable(std::move(agree)), inbox);
    const std::shared_ptr<py::object> interrupted = exchange->interrupted;
    const bool taken = steptrace::details::use_cross_rank_exchange(
        std::move(exchange), steptrace::is_running() ? "" : "steptrace is not running", every);
    if (!interrupted->is_none()) {  // the program's Ctrl-C (or exit) during the broadcast: raised, as Python would have
      PyErr_SetNone(interrupted->ptr());
      throw py::error_already_set();
    }
    if (taken) current_inbox() = inbox;  // a refused exchange (one is already set) leaves the one in use fed
    return taken;
  });
  m.def("cross_rank_deliver", [](std::vector<float> gathered) {
    std::shared_ptr<CrossRankInbox> inbox = current_inbox();
    if (!inbox) return false;
    std::lock_guard<std::mutex> lock(inbox->mutex);
    if (inbox->gathered.size() >= 64) return false;  // the background thread is not reading: dropped
    inbox->gathered.push_back(std::move(gathered));
    return true;
  });
  m.def("set_allocator_hook", [](py::object fn) {
    if (fn.is_none()) {
      steptrace::set_allocator_stats_hook(nullptr);
      return;
    }
    auto held = keep_callable(std::move(fn));
    // Called on the step's thread when its scope ends (the GIL is held there: the scope is Python's);
    // a hook that raises is removed by the runtime (it throws through).
    steptrace::set_allocator_stats_hook([held]() -> steptrace::AllocatorStats {
      steptrace::AllocatorStats s;
      if (!Py_IsInitialized()) return s;
      py::gil_scoped_acquire gil;
      py::object r = (*held)();
      if (r.is_none()) return s;
      const py::dict d = r.cast<py::dict>();
      s.allocated_bytes = int_field(d, "allocated_bytes");
      s.reserved_bytes = int_field(d, "reserved_bytes");
      s.peak_allocated_bytes = int_field(d, "peak_allocated_bytes");
      s.peak_reserved_bytes = int_field(d, "peak_reserved_bytes");
      s.alloc_retries = int_field(d, "alloc_retries");
      s.ooms = int_field(d, "ooms");
      return s;
    });
  });
  m.attr("settings") = [] {
    py::list l;
    for (const auto& s : steptrace::settings()) l.append(py::make_tuple(s.name, s.variable, s.range, s.doc));
    return l;
  }();
}
