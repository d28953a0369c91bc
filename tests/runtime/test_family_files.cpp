// Every key and tensor a family's file holds, swept on the converter-made
// files (tests/data/families): a file without one of its `{arch}.*` keys
// either loads (the key has a default, as in llama.cpp) or is refused with
// an error naming the key, or the tensor whose shape the key's default
// contradicts; a file without one of its tensors (but those the format
// makes optional, as llama.cpp does), or with one misshapen, is refused
// naming the tensor.  And the refusals the families'
// own rules add: an unknown RoPE scaling type, a window longer than the
// context, a layer pattern that does not fit the block count.
#include <functional>
#include <string>

#include "base/error.h"
#include "models/arch.h"
#include "models/gguf.h"
#include "models/model.h"
#include "test_util.h"

namespace lilims {
namespace {

const char* const kFamilies[] = {"gemma3", "qwen2", "qwen3", "llama3", "phi2", "phi3"};

std::string family_file(const std::string& name) {
  return test::source_path("tests/data/families/" + name + ".f16.gguf");
}

// The file rewritten: keys through `key` (false drops one), tensors through
// `tensor` (false drops one; it may change ne).
std::string rewrite(const std::string& from, const std::string& name,
                    const std::function<bool(gguf::KeyValue&)>& key,
                    const std::function<bool(const std::string&, std::vector<uint64_t>&)>& tensor) {
  const auto f = gguf::File::open(from);
  gguf::Writer w;
  for (gguf::KeyValue kv : f->metadata()) {
    if (kv.key == "general.alignment") continue;
    if (key(kv)) w.add(kv.key, kv.value);
  }
  for (const gguf::TensorInfo& t : f->tensors()) {
    std::vector<uint64_t> ne = t.ne;
    if (tensor(t.name, ne)) w.add_tensor(t.name, ne, t.type, t.data, t.n_bytes);
  }
  const std::string out = test::temp_path(name);
  w.write(out);
  return out;
}

// The error loading `path` gives, or "" when it loads.
std::string load_error(const std::string& path) {
  try {
    models::load_model(gguf::File::open(path));
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

auto keep_keys = [](gguf::KeyValue&) { return true; };
auto keep_tensors = [](const std::string&, std::vector<uint64_t>&) { return true; };

TEST(FamilyFiles, EveryKeyLoadsWithoutItOrIsNamed) {
  for (const char* fam : kFamilies) {
    const auto f = gguf::File::open(family_file(fam));
    const std::string arch = f->get_string("general.architecture");
    ASSERT_EQ(load_error(family_file(fam)), "") << fam;
    int dropped = 0, refused = 0;
    for (const gguf::KeyValue& kv : f->metadata()) {
      if (kv.key.rfind(arch + ".", 0) != 0) continue;
      ++dropped;
      const std::string path = rewrite(family_file(fam), std::string(fam) + "_nokey.gguf",
                                       [&](gguf::KeyValue& k) { return k.key != kv.key; }, keep_tensors);
      const std::string err = load_error(path);
      if (!err.empty()) {
        ++refused;
        EXPECT_TRUE(err.find(kv.key) != std::string::npos || err.find("[model] tensor ") != std::string::npos)
            << fam << " without " << kv.key << ": " << err;
      }
    }
    std::printf("[   info   ] %s: %d %s.* keys dropped one at a time, %d refused naming the key\n", fam, dropped,
                arch.c_str(), refused);
    EXPECT_GT(refused, 0) << fam;  // block_count and the like are required
  }
}

TEST(FamilyFiles, EveryTensorMissingOrMisshapenIsNamed) {
  for (const char* fam : kFamilies) {
    const auto f = gguf::File::open(family_file(fam));
    for (const gguf::TensorInfo& t : f->tensors()) {
      SCOPED_TRACE(std::string(fam) + " " + t.name);
      // Optional in the format: without output.weight the head is the
      // embedding (tied); without rope_freqs no Llama 3 scaling; without
      // output.bias none.  llama.cpp loads those files the same way.
      const bool optional = t.name == "output.weight" || t.name == "rope_freqs.weight" || t.name == "output.bias";
      const std::string missing = rewrite(family_file(fam), std::string(fam) + "_notensor.gguf", keep_keys,
                                          [&](const std::string& n, std::vector<uint64_t>&) { return n != t.name; });
      const std::string err = load_error(missing);
      if (!optional) {
        EXPECT_NE(err, "") << fam << " loads without " << t.name;
        EXPECT_NE(err.find(t.name), std::string::npos) << fam << " without " << t.name << ": " << err;
      } else if (!err.empty()) {
        EXPECT_NE(err.find(t.name), std::string::npos) << fam << " without " << t.name << ": " << err;
      }
      // Shapes whose bytes stay the same: rows and columns swapped (2-D,
      // when they differ), or a vector read as a 2-D (n/2, 2).
      const bool vec = t.ne.size() == 1;
      if (!vec && t.ne[0] == t.ne[1]) continue;
      if (vec && t.ne[0] % 2 != 0) continue;
      const std::string bent = rewrite(family_file(fam), std::string(fam) + "_bent.gguf", keep_keys,
                                       [&](const std::string& n, std::vector<uint64_t>& ne) {
                                         if (n == t.name) ne = vec ? std::vector<uint64_t>{ne[0] / 2, 2}
                                                                   : std::vector<uint64_t>{ne[1], ne[0]};
                                         return true;
                                       });
      const std::string e2 = load_error(bent);
      EXPECT_NE(e2.find(t.name), std::string::npos) << fam << " with " << t.name << " misshapen: " << e2;
    }
  }
}

TEST(FamilyFiles, RefusesWhatTheFamiliesCannotRun) {
  // Added keys, set through a writer pass that appends them.
  const struct {
    const char* fam;
    std::function<void(gguf::Writer&, const std::string& arch)> add;
    const char* what;
  } cases[] = {
      {"llama3", [](gguf::Writer& w, const std::string& a) { w.add_string(a + ".rope.scaling.type", "yarn"); },
       "rope.scaling.type"},
      {"gemma3", [](gguf::Writer& w, const std::string& a) { w.add_string(a + ".rope.scaling.type", "longrope"); },
       "rope.scaling.type"},
      {"qwen2", [](gguf::Writer& w, const std::string& a) { w.add_f32(a + ".rope.scaling.factor", 4.0f); },
       "rope.scaling.factor"},
      {"gemma3", [](gguf::Writer& w, const std::string& a) { w.add_u32(a + ".attention.sliding_window", 1 << 20); },
       "sliding_window"},
      {"phi3", [](gguf::Writer& w, const std::string& a) { w.add_u32(a + ".attention.sliding_window", 1 << 20); },
       "sliding_window"},
      {"gemma3",
       [](gguf::Writer& w, const std::string& a) {
         std::vector<gguf::Value> flags(5);
         for (gguf::Value& v : flags) {
           v.type = gguf::ValueType::BOOL;
           v.u = 1;
         }
         w.add(a + ".attention.sliding_window_pattern", gguf::Value::array(gguf::ValueType::BOOL, flags));
       },
       "sliding_window_pattern"},
      {"gemma3", [](gguf::Writer& w, const std::string& a) { w.add_u32(a + ".attention.sliding_window_pattern", 99); },
       "sliding_window_pattern"},
      {"qwen3", [](gguf::Writer& w, const std::string& a) { w.add_u32(a + ".attention.value_length", 16); },
       "value_length"},
  };
  for (const auto& c : cases) {
    const auto f = gguf::File::open(family_file(c.fam));
    const std::string arch = f->get_string("general.architecture");
    gguf::Writer w;
    for (const gguf::KeyValue& kv : f->metadata()) {
      if (kv.key != "general.alignment") w.add(kv.key, kv.value);
    }
    c.add(w, arch);
    for (const gguf::TensorInfo& t : f->tensors()) w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
    const std::string path = test::temp_path(std::string(c.fam) + "_refused.gguf");
    w.write(path);
    const std::string err = load_error(path);
    EXPECT_NE(err.find(c.what), std::string::npos) << c.fam << ": '" << err << "' should name " << c.what;
  }
}

}  // namespace
}  // namespace lilims
