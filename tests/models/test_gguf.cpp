// GGUF reader/writer: round trips through the writer, broken files built on
// purpose (written, then byte-patched), and the real files in ../shared/data.
#include "models/gguf.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "base/error.h"
#include "quant/quant.h"
#include "test_util.h"

namespace lilims::gguf {
namespace {

using Bytes = std::vector<uint8_t>;

Value scalar(ValueType t, int64_t i, uint64_t u = 0, double f = 0) {
  Value v;
  v.type = t;
  v.i = i;
  v.u = u;
  v.f = f;
  return v;
}
Value str(const std::string& s) {
  Value v;
  v.type = ValueType::STRING;
  v.s = s;
  return v;
}
Value array(ValueType et, std::vector<Value> items) { return Value::array(et, items); }

// Offset of the first occurrence of `needle` in `b` (fails the test if absent).
size_t find(const Bytes& b, const std::string& needle) {
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  EXPECT_NE(it, b.end()) << needle;
  return static_cast<size_t>(it - b.begin());
}
template <typename T>
void poke(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}
template <typename T>
T peek(const Bytes& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

// Where a tensor info's fields sit: after its name come n_dims, dims, type, offset.
struct InfoAt {
  size_t n_dims, dims, type, offset;
};
InfoAt tensor_info_at(const Bytes& b, const std::string& name) {
  InfoAt r;
  r.n_dims = find(b, name) + name.size();
  const uint32_t nd = peek<uint32_t>(b, r.n_dims);
  r.dims = r.n_dims + 4;
  r.type = r.dims + 8 * nd;
  r.offset = r.type + 4;
  return r;
}

// Parses and expects failure with `status` and a message containing `what`,
// from a copy and from the caller's bytes in place (the same checks).
void expect_error(const Bytes& b, lilims_status status, const std::string& what) {
  for (bool borrowed : {false, true}) {
    try {
      if (borrowed) {
        File::from_borrowed(b.data(), b.size(), "<test>");
      } else {
        File::from_bytes(b.data(), b.size());
      }
      ADD_FAILURE() << "parsed, expected an error containing '" << what << "'"
                    << (borrowed ? " (borrowed)" : "");
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), status) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("[gguf] ", 0), 0u) << e.what();
    }
  }
}

std::vector<float> iota_floats(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = scale * static_cast<float>(k) - 1.0f;
  return v;
}

// A small model-like file: a few keys and two F32 tensors of sizes that are
// not multiples of the alignment (so the padding is exercised).
Writer small_writer() {
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "a", "bc"});
  w.add_f32_array("tokenizer.ggml.scores", {0.f, -1.f, -2.f});
  w.add_string("test.key_a", "x");
  w.add_string("test.key_b", "y");
  const std::vector<float> a = iota_floats(12, 0.5f), b = iota_floats(8, 0.25f);
  w.add_tensor("t_a", {4, 3}, 0, a.data(), a.size() * 4);
  w.add_tensor("t_b", {8}, 0, b.data(), b.size() * 4);
  return w;
}

