#include "models/arch.h"

namespace lilims::models {

// Each defined in its models/arch_*.cpp.
extern const ArchDesc kArchLlama, kArchPhi2, kArchPhi3, kArchGemma3, kArchQwen2, kArchQwen3;

const std::vector<const ArchDesc*>& all_archs() {
  static const std::vector<const ArchDesc*> kAll = {&kArchLlama, &kArchPhi2,  &kArchPhi3,
                                                    &kArchGemma3, &kArchQwen2, &kArchQwen3};
  return kAll;
}

const ArchDesc* find_arch(const std::string& gguf_name) {
  for (const ArchDesc* a : all_archs()) {
    if (gguf_name == a->name) return a;
  }
  return nullptr;
}

const ArchDesc* find_arch_by_hf_class(const std::string& hf_class) {
  for (const ArchDesc* a : all_archs()) {
    for (const std::string& c : a->hf_classes) {
      if (c == hf_class) return a;
    }
  }
  return nullptr;
}

const ArchDesc& arch_desc(Arch arch) {
  for (const ArchDesc* a : all_archs()) {
    if (a->arch == arch) return *a;
  }
  return *all_archs().front();  // every Arch has a line above
}

const char* arch_name(Arch a) { return arch_desc(a).name; }

std::string arch_list() {
  std::string s;
  for (const ArchDesc* a : all_archs()) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

}  // namespace lilims::models
