// steptrace/sink/prometheus_http.hpp - a scrape endpoint (GET /metrics) served by prometheus-cpp's
// Exposer (civetweb threads, never the training thread). Built where prometheus-cpp was found
// (STEPTRACE_HAVE_PROMETHEUS_CPP, set by steptrace's CMake target); elsewhere start() says so.
#pragma once
#include "../version.hpp"
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "prometheus_metrics.hpp"

#if STEPTRACE_HAVE_PROMETHEUS_CPP
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#endif

STEPTRACE_BEGIN_NAMESPACE namespace sink {

/// What the endpoint serves at each scrape: the families and the labels every series carries.
using PromSource = std::function<void(std::vector<PromFamily>&, PromLabels&)>;

#if STEPTRACE_HAVE_PROMETHEUS_CPP
class PrometheusEndpoint {
 public:
  static constexpr bool kAvailable = true;
  /// Listens on `address` ("127.0.0.1:9464", "0.0.0.0:9464"; port 0 picks one). "" or why not.
  std::string start(const std::string& address, PromSource source) {
    stop();
    collectable_ = std::make_shared<Collectable>(std::move(source));
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
    } catch (const std::exception& e) {
      collectable_.reset();
      return "cannot listen on '" + address + "': " + e.what();
    }
    exposer_->RegisterCollectable(collectable_);
    return {};
  }
  /// The port listened on (0 when not listening).
  int port() const {
    if (!exposer_) return 0;
    const auto ports = exposer_->GetListeningPorts();
    return ports.empty() ? 0 : ports.front();
  }
  void stop() {
    exposer_.reset();  // joins the server's threads
    collectable_.reset();
  }

 private:
  class Collectable final : public prometheus::Collectable {
   public:
    explicit Collectable(PromSource source) : source_(std::move(source)) {}
    std::vector<prometheus::MetricFamily> Collect() const override {
      std::vector<PromFamily> families;
      PromLabels common;
      source_(families, common);
      std::vector<prometheus::MetricFamily> out;
      for (auto& f : families) {
        if (f.samples.empty()) continue;  // a null field: no series
        prometheus::MetricFamily m;
        m.name = f.name;
        m.help = f.help;
        m.type = f.type == "counter" ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
        for (const auto& s : f.samples) {
          prometheus::ClientMetric c;
          for (const auto& [k, v] : common) c.label.push_back({k, v});
          for (const auto& [k, v] : s.labels) c.label.push_back({k, v});
          if (f.type == "counter") c.counter.value = s.value;
          else c.gauge.value = s.value;
          m.metric.push_back(std::move(c));
        }
        out.push_back(std::move(m));
      }
      return out;
    }

   private:
    PromSource source_;
  };
  std::shared_ptr<Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};
#else
class PrometheusEndpoint {
 public:
  static constexpr bool kAvailable = false;
  std::string start(const std::string&, PromSource) {
    return "steptrace was built without prometheus-cpp (Debian: prometheus-cpp-dev; or define "
           "STEPTRACE_HAVE_PROMETHEUS_CPP=1 and link prometheus-cpp-pull)";
  }
  int port() const { return 0; }
  void stop() {}
};
#endif

} STEPTRACE_END_NAMESPACE  // steptrace::sink
