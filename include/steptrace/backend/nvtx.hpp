// steptrace/backend/nvtx.hpp - phase and step scopes mirrored as NVTX ranges in the "steptrace"
// domain, so Nsight Systems shows them. Phase names are registered once; a push is then one call.
#pragma once
#include "../version.hpp"
#include <array>
#include <atomic>
#include <cstdint>

#include <nvtx3/nvToolsExt.h>

#include "../core/phase.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace backend { namespace nvtx {

/// The "steptrace" domain; null when no NVTX tool is attached. NVTX's state is per binary that
/// includes it (this library's copy, nvtx3/nvtxDetail/nvtxLinkOnce.h): it loads a tool
/// (NVTX_INJECTION64_PATH, as Nsight Systems sets it) at that copy's first call, once, and with none
/// nvtxDomainCreateA returns NULL (nvtxInit.h, nvtxImplCore.h): every later push and pop through it would
/// be a no-op, so the scopes skip them (a phase scope's hot path). A tool that handles ranges but not
/// domain creation (NULL for the default domain) gets no steptrace ranges; Nsight Systems and CUPTI
/// create domains.
inline nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t handle = nvtxDomainCreateA("steptrace");
  return handle;
}

inline nvtxStringHandle_t phase_string(PhaseId id) {
  static std::array<std::atomic<nvtxStringHandle_t>, kMaxPhases> handles{};
  if (id >= kMaxPhases) return nullptr;
  nvtxStringHandle_t h = handles[id].load(std::memory_order_acquire);
  if (!h) {  // two threads may both register: NVTX returns the same handle for the same string
    h = nvtxDomainRegisterStringA(domain(), phase_name(id).c_str());
    handles[id].store(h, std::memory_order_release);
  }
  return h;
}

/// Set at the first scope that finds no tool: from then on a scope reads this one flag (constant-
/// initialized, no guard) instead of the domain. A push it skips has its pop skipped too (both no-ops).
inline std::atomic<bool>& nvtx_off() {
  static std::atomic<bool> off{false};
  return off;
}

/// The domain where a tool is attached, else null (and nvtx_off() set).
inline nvtxDomainHandle_t active_domain() noexcept {
  if (nvtx_off().load(std::memory_order_relaxed)) return nullptr;
  const nvtxDomainHandle_t d = domain();
  if (!d) nvtx_off().store(true, std::memory_order_relaxed);
  return d;
}

/// A phase range, where a tool is attached (out of line: the scope's hot path only reads the flag).
STEPTRACE_COLD inline void push_phase_attached(PhaseId id) noexcept {
  const nvtxDomainHandle_t d = active_domain();
  if (!d) return;
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = 0xFF76B900u ^ (static_cast<uint32_t>(id) * 0x00253A5Fu);
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = phase_string(id);
  nvtxDomainRangePushEx(d, &a);
}
inline void push_phase(PhaseId id) noexcept {
  if (!nvtx_off().load(std::memory_order_relaxed)) push_phase_attached(id);
}
inline void push_step(uint64_t index) noexcept {
  const nvtxDomainHandle_t d = active_domain();
  if (!d) return;
  static nvtxStringHandle_t step_string = nvtxDomainRegisterStringA(d, "step");
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = step_string;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = index;
  nvtxDomainRangePushEx(d, &a);
}

STEPTRACE_COLD inline void pop_attached() noexcept {
  if (const nvtxDomainHandle_t d = active_domain()) nvtxDomainRangePop(d);
}
inline void pop() noexcept {
  if (!nvtx_off().load(std::memory_order_relaxed)) pop_attached();
}

}} STEPTRACE_END_NAMESPACE  // steptrace::backend::nvtx
