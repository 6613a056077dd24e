#include "agent/nvml_library.h"

#include <dlfcn.h>

namespace aicloud::agent {

StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& library) {
  ::dlerror();
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return UnavailableError("NVML not found: " + library + ": " + (err != nullptr ? err : "unknown dlopen error"));
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->library_ = library;
  lib->handle_ = handle;  // closed by the destructor from here on
  int (*init)() = nullptr;
  for (const auto& [symbol, found] : {std::pair{"nvmlInit_v2", lib->Resolve("nvmlInit_v2", &init)},
                                      std::pair{"nvmlShutdown", lib->Resolve("nvmlShutdown", &lib->shutdown_)}}) {
    if (!found) {
      lib->shutdown_ = nullptr;  // nothing was initialised
      return UnavailableError(std::string("NVML: ") + symbol + " missing in " + library);
    }
  }
  lib->Resolve("nvmlErrorString", &lib->error_string_);
  if (const int rc = init(); rc != 0) {
    const std::string why = lib->ErrorString(rc);
    lib->shutdown_ = nullptr;
    return UnavailableError("NVML init failed: " + why);
  }
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (shutdown_ != nullptr) shutdown_();
  if (handle_ != nullptr) ::dlclose(handle_);
}

void* NvmlLibrary::Symbol(const char* symbol) const { return ::dlsym(handle_, symbol); }

std::string NvmlLibrary::ErrorString(int rc) const {
  const char* s = error_string_ != nullptr ? error_string_(rc) : nullptr;
  return s != nullptr ? s : "NVML error " + std::to_string(rc);
}

}  // namespace aicloud::agent