TEST(GgufWriter, RoundTripEveryValueType) {
  Writer w;
  w.set_alignment(64);
  w.add("v.u8", scalar(ValueType::UINT8, 200, 200));
  w.add("v.i8", scalar(ValueType::INT8, -100));
  w.add("v.u16", scalar(ValueType::UINT16, 60000, 60000));
  w.add("v.i16", scalar(ValueType::INT16, -30000));
  w.add_u32("v.u32", 4000000000u);
  w.add_i32("v.i32", -2000000000);
  w.add_f32("v.f32", 1.5e-5f);
  w.add_bool("v.bool", true);
  w.add_string("v.str", std::string("h\xc3\xa9llo\0x", 7));
  w.add("v.u64", scalar(ValueType::UINT64, 0, 18446744073709551615ull));
  w.add("v.i64", scalar(ValueType::INT64, -9000000000000000000ll));
  w.add("v.f64", scalar(ValueType::FLOAT64, 0, 0, 3.141592653589793));
  w.add("v.arr_u8", array(ValueType::UINT8, {scalar(ValueType::UINT8, 1, 1),
                                              scalar(ValueType::UINT8, 255, 255)}));
  w.add("v.arr_bool", array(ValueType::BOOL, {scalar(ValueType::BOOL, 0), scalar(ValueType::BOOL, 1, 1)}));
  w.add("v.arr_f64", array(ValueType::FLOAT64, {scalar(ValueType::FLOAT64, 0, 0, -2.5)}));
  w.add("v.arr_empty", array(ValueType::INT64, {}));
  w.add_i32_array("v.arr_i32", {-1, 0, 7});
  w.add_f32_array("v.arr_f32", {0.5f, -0.25f});
  w.add_string_array("v.arr_str", {"", "one", "two"});
  w.add("v.nested", array(ValueType::ARRAY, {array(ValueType::STRING, {str("a"), str("bb")}),
                                             array(ValueType::STRING, {}),
                                             array(ValueType::STRING, {str("ccc")})}));
  w.add("v.deep", array(ValueType::ARRAY,
                        {array(ValueType::ARRAY, {array(ValueType::UINT16,
                                                        {scalar(ValueType::UINT16, 9, 9)})})}));
  w.add_u32("v.replaced", 1);
  w.add_u32("v.replaced", 2);  // replaces in place

  const std::vector<float> f32 = iota_floats(40, 0.125f);
  std::vector<uint16_t> f16(64);
  for (size_t k = 0; k < f16.size(); ++k) f16[k] = static_cast<uint16_t>(0x3c00 + k);
  Bytes q8(2 * sizeof(quant::BlockQ8_0)), q4(3 * sizeof(quant::BlockQ4_0)),
      q41(sizeof(quant::BlockQ4_1));
  for (size_t k = 0; k < q8.size(); ++k) q8[k] = static_cast<uint8_t>(k * 7);
  for (size_t k = 0; k < q4.size(); ++k) q4[k] = static_cast<uint8_t>(k * 13);
  for (size_t k = 0; k < q41.size(); ++k) q41[k] = static_cast<uint8_t>(k * 3);
  w.add_tensor("f32", {5, 8}, 0, f32.data(), f32.size() * 4);
  w.add_tensor("f16", {16, 2, 2}, 1, f16.data(), f16.size() * 2);
  w.add_tensor("q8_0", {32, 2}, 8, q8.data(), q8.size());
  w.add_tensor("q4_0", {96}, 2, q4.data(), q4.size());
  w.add_tensor("q4_1", {32, 1, 1, 1}, 3, q41.data(), q41.size());

  const Bytes bytes = w.to_bytes();
  const std::string path = ::testing::TempDir() + "/lilims_gguf_roundtrip_" +
                           std::to_string(getpid()) + ".gguf";
  w.write(path);
  std::vector<std::unique_ptr<File>> files;
  files.push_back(File::from_bytes(bytes.data(), bytes.size()));
  files.push_back(File::open(path));
  OpenOptions no_mmap;
  no_mmap.use_mmap = false;
  files.push_back(File::open(path, no_mmap));
  std::remove(path.c_str());

  for (const auto& f : files) {
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->file_size(), bytes.size());
    EXPECT_EQ(f->data_offset() % 64, 0u);
    EXPECT_EQ(f->metadata().size(), 23u);
    EXPECT_EQ(f->metadata()[0].key, "general.alignment");
    EXPECT_EQ(f->get_int("general.alignment"), 64);
    EXPECT_EQ(f->find("v.u8")->type, ValueType::UINT8);
    EXPECT_EQ(f->get_int("v.u8"), 200);
    EXPECT_EQ(f->get_int("v.i8"), -100);
    EXPECT_EQ(f->find("v.i8")->type, ValueType::INT8);
    EXPECT_EQ(f->get_int("v.u16"), 60000);
    EXPECT_EQ(f->get_int("v.i16"), -30000);
    EXPECT_EQ(f->get_int("v.u32"), 4000000000ll);
    EXPECT_EQ(f->find("v.u32")->u, 4000000000ull);
    EXPECT_EQ(f->get_int("v.i32"), -2000000000);
    EXPECT_EQ(f->find("v.i32")->u, 0u);  // does not fit
    EXPECT_EQ(f->get_float("v.f32"), static_cast<double>(1.5e-5f));
    EXPECT_TRUE(f->get_bool_or("v.bool", false));
    EXPECT_EQ(f->get_string("v.str"), std::string("h\xc3\xa9llo\0x", 7));
    EXPECT_EQ(f->find("v.u64")->u, 18446744073709551615ull);
    EXPECT_EQ(f->find("v.u64")->i, 0);  // does not fit
    EXPECT_EQ(f->get_int("v.i64"), -9000000000000000000ll);
    EXPECT_EQ(f->get_float("v.f64"), 3.141592653589793);
    EXPECT_EQ(f->get_float("v.u32"), 4000000000.0);  // integers convert to float

    const Value* a = f->find("v.arr_u8");
    ASSERT_EQ(a->type, ValueType::ARRAY);
    EXPECT_EQ(a->elem_type, ValueType::UINT8);
    ASSERT_EQ(a->size(), 2u);
    EXPECT_EQ(a->at(1).u, 255u);
    EXPECT_EQ(f->find("v.arr_bool")->at(1).u, 1u);
    EXPECT_EQ(f->find("v.arr_f64")->at(0).f, -2.5);
    EXPECT_EQ(f->find("v.arr_empty")->elem_type, ValueType::INT64);
    EXPECT_TRUE(f->find("v.arr_empty")->empty());
    EXPECT_EQ(f->find("v.arr_i32")->at(0).i, -1);
    EXPECT_EQ(f->find("v.arr_i32")->at(2).i, 7);
    EXPECT_EQ(f->find("v.arr_f32")->at(1).f, -0.25);
    const Value* s = f->find("v.arr_str");
    ASSERT_EQ(s->size(), 3u);
    EXPECT_EQ(s->at(0).s, "");
    EXPECT_EQ(s->at(2).s, "two");
    const Value* n = f->find("v.nested");
    EXPECT_EQ(n->elem_type, ValueType::ARRAY);
    ASSERT_EQ(n->size(), 3u);
    EXPECT_EQ(n->at(0).elem_type, ValueType::STRING);
    ASSERT_EQ(n->at(0).size(), 2u);
    EXPECT_EQ(n->at(0).at(1).s, "bb");
    EXPECT_TRUE(n->at(1).empty());
    EXPECT_EQ(n->at(2).at(0).s, "ccc");
    EXPECT_EQ(f->find("v.deep")->at(0).at(0).at(0).u, 9u);
    EXPECT_EQ(f->get_int("v.replaced"), 2);

    ASSERT_EQ(f->tensors().size(), 5u);
    struct Expect {
      const char* name;
      std::vector<uint64_t> ne;
      uint32_t type;
      const void* data;
      size_t n_bytes;
    } expect[] = {{"f32", {5, 8}, 0, f32.data(), f32.size() * 4},
                  {"f16", {16, 2, 2}, 1, f16.data(), f16.size() * 2},
                  {"q8_0", {32, 2}, 8, q8.data(), q8.size()},
                  {"q4_0", {96}, 2, q4.data(), q4.size()},
                  {"q4_1", {32, 1, 1, 1}, 3, q41.data(), q41.size()}};
    for (size_t k = 0; k < 5; ++k) {
      const TensorInfo& t = f->tensors()[k];
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, expect[k].name);
      EXPECT_EQ(t.ne, expect[k].ne);
      EXPECT_EQ(t.type, expect[k].type);
      EXPECT_EQ(t.n_bytes, expect[k].n_bytes);
      EXPECT_EQ(t.offset % 64, 0u);
      ASSERT_NE(t.data, nullptr);
      EXPECT_EQ(std::memcmp(t.data, expect[k].data, expect[k].n_bytes), 0);
      EXPECT_EQ(&f->require_tensor(expect[k].name), &t);
    }
    EXPECT_EQ(f->find_tensor("q8_0")->n_elements, 64u);
    EXPECT_NO_THROW(f->require_readable_types());
  }
}

