// Opening a model: from a path, from memory an app owns, or from a range of
// an open file; the memory budget checked before the weights are read, and
// the load's progress reported to a callback that may abandon it.
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/memory_info.h"
#include "models/arch.h"
#include "quant/repack.h"
#include "runtime/engine.h"
#include "runtime/manifest.h"
#include "tokenizer/chat.h"

namespace lilims::runtime {
namespace {

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; }

// The fraction of a load at which the tensors start and end: the
// tokenizer is built before them, the vocabulary's pieces after.
constexpr float kTensorsFrom = 0.05f, kTensorsTo = 0.95f;

void report(const ModelOptions& opt, float fraction) {
  if (opt.progress && opt.progress(fraction)) {
    throw Error(LILIMS_ERR_CANCELLED, "[model_open] cancelled by the progress callback");
  }
}

// A kernel type some layout holds: a load may repack it into a copy.
bool repackable_type(uint32_t t) {
  const quant::TypeTraits* tt = quant::type_traits(t);
  for (int layout = quant::kLayoutGguf + 1; tt && layout < quant::kLayoutCount; ++layout) {
    if (quant::repackable(tt->type, layout)) return true;
  }
  return false;
}

// Refuses, before anything large is allocated, what the budget (or the
// machine) cannot hold.  `already`: bytes of `need` that are resident before
// the load (an app's buffer), not asked of the machine again.
void check_model_memory(uint64_t need, uint64_t already, uint64_t budget, const std::string& what) {
  if (budget > 0) {
    if (need > budget) {
      throw Error(LILIMS_ERR_OUT_OF_MEMORY,
                  "[model_open] " + what + " needs " + std::to_string(need) + " bytes (" +
                      mib(need) + "), over the memory budget of " + std::to_string(budget) +
                      " bytes (" + mib(budget) + ")");
    }
    return;
  }
  const uint64_t avail = available_memory_bytes(), more = need > already ? need - already : 0;
  if (avail > 0 && more > avail) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY,
                "[model_open] " + what + " needs " + std::to_string(more) + " bytes (" + mib(more) +
                    ") but " + std::to_string(avail) + " bytes (" + mib(avail) +
                    ") are available");
  }
}

}  // namespace

uint64_t model_memory_estimate(const gguf::File& file, const ModelOptions& opt) {
  uint64_t need = file.file_size();
  if (opt.repack && file.image_on_heap()) {
    // The embedding is read row by row from the image, but a tied output
    // head repacks the same tensor.
    const bool tied = file.find_tensor("output.weight") == nullptr;
    for (const gguf::TensorInfo& t : file.tensors()) {
      if (t.ne.size() == 2 && repackable_type(t.type) && (tied || t.name != "token_embd.weight")) {
        need += t.n_bytes;
      }
    }
  }
  // A weight in a type lilims has no kernel for is re-quantized to a heap
  // copy (models/load.cpp), kept or repacked: either way its bytes in the
  // kernel type; a tied output head makes a second one from the embedding.
  const bool tied_out = file.find_tensor("output.weight") == nullptr;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const quant::TypeTraits* rt = quant::readable_traits(t.type);
    if (!rt || rt->load_as == rt->type || t.ne.size() != 2) continue;
    const uint64_t copy = quant::row_bytes(rt->load_as, (int64_t)t.ne[0]) * t.ne[1];
    need += (tied_out && t.name == "token_embd.weight") ? 2 * copy : copy;
  }
  // The tokenizer keeps each token's text, score and type (what the metadata
  // holds) plus per-token strings, indexes and trie nodes: measured at under
  // 1.5x the metadata bytes plus 160 bytes a token on SmolLM2 and stories260K;
  // doubled for margin.
  uint64_t n_vocab = 0;
  if (const gguf::Value* v = file.find("tokenizer.ggml.tokens")) n_vocab = v->size();
  need += 2 * (3 * file.data_offset() / 2 + 160 * n_vocab);
  return need;
}

std::unique_ptr<Model> Model::open(const std::string& path, const ModelOptions& opt) {
  report(opt, 0.0f);
  gguf::OpenOptions go;
  go.use_mmap = opt.use_mmap;
  struct stat st;
  // A read copies the whole file to the heap: refuse it before reading.
  if (!opt.use_mmap && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    check_model_memory((uint64_t)st.st_size, 0, opt.memory_budget, path);
  }
  return load(gguf::File::open(path, go), opt, false);
}

std::unique_ptr<Model> Model::open_memory(const void* data, size_t size, const ModelOptions& opt) {
  report(opt, 0.0f);
  return load(gguf::File::from_borrowed(data, size, "<memory>"), opt, true);
}

std::unique_ptr<Model> Model::open_fd(int fd, uint64_t offset, uint64_t size,
                                      const ModelOptions& opt) {
  report(opt, 0.0f);
  gguf::OpenOptions go;
  go.use_mmap = opt.use_mmap;
  struct stat st;
  if (!opt.use_mmap && fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      (uint64_t)st.st_size >= offset) {
    check_model_memory(size ? size : (uint64_t)st.st_size - offset, 0, opt.memory_budget,
                       "<fd " + std::to_string(fd) + ">");
  }
  return load(gguf::File::open_fd(fd, offset, size, go), opt, false);
}

std::unique_ptr<Model> Model::load(std::unique_ptr<gguf::File> file, const ModelOptions& opt,
                                   bool borrowed) {
  check_model_memory(model_memory_estimate(*file, opt), borrowed ? file->file_size() : 0,
                     opt.memory_budget, "the model " + file->path());
  if (!opt.manifest_path.empty()) {
    ManifestCheck check;
    check.file_hash = opt.manifest_file_hash;
    check_manifest(*file, read_manifest_file(opt.manifest_path), check);
  }
  auto m = std::unique_ptr<Model>(new Model());
  m->tokenizer_ = tok::Tokenizer::from_gguf(*file);
  if (const gguf::Value* v = file->find("tokenizer.chat_template")) {
    if (v->type == gguf::ValueType::STRING) {
      m->has_template_text_ = true;
      m->chat_template_ = tok::detect_chat_template(v->s);
      m->tool_format_ = default_tool_format(m->chat_template_, v->s);
    }
  }
  m->name_ = file->get_string_or("general.name", "");
  report(opt, kTensorsFrom);
  models::LoadOptions lo;
  lo.repack = opt.repack;
  const char* fuse = std::getenv("LILIMS_FUSE");
  lo.fuse_projections = opt.fuse_projections && !(fuse && std::strcmp(fuse, "0") == 0);
  if (opt.progress) {
    lo.progress = [&opt](float f) { report(opt, kTensorsFrom + (kTensorsTo - kTensorsFrom) * f); };
  }
  m->model_ = models::load_model(std::move(file), lo);
  if (!m->has_template_text_) {  // the family's own format, as its model cards give it
    m->chat_template_ = models::arch_desc(m->model_->hp.arch).chat_template;
    m->tool_format_ = default_tool_format(m->chat_template_, "");
  }
  m->pieces_.resize((size_t)m->tokenizer_->n_vocab());
  for (int32_t i = 0; i < m->tokenizer_->n_vocab(); ++i) {
    if (!m->tokenizer_->is_control(i)) m->pieces_[(size_t)i] = m->tokenizer_->token_to_piece(i);
  }
  m->json_closers_ = std::make_unique<JsonClosers>(m->pieces_);
  report(opt, 1.0f);
  return m;
}

}  // namespace lilims::runtime
