// What the Hugging Face converters (convert_hf.cpp, hf_tokenizer.cpp,
// convert_hf_spm.cpp) share: GGUF token types, and reading a model
// directory's JSON files and chat template.
#pragma once

#include <cstdint>
#include <string>

#include "base/nlohmann_json.h"

namespace lilims::models::hf {

// GGUF token types (llama.cpp's llama_token_type); SentencePiece's piece
// types use the same numbers for normal..byte.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

// Whether path is a regular file that can be opened.
bool regular_file_exists(const std::string& path);
// The JSON in path; throws LILIMS_ERR_BAD_FORMAT naming `name` when it is not JSON.
nlohmann::json parse_json_file(const std::string& path, const char* name);
// A special token as tokenizer_config.json names it: a string or {"content": ...}; "" otherwise.
std::string token_content(const nlohmann::json& v);
// The chat template: tokenizer_config.json's chat_template (a string, or the
// "default" one of a list of named templates), else chat_template.jinja in
// dir, else "".
std::string chat_template(const std::string& dir, const nlohmann::json& tokenizer_config);

}  // namespace lilims::models::hf