TEST(GgufWriter, RejectsBadInput) {
  Writer w;
  EXPECT_THROW(w.set_alignment(48), Error);
  EXPECT_THROW(w.set_alignment(0), Error);
  float x[8] = {};
  w.add_tensor("t", {8}, 0, x, sizeof x);
  EXPECT_THROW(w.add_tensor("t", {8}, 0, x, sizeof x), Error);        // duplicated
  EXPECT_THROW(w.add_tensor("u", {8}, 0, x, 16), Error);              // wrong size
  EXPECT_THROW(w.add_tensor("v", {8}, 8, x, 8), Error);               // 8 % 32 != 0
  EXPECT_THROW(w.add_tensor("w", {8}, 99, x, sizeof x), Error);       // unknown type
  EXPECT_THROW(w.add_tensor("x", {1, 1, 1, 1, 8}, 0, x, 32), Error);  // 5 dims
}

TEST(GgufReader, EmptyFileAndNoTensors) {
  expect_error({}, LILIMS_ERR_BAD_FORMAT, "truncated");
  Writer w;
  w.add_string("general.architecture", "llama");
  const Bytes b = w.to_bytes();
  auto f = File::from_bytes(b.data(), b.size());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
}

// Every prefix of a valid file (up to the end of its last tensor's data) is
// truncated somewhere: the reader must say so, never crash or read past it.
// Under ASan each prefix lives in its own exact-size heap copy.
TEST(GgufReader, EveryTruncationIsBadFormat) {
  const Bytes full = small_writer().to_bytes();
  auto f = File::from_bytes(full.data(), full.size());
  const TensorInfo& last = f->tensors().back();
  const size_t end = f->data_offset() + last.offset + last.n_bytes;
  ASSERT_LE(end, full.size());
  for (size_t len = 0; len < end; ++len) {
    const Bytes cut(full.begin(), full.begin() + len);
    try {
      File::from_bytes(cut.data(), cut.size());
      ADD_FAILURE() << "prefix of " << len << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT) << len << ": " << e.what();
    }
    // In place: the reader never reads past the caller's bytes either.
    try {
      File::from_borrowed(cut.data(), cut.size(), "<cut>");
      ADD_FAILURE() << "prefix of " << len << " bytes parsed in place";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT) << len << ": " << e.what();
    }
  }
}

