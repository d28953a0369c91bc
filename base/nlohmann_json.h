// nlohmann/json, a header-only library, from wherever the build has it;
// every file of the library that parses JSON includes it through here.
// CMake and Linux packages give <nlohmann/json.hpp>.  nlohmann/json's own
// Swift package (Package.swift takes it on hosts other than Linux) puts its
// single_include/nlohmann folder itself on the include path, so there the
// header is <json.hpp>; Package.swift defines LILIMS_JSON_FROM_SWIFTPM then.
#pragma once

#if defined(LILIMS_JSON_FROM_SWIFTPM)
#include <json.hpp>
#else
#include <nlohmann/json.hpp>
#endif
