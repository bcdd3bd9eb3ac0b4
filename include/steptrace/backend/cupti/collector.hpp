// steptrace/backend/cupti/collector.hpp - the live CUPTI client, whole: Collector's class
// (collector_decl.hpp), its hold on CUPTI (collector_attach.hpp) and what CUPTI calls
// (collector_callbacks.hpp). Include this one.
#pragma once
#include "collector_decl.hpp"
#include "collector_attach.hpp"
#include "collector_callbacks.hpp"