TEST(GgufReader, BadMagic) {
  Bytes b = small_writer().to_bytes();
  b[0] = 'X';
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "bad magic");
}

TEST(GgufReader, Versions) {
  Bytes b = small_writer().to_bytes();
  poke<uint32_t>(b, 4, 1);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "version 1");
  poke<uint32_t>(b, 4, 4);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "unsupported GGUF version 4");
  poke<uint32_t>(b, 4, 0x03000000);  // a big-endian v3 file
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "big-endian");
  poke<uint32_t>(b, 4, 2);  // v2 has the same layout as v3 (little-endian)
  EXPECT_EQ(File::from_bytes(b.data(), b.size())->version(), 2u);
}

TEST(GgufReader, HugeCounts) {
  Bytes b = small_writer().to_bytes();
  poke<uint64_t>(b, 8, 1ull << 60);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor count");
  b = small_writer().to_bytes();
  poke<uint64_t>(b, 16, ~0ull);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "metadata count");
  // The scores array: its count sits right before the first float.
  b = small_writer().to_bytes();
  const size_t key = find(b, "tokenizer.ggml.scores");
  const size_t count_at = key + std::strlen("tokenizer.ggml.scores") + 4 + 4;
  ASSERT_EQ(peek<uint64_t>(b, count_at), 3u);
  poke<uint64_t>(b, count_at, 1ull << 62);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "array count");
}

TEST(GgufReader, StringLengthTwoToThe63) {
  Bytes b = small_writer().to_bytes();
  poke<uint64_t>(b, 24, 1ull << 63);  // length of the first key
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "string length 9223372036854775808");
  // A string value inside an array.
  b = small_writer().to_bytes();
  const size_t unk = find(b, "<unk>");
  poke<uint64_t>(b, unk - 8, 1ull << 63);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "key tokenizer.ggml.tokens");
  // A tensor name.
  b = small_writer().to_bytes();
  poke<uint64_t>(b, find(b, "t_b") - 8, ~0ull);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor name");
}

TEST(GgufReader, BadValueTypes) {
  Bytes b = small_writer().to_bytes();
  const size_t key = find(b, "llama.block_count") + std::strlen("llama.block_count");
  poke<uint32_t>(b, key, 13);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "key llama.block_count has value type 13");
  b = small_writer().to_bytes();
  const size_t arr = find(b, "tokenizer.ggml.tokens") + std::strlen("tokenizer.ggml.tokens");
  poke<uint32_t>(b, arr + 4, 77);  // element type
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "array element type 77");

  Writer w;
  w.add_bool("x.flag", true);
  b = w.to_bytes();
  b.back() = 2;
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "neither 0 nor 1");
}

