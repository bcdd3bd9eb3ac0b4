// An NVTX tool as Nsight Systems is one: a library NVTX itself loads at the process's first NVTX call
// (NVTX_INJECTION64_PATH) and hands its function table to (InitializeInjectionNvtx2, the injection
// interface in nvtx3/nvtxDetail/nvtxInit.h and nvtxTypes.h). It writes down the domain ranges it is
// given, as text that test_nvtx.cpp reads through nvtx_tool_log().
#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <string>

namespace {

struct Domain {
  std::string name;
};

std::mutex mu;
std::string text;
int depth = 0;

std::string domain_name(nvtxDomainHandle_t d) { return d ? reinterpret_cast<Domain*>(d)->name : "(default)"; }

nvtxDomainHandle_t NVTX_API create_domain(const char* name) {
  std::lock_guard<std::mutex> lock(mu);
  text += std::string("domain ") + name + "\n";
  return reinterpret_cast<nvtxDomainHandle_t>(new Domain{name});  // kept for the process's life
}

nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t, const char* s) {
  return reinterpret_cast<nvtxStringHandle_t>(new std::string(s));
}

int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(mu);
  std::string message = "?";
  if (a && a->messageType == NVTX_MESSAGE_TYPE_REGISTERED && a->message.registered)
    message = *reinterpret_cast<const std::string*>(a->message.registered);
  else if (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii)
    message = a->message.ascii;
  text += "push " + domain_name(d) + " " + message;
  if (a && a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64) text += " " + std::to_string(a->payload.ullValue);
  text += "\n";
  return depth++;
}

int NVTX_API pop(nvtxDomainHandle_t d) {
  std::lock_guard<std::mutex> lock(mu);
  text += "pop " + domain_name(d) + "\n";
  return --depth;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table) return 0;
  auto set = [&](unsigned int id, NvtxFunctionPointer f) {
    if (id <= size && table[id]) *table[id] = f;
  };
  set(NVTX_CBID_CORE2_DomainCreateA, reinterpret_cast<NvtxFunctionPointer>(&create_domain));
  set(NVTX_CBID_CORE2_DomainRegisterStringA, reinterpret_cast<NvtxFunctionPointer>(&register_string));
  set(NVTX_CBID_CORE2_DomainRangePushEx, reinterpret_cast<NvtxFunctionPointer>(&push));
  set(NVTX_CBID_CORE2_DomainRangePop, reinterpret_cast<NvtxFunctionPointer>(&pop));
  return 1;
}

/// What the tool was given so far, one event per line ("domain steptrace", "push steptrace forward",
/// "push steptrace step 3", "pop steptrace").
__attribute__((visibility("default"))) const char* nvtx_tool_log() {
  std::lock_guard<std::mutex> lock(mu);
  static std::string copy;
  copy = text;
  return copy.c_str();
}

}  // extern "C"