TEST(GgufReader, NestingTooDeep) {
  // Hand-built: one key whose value is an array of arrays of ... 100 deep.
  Bytes b;
  auto put = [&](auto v) {
    const size_t at = b.size();
    b.resize(at + sizeof v);
    std::memcpy(b.data() + at, &v, sizeof v);
  };
  put(uint32_t{0x46554747});
  put(uint32_t{3});
  put(uint64_t{0});
  put(uint64_t{1});
  put(uint64_t{1});
  b.push_back('k');
  put(uint32_t{9});
  for (int d = 0; d < 100; ++d) {
    put(uint32_t{9});
    put(uint64_t{1});
  }
  put(uint32_t{0});
  put(uint64_t{0});
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "nested deeper");
}

TEST(GgufReader, DuplicatedKey) {
  Bytes b = small_writer().to_bytes();
  b[find(b, "test.key_b") + 9] = 'a';
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "duplicated key test.key_a");
}

TEST(GgufReader, DuplicatedTensor) {
  Bytes b = small_writer().to_bytes();
  b[find(b, "t_b") + 2] = 'a';
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "duplicated tensor name t_a");
}

TEST(GgufReader, MisalignedOffset) {
  Bytes b = small_writer().to_bytes();
  const InfoAt at = tensor_info_at(b, "t_b");
  poke<uint64_t>(b, at.offset, peek<uint64_t>(b, at.offset) + 4);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor t_b has offset 68, not a multiple of the alignment 32");
}

TEST(GgufReader, OffsetPastTheEnd) {
  Bytes b = small_writer().to_bytes();
  const InfoAt at = tensor_info_at(b, "t_b");
  poke<uint64_t>(b, at.offset, 1024);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor t_b data [1024, +32) runs past the end");
  poke<uint64_t>(b, at.offset, ~0ull - 31);  // aligned, and offset + size overflows
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "runs past the end");
}

TEST(GgufReader, TensorSizeOverflow) {
  Bytes b = small_writer().to_bytes();
  const InfoAt at = tensor_info_at(b, "t_a");
  poke<uint64_t>(b, at.dims, 1ull << 40);
  poke<uint64_t>(b, at.dims + 8, 1ull << 40);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor t_a: element count overflows");
  // Elements fit in int64, bytes (x4 for F32) do not.
  poke<uint64_t>(b, at.dims, 1ull << 31);
  poke<uint64_t>(b, at.dims + 8, 1ull << 31);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor t_a: byte size overflows");
  // A dimension that is negative as int64 (as ggml reads it).
  poke<uint64_t>(b, at.dims, 1ull << 63);
  poke<uint64_t>(b, at.dims + 8, 1);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "element count overflows");
}

TEST(GgufReader, DimensionsAndZeroSize) {
  Bytes b = small_writer().to_bytes();
  InfoAt at = tensor_info_at(b, "t_a");
  poke<uint32_t>(b, at.n_dims, 5);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor t_a has 5 dimensions");
  poke<uint32_t>(b, at.n_dims, 0);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor t_a has 0 dimensions");
  // A zero-size dimension is a valid empty tensor.
  b = small_writer().to_bytes();
  at = tensor_info_at(b, "t_a");
  poke<uint64_t>(b, at.dims + 8, 0);
  auto f = File::from_bytes(b.data(), b.size());
  EXPECT_EQ(f->find_tensor("t_a")->n_elements, 0u);
  EXPECT_EQ(f->find_tensor("t_a")->n_bytes, 0u);
}

TEST(GgufReader, RowNotAMultipleOfTheBlock) {
  Writer w;
  Bytes q8(sizeof(quant::BlockQ8_0) * 2);
  w.add_tensor("q", {32, 2}, 8, q8.data(), q8.size());
  Bytes b = w.to_bytes();
  const InfoAt at = tensor_info_at(b, "q");
  poke<uint64_t>(b, at.dims, 33);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "row length 33 is not a multiple of the Q8_0 block size 32");
}

TEST(GgufReader, UnknownTypeIdIsBadFormat) {
  Bytes b = small_writer().to_bytes();
  const InfoAt at = tensor_info_at(b, "t_b");
  poke<uint32_t>(b, at.type, 1234);
  expect_error(b, LILIMS_ERR_BAD_FORMAT, "tensor t_b has type id 1234, which is not a GGML type");
}

TEST(GgufReader, Alignment) {
  for (uint32_t a : {0u, 48u, 3u}) {
    Writer w;
    w.add_u32("general.alignment", a);  // bypasses set_alignment's check
    const Bytes b = w.to_bytes();
    expect_error(b, LILIMS_ERR_BAD_FORMAT, "general.alignment must be a power of two");
  }
  Writer w;
  w.add_string("general.alignment", "32");
  expect_error(w.to_bytes(), LILIMS_ERR_BAD_FORMAT, "general.alignment");
}

TEST(GgufReader, UnsupportedTypeIsNamed) {
  Writer w;
  const std::vector<float> norm(256, 1.0f);
  const Bytes iq2(66, 0x11);  // one IQ2_XXS block: 256 elements
  w.add_tensor("blk.0.attn_norm.weight", {256}, 0, norm.data(), norm.size() * 4);
  w.add_tensor("blk.0.ffn_down.weight", {256}, 16, iq2.data(), iq2.size());
  const Bytes b = w.to_bytes();
  auto f = File::from_bytes(b.data(), b.size());  // parses: the type is known to GGML
  const TensorInfo* t = f->find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, 16u);
  EXPECT_EQ(t->data, nullptr);
  EXPECT_EQ(t->n_bytes, 0u);
  EXPECT_EQ(t->n_elements, 256u);
  const std::string msg =
      "[gguf] tensor blk.0.ffn_down.weight has type IQ2_XXS, which lilims does not support yet";
  for (int k = 0; k < 2; ++k) {
    try {
      if (k == 0) f->require_readable_types();
      else f->require_tensor("blk.0.ffn_down.weight");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_UNSUPPORTED);
      EXPECT_EQ(std::string(e.what()), msg);
    }
  }
  EXPECT_NE(f->require_tensor("blk.0.attn_norm.weight").data, nullptr);
}

TEST(GgufReader, MissingAndWrongType) {
  const Bytes b = small_writer().to_bytes();
  auto f = File::from_bytes(b.data(), b.size());
  auto expect = [](const std::function<void()>& fn, lilims_status st, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), st) << e.what();
      EXPECT_EQ(std::string(e.what()), what);
    }
  };
  expect([&] { f->get_int("llama.context_length"); }, LILIMS_ERR_MISSING,
         "[gguf] missing required key llama.context_length");
  expect([&] { f->get_string("x.y"); }, LILIMS_ERR_MISSING, "[gguf] missing required key x.y");
  expect([&] { f->get_float("x.y"); }, LILIMS_ERR_MISSING, "[gguf] missing required key x.y");
  expect([&] { f->require_tensor("output.weight"); }, LILIMS_ERR_MISSING,
         "[gguf] missing required tensor output.weight");
  expect([&] { f->get_int("general.architecture"); }, LILIMS_ERR_BAD_FORMAT,
         "[gguf] key general.architecture has type STRING, expected an integer");
  expect([&] { f->get_string("llama.block_count"); }, LILIMS_ERR_BAD_FORMAT,
         "[gguf] key llama.block_count has type UINT32, expected a string");
  expect([&] { f->get_float_or("tokenizer.ggml.scores", 0); }, LILIMS_ERR_BAD_FORMAT,
         "[gguf] key tokenizer.ggml.scores has type ARRAY of FLOAT32, expected a number");
  expect([&] { f->get_bool_or("llama.block_count", false); }, LILIMS_ERR_BAD_FORMAT,
         "[gguf] key llama.block_count has type UINT32, expected a bool");
  EXPECT_EQ(f->get_int_or("llama.context_length", 77), 77);
  EXPECT_EQ(f->get_int_or("llama.block_count", 77), 1);
  EXPECT_EQ(f->get_float_or("x", 0.5), 0.5);
  EXPECT_EQ(f->get_string_or("x", "d"), "d");
  EXPECT_TRUE(f->get_bool_or("x", true));
  EXPECT_EQ(f->find("x"), nullptr);
  EXPECT_EQ(f->find_tensor("x"), nullptr);
}

TEST(GgufReader, IoErrors) {
  try {
    File::open("/nonexistent/lilims.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_IO);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/lilims.gguf"), std::string::npos);
  }
  try {
    File::open(::testing::TempDir());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_IO) << e.what();
  }
}

// --- the real files in ../shared/data ------------------------------------

TEST(GgufRealFiles, Stories260K) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  const std::string bin = test::shared_data("stories260K/stories260K.bin");
  LILIMS_REQUIRE_FILE(path, "karpathy/tinyllamas stories260K, see SOURCES.md");
  for (bool mm : {true, false}) {
    OpenOptions opt;
    opt.use_mmap = mm;
    auto f = File::open(path, opt);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->metadata().size(), 19u);
    EXPECT_EQ(f->tensors().size(), 48u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->data_offset(), 14176u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f->get_int("llama.embedding_length"), 64);
    EXPECT_EQ(f->get_int("llama.block_count"), 5);
    EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 4);
    EXPECT_EQ(f->get_int("tokenizer.ggml.seperator_token_id"), 4294967295ll);
    EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
    const Value* tokens = f->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    ASSERT_EQ(tokens->size(), 512u);
    EXPECT_EQ(tokens->at(0).s, "<unk>");
    EXPECT_EQ(tokens->at(3).s, "<0x00>");
    EXPECT_EQ(tokens->at(259).s, "\xe2\x96\x81t");  // "▁t"
    EXPECT_EQ(f->find("tokenizer.ggml.token_type")->at(0).i, 2);
    const TensorInfo& emb = f->require_tensor("token_embd.weight");
    EXPECT_EQ(emb.ne, (std::vector<uint64_t>{64, 512}));
    EXPECT_EQ(emb.type, 0u);
    EXPECT_EQ(emb.n_bytes, 64u * 512 * 4);
    EXPECT_EQ(f->require_tensor("blk.4.ffn_down.weight").ne, (std::vector<uint64_t>{172, 64}));
    f->require_readable_types();
    if (test::file_exists(bin)) {  // the embedding is the first array of the llama2.c file
      const std::string raw = test::read_file(bin);
      ASSERT_GE(raw.size(), 28 + emb.n_bytes);
      EXPECT_EQ(std::memcmp(emb.data, raw.data() + 28, emb.n_bytes), 0);
    }
  }
}

TEST(GgufRealFiles, TinyRandomLlama2) {
  const std::string path = test::shared_data("tiny-gguf/llama-2-tiny-random.gguf");
  LILIMS_REQUIRE_FILE(path, "see tiny-gguf/llama-2-tiny-random.README.md");
  auto f = File::open(path);
  EXPECT_EQ(f->metadata().size(), 18u);
  EXPECT_EQ(f->tensors().size(), 12u);
  EXPECT_EQ(f->data_offset(), 724416u);
  EXPECT_EQ(f->get_int("general.file_type"), 1);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 8);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->size(), 32000u);
  const TensorInfo& emb = f->require_tensor("token_embd.weight");
  EXPECT_EQ(emb.type, 1u);  // F16
  EXPECT_EQ(emb.n_bytes, 512000u);
  EXPECT_EQ(f->data_offset() + emb.offset, 724416u);
  EXPECT_EQ(f->data_offset() + f->require_tensor("output.weight").offset, 1238560u);
  EXPECT_EQ(f->require_tensor("blk.0.attn_norm.weight").type, 0u);
}

TEST(GgufRealFiles, VocabOnly) {
  const std::string path = test::shared_data("vocab/ggml-vocab-llama-spm.gguf");
  LILIMS_REQUIRE_FILE(path, "llama.cpp models/ggml-vocab-*.gguf, see SOURCES.md");
  auto f = File::open(path);
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(f->metadata().size(), 22u);
  EXPECT_EQ(f->get_string("general.name"), "llama-spm");
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->size(), 32000u);
  EXPECT_EQ(f->find("tokenizer.ggml.scores")->elem_type, ValueType::FLOAT32);
  EXPECT_TRUE(f->get_bool_or("tokenizer.ggml.add_bos_token", false));
  EXPECT_FALSE(f->get_bool_or("tokenizer.ggml.add_eos_token", true));
  // Every collected vocab file parses.
  for (const char* name : {"baichuan", "bert-bge", "deepseek-coder", "deepseek-llm", "falcon",
                           "gpt-2", "gpt-neox", "mpt", "phi-3", "refact", "starcoder"}) {
    const std::string p = test::shared_data(std::string("vocab/ggml-vocab-") + name + ".gguf");
    if (!test::file_exists(p)) continue;
    SCOPED_TRACE(p);
    auto v = File::open(p);
    EXPECT_GT(v->find("tokenizer.ggml.tokens")->size(), 0u);
  }
}

}  // namespace
}  // namespace lilims::gguf
