// safetensors: round trips through the writer, every dtype, and one test per way a
// file can be malformed or hostile, each asserting the specific error.
#include "slm/io/safetensors.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <thread>

#include "slm/io/atomic_file.hpp"

#include "test_helpers.hpp"

using slm::dtype;
using slm::errc;
using slm_test::fails_with;
using slm_test::raw_safetensors;
namespace st = slm::safetensors;

namespace {

std::span<const std::byte> span_of(const std::vector<std::byte>& v) { return {v.data(), v.size()}; }

auto parse(const std::vector<std::byte>& f) { return st::parse_header(span_of(f)); }

// A header with one tensor entry.
std::string one(std::string_view name, std::string_view dt, std::string_view shape, std::string_view offsets) {
  return slm::cat("{\"", name, "\":{\"dtype\":\"", dt, "\",\"shape\":", shape, ",\"data_offsets\":", offsets, "}}");
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  st::writer w;
  std::vector<std::vector<std::byte>> keep;
  for (dtype t : slm::all_dtypes) {
    // 12 elements fill whole bytes for every type (12 x 6 bits = 9 bytes, 12 x 4 = 6).
    const std::size_t nbytes = 12 * slm::bits_of(t) / 8;
    keep.emplace_back(nbytes);
    for (std::size_t i = 0; i < nbytes; ++i) keep.back()[i] = static_cast<std::byte>(i * 31 + static_cast<std::size_t>(t));
    ASSERT_TRUE(w.add(std::string("t_") + std::string(slm::safetensors_name(t)), t, slm::shape{3, 4}, keep.back()).ok());
  }
  w.set_metadata("format", "pt");
  w.set_metadata("note", "héllo \"quoted\"");
  auto bytes = w.serialize();
  ASSERT_TRUE(bytes.ok());
  auto f = st::file::from_memory(*bytes, "roundtrip");
  ASSERT_TRUE(f.ok()) << f.error().message();
  ASSERT_EQ(f->tensors().size(), std::size(slm::all_dtypes));
  EXPECT_EQ(*f->header().metadata_value("note"), "héllo \"quoted\"");
  EXPECT_EQ(f->header().data_offset % 8, 0u);  // the writer pads the header
  std::size_t k = 0;
  for (dtype t : slm::all_dtypes) {
    auto v = f->tensor(std::string("t_") + std::string(slm::safetensors_name(t)));
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->type(), t);
    EXPECT_EQ(v->shape(), (slm::shape{3, 4}));
    ASSERT_EQ(v->nbytes(), keep[k].size());
    EXPECT_EQ(0, std::memcmp(v->data(), keep[k].data(), keep[k].size()));
    // Written in decreasing element size: each tensor is aligned for its type.
    if (slm::size_of(t)) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v->data()) % slm::size_of(t),
                reinterpret_cast<std::uintptr_t>(bytes->data()) % slm::size_of(t));
    }
    ++k;
  }
}

TEST(Safetensors, ScalarsAndEmptyTensors) {
  const float scalar = 3.5f;
  st::writer w;
  ASSERT_TRUE(w.add("scalar", dtype::f32, slm::shape{}, std::as_bytes(std::span(&scalar, 1))).ok());
  ASSERT_TRUE(w.add("empty", dtype::bf16, slm::shape{0, 16}, {}).ok());
  auto bytes = w.serialize();
  ASSERT_TRUE(bytes.ok());
  auto f = st::file::from_memory(*bytes);
  ASSERT_TRUE(f.ok()) << f.error().message();
  auto s = f->tensor("scalar");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->rank(), 0u);
  EXPECT_EQ(s->numel(), 1);
  float out = 0;
  ASSERT_TRUE(s->to_f32(std::span(&out, 1)).ok());
  EXPECT_EQ(out, 3.5f);
  auto e = f->tensor("empty");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->nbytes(), 0u);
}

TEST(Safetensors, FileWriteAndMap) {
  slm_test::temp_dir dir("w");
  std::vector<std::uint16_t> bf16 = {0x3F80, 0xC000, 0x0000, 0x7F80};  // 1, -2, 0, inf
  st::writer w;
  ASSERT_TRUE(w.add("x", dtype::bf16, slm::shape{2, 2}, std::as_bytes(std::span(bf16))).ok());
  ASSERT_TRUE(w.write(dir / "a.safetensors").ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "a.safetensors.tmp"));
  EXPECT_TRUE(slm_test::temporaries_in(dir.path()).empty());
  auto f = st::file::open(dir / "a.safetensors");
  ASSERT_TRUE(f.ok()) << f.error().message();
  std::vector<float> v(4);
  ASSERT_TRUE(f->tensor("x")->to_f32(v).ok());
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_TRUE(std::isinf(v[3]));
  EXPECT_TRUE(fails_with(w.write(dir / "no" / "such" / "dir.safetensors"), errc::io_error, {"cannot create"}));
}

TEST(Safetensors, WriterRejectsBadInput) {
  st::writer w;
  std::vector<std::byte> four(4);
  EXPECT_TRUE(fails_with(w.add("", dtype::f32, slm::shape{1}, four), errc::invalid_argument, {"empty tensor name"}));
  EXPECT_TRUE(fails_with(w.add("__metadata__", dtype::f32, slm::shape{1}, four), errc::invalid_argument, {"reserved"}));
  EXPECT_TRUE(fails_with(w.add("a", dtype::f32, slm::shape{2}, four), errc::invalid_argument, {"needs 8 bytes, got 4"}));
  EXPECT_TRUE(fails_with(w.add("p", dtype::f4, slm::shape{3}, four), errc::format_error, {"whole number of bytes"}));
  ASSERT_TRUE(w.add("a", dtype::f32, slm::shape{1}, four).ok());
  EXPECT_TRUE(fails_with(w.add("a", dtype::f32, slm::shape{1}, four), errc::invalid_argument, {"added twice"}));
}

TEST(Safetensors, MissingAndNotAFile) {
  slm_test::temp_dir dir("m");
  EXPECT_TRUE(fails_with(st::file::open(dir / "nope.safetensors"), errc::not_found, {"nope.safetensors", "cannot open"}));
  EXPECT_TRUE(fails_with(st::file::open(dir.path()), errc::io_error, {"not a regular file"}));
  ASSERT_TRUE(slm_test::write_file(dir / "empty.safetensors", ""));
  EXPECT_TRUE(fails_with(st::file::open(dir / "empty.safetensors"), errc::format_error, {"empty.safetensors", "too short"}));
}

TEST(Safetensors, TensorNotFound) {
  auto f = raw_safetensors(one("a", "U8", "[2]", "[0,2]"), 2);
  auto file = st::file::from_memory(span_of(f), "x.safetensors");
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(fails_with(file->tensor("b"), errc::not_found, {"x.safetensors", "no tensor named 'b'"}));
}

TEST(SafetensorsMalformed, TruncatedLength) {
  EXPECT_TRUE(fails_with(parse(slm_test::bytes_of("abc")), errc::format_error, {"3 bytes", "too short"}));
}

TEST(SafetensorsMalformed, HeaderLargerThanFile) {
  auto f = raw_safetensors(one("a", "U8", "[2]", "[0,2]"), 2, /*length=*/1000);
  EXPECT_TRUE(fails_with(parse(f), errc::format_error, {"header length 1000 runs past the end"}));
}

TEST(SafetensorsMalformed, HeaderLengthAbsurd) {
  auto f = raw_safetensors("{}", 0, /*length=*/~0ull >> 1);
  EXPECT_TRUE(fails_with(parse(f), errc::format_error, {"exceeds the limit of 100000000"}));
}

TEST(SafetensorsMalformed, NotJsonObjectStart) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors("[1,2]", 0)), errc::format_error, {"does not start with '{'"}));
}

TEST(SafetensorsMalformed, InvalidJson) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"a\":", 0)), errc::parse_error, {"header JSON", "line 1"}));
}

TEST(SafetensorsMalformed, InvalidUtf8InName) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("a\xC3\x28", "U8", "[1]", "[0,1]"), 1)), errc::parse_error,
                         {"header JSON", "UTF-8"}));
}

TEST(SafetensorsMalformed, DeepNesting) {
  std::string deep = "{\"__metadata__\":" + std::string(40, '[') + std::string(40, ']') + "}";
  EXPECT_TRUE(fails_with(parse(raw_safetensors(deep, 0)), errc::out_of_range, {"header JSON", "nesting too deep", "at most 16"}));
}

TEST(SafetensorsMalformed, UnknownDtype) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "Q4_K", "[2]", "[0,2]"), 2)), errc::unsupported,
                         {"tensor 'w'", "unknown dtype \"Q4_K\""}));
}

TEST(SafetensorsMalformed, DtypeNotString) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1)),
                         errc::format_error, {"tensor 'w'", "\"dtype\" is a JSON number"}));
}

TEST(SafetensorsMalformed, MissingFields) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1)),
                         errc::format_error, {"tensor 'w'", "missing \"dtype\""}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1)),
                         errc::format_error, {"missing \"shape\""}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1)), errc::format_error,
                         {"missing \"data_offsets\""}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"w\":5}", 0)), errc::format_error, {"entry is a JSON number"}));
}

TEST(SafetensorsMalformed, BadShapes) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[-1]", "[0,0]"), 0)), errc::format_error,
                         {"shape[0] is not a non-negative integer"}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[1.5]", "[0,0]"), 0)), errc::format_error,
                         {"shape[0]"}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]"), 1)),
                         errc::unsupported, {"rank 9 exceeds"}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "{}", "[0,1]"), 1)), errc::format_error,
                         {"\"shape\" is a JSON object"}));
}

TEST(SafetensorsMalformed, AbsurdShapeOverflow) {
  // 2^40 x 2^40 elements cannot exist; the element count must not wrap around to 0.
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "F32", "[1099511627776,1099511627776]", "[0,4]"), 4)),
                         errc::out_of_range, {"tensor 'w'", "overflows"}));
  // 2^62 x F64: count fits, bytes do not.
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "F64", "[4611686018427387904]", "[0,8]"), 8)),
                         errc::out_of_range, {"tensor 'w'", "overflows"}));
  // Product that wraps 2^64 exactly: 2^32 x 2^32.
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[4294967296,4294967296]", "[0,0]"), 0)),
                         errc::out_of_range, {"overflows"}));
}

TEST(SafetensorsMalformed, SizeMismatch) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "F32", "[2,3]", "[0,20]"), 20)), errc::format_error,
                         {"tensor 'w'", "shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20) hold 20"}));
}

TEST(SafetensorsMalformed, SubByteNotWholeBytes) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "F4", "[3]", "[0,2]"), 2)), errc::format_error,
                         {"tensor 'w'", "3 elements of F4 do not fill a whole number of bytes"}));
}

TEST(SafetensorsMalformed, OffsetsBackwards) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[0]", "[4,2]"), 4)), errc::format_error,
                         {"data_offsets [4, 2) end before they begin"}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[1]", "[0]"), 1)), errc::format_error,
                         {"array of two integers"}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[1]", "[0,-1]"), 1)), errc::format_error,
                         {"non-negative integers"}));
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[8]", "[0,8]"), 4)), errc::format_error,
                         {"tensor 'w' data [0, 8) ends past the data section (4 bytes)"}));
  // Offsets near 2^64 must not wrap.
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[1]", "[18446744073709551614,18446744073709551615]"), 1)),
                         errc::format_error, {"tensor 'w' starts at 18446744073709551614"}));
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  const std::string h =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}";
  EXPECT_TRUE(fails_with(parse(raw_safetensors(h, 6)), errc::format_error,
                         {"tensor 'b' at [2, 6) overlaps tensor 'a' at [0, 4)"}));
  const std::string same =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
  EXPECT_TRUE(fails_with(parse(raw_safetensors(same, 4)), errc::format_error, {"overlaps"}));
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  const std::string h =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}";
  EXPECT_TRUE(fails_with(parse(raw_safetensors(h, 8)), errc::format_error,
                         {"tensor 'b' starts at 6, leaving a gap after tensor 'a' which ends at 4"}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[2]", "[2,4]"), 4)), errc::format_error,
                         {"leaving a gap after the header"}));
}

TEST(SafetensorsMalformed, TrailingBytes) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors(one("w", "U8", "[2]", "[0,2]"), 5)), errc::format_error,
                         {"data section holds 5 bytes but the tensors cover 2"}));
}

TEST(SafetensorsMalformed, DuplicateNames) {
  const std::string h =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
  EXPECT_TRUE(fails_with(parse(raw_safetensors(h, 2)), errc::parse_error, {"header JSON", "duplicate"}));
}

TEST(SafetensorsMalformed, MetadataNotStrings) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"__metadata__\":{\"n\":1}}", 0)), errc::format_error,
                         {"\"__metadata__\" value for \"n\" is not a string"}));
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{\"__metadata__\":[]}", 0)), errc::format_error,
                         {"\"__metadata__\" is not an object"}));
}

TEST(SafetensorsMalformed, HeaderWithTrailingGarbage) {
  EXPECT_TRUE(fails_with(parse(raw_safetensors("{} x", 0)), errc::parse_error, {"header JSON"}));
  // Space padding (what writers use to align the data section) is fine.
  EXPECT_TRUE(parse(raw_safetensors("{}      ", 0)).ok());
}

// Every prefix of a valid file is rejected cleanly, never read past its end.
TEST(SafetensorsMalformed, EveryTruncation) {
  std::vector<float> a(5, 1.0f);
  std::vector<std::int64_t> b(3, 7);
  st::writer w;
  ASSERT_TRUE(w.add("a", dtype::f32, slm::shape{5}, std::as_bytes(std::span(a))).ok());
  ASSERT_TRUE(w.add("b", dtype::i64, slm::shape{3}, std::as_bytes(std::span(b))).ok());
  auto full = w.serialize();
  ASSERT_TRUE(full.ok());
  ASSERT_TRUE(parse(*full).ok());
  for (std::size_t n = 0; n < full->size(); ++n) {
    // A heap copy of exactly n bytes, so ASan catches any read past the end.
    std::vector<std::byte> prefix(full->begin(), full->begin() + static_cast<std::ptrdiff_t>(n));
    prefix.shrink_to_fit();
    EXPECT_FALSE(parse(prefix).ok()) << "prefix of " << n << " bytes accepted";
  }
}

TEST(TensorView, TypedAccessChecksTypeAndAlignment) {
  alignas(8) std::array<std::byte, 20> buf{};
  const float one = 1.0f;
  std::memcpy(buf.data() + 1, &one, 4);
  slm::tensor_view misaligned(dtype::f32, slm::shape{1}, buf.data() + 1);
  EXPECT_TRUE(fails_with(misaligned.as<float>(), errc::invalid_argument, {"not aligned"}));
  float out = 0;
  ASSERT_TRUE(misaligned.to_f32(std::span(&out, 1)).ok());
  EXPECT_EQ(out, 1.0f);
  slm::tensor_view aligned(dtype::f32, slm::shape{2}, buf.data());
  EXPECT_TRUE(aligned.as<float>().ok());
  EXPECT_TRUE(fails_with(aligned.as<std::int32_t>(), errc::invalid_argument, {"F32"}));
  EXPECT_TRUE(aligned.as<std::uint8_t>().ok() == false);
}

TEST(TensorView, SliceTransposeReshape) {
  std::vector<float> m(12);
  std::iota(m.begin(), m.end(), 0.0f);
  slm::tensor_view v(dtype::f32, slm::shape{3, 4}, m.data());
  auto t = v.transpose(0, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->is_contiguous());
  std::vector<float> out(12);
  ASSERT_TRUE(t->to_f32(out).ok());
  EXPECT_EQ(out[1], 4.0f);  // [0,1] of the transpose = [1,0] of m
  EXPECT_EQ(out[3], 1.0f);
  auto s = v.slice(1, 1, 3);
  ASSERT_TRUE(s.ok());
  std::vector<float> so(6);
  ASSERT_TRUE(s->to_f32(so).ok());
  EXPECT_EQ(so, (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_TRUE(fails_with(v.slice(1, 2, 5), errc::out_of_range, {"slice [2, 5) of dimension 1 with size 4"}));
  EXPECT_TRUE(fails_with(v.reshape(slm::shape{5, 2}), errc::invalid_argument, {"cannot reshape [3, 4] to [5, 2]"}));
  EXPECT_TRUE(v.reshape(slm::shape{2, 6}).ok());
  EXPECT_TRUE(fails_with(t->reshape(slm::shape{12}), errc::invalid_argument, {"non-contiguous"}));
  std::vector<float> wrong(5);
  EXPECT_TRUE(fails_with(v.to_f32(wrong), errc::invalid_argument, {"holds 5 floats, tensor has 12"}));
}

TEST(TensorView, PackedFp4Decodes) {
  const std::uint8_t packed[2] = {0x21, 0xF8};  // elements: 0x1 (0.5), 0x2 (1.0), 0x8 (-0), 0xF (-6)
  slm::tensor_view v(dtype::f4, slm::shape{4}, packed);
  std::vector<float> out(4);
  ASSERT_TRUE(v.to_f32(out).ok());
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1.0f, 0.0f, -6.0f}));
  EXPECT_TRUE(std::signbit(out[2]));
  EXPECT_TRUE(fails_with(v.slice(0, 0, 2), errc::unsupported, {"packed F4"}));
}

TEST(AlignedBuffer, AllocatesAlignedOrFailsCleanly) {
  auto b = slm::aligned_buffer::allocate(1000, 128);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b->data()) % 128, 0u);
  EXPECT_EQ(b->size(), 1000u);
  EXPECT_TRUE(fails_with(slm::aligned_buffer::allocate(10, 48), errc::invalid_argument, {"alignment 48"}));
  auto empty = slm::aligned_buffer::allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
  slm::aligned_buffer moved = std::move(*b);
  EXPECT_EQ(moved.size(), 1000u);
}

TEST(AlignedBuffer, ImpossibleAllocationIsAnError) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan reports huge allocations itself";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "ASan reports huge allocations itself";
#endif
#endif
  EXPECT_TRUE(fails_with(slm::aligned_buffer::allocate(std::size_t(1) << 62), errc::out_of_memory,
                         {"cannot allocate 4611686018427387904 bytes"}));
}

// The strided path (per-element) and the contiguous path (hoisted dtype switch) of
// to_f32 decode every byte-addressable dtype the same way.
TEST(TensorView, StridedAndContiguousDecodeAgree) {
  for (dtype t : slm::all_dtypes) {
    if (slm::size_of(t) == 0 || t == dtype::c64) continue;
    SCOPED_TRACE(std::string(slm::safetensors_name(t)));
    std::vector<std::byte> raw(12 * slm::size_of(t));
    for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>((i * 37 + 11) & 0x7F);
    const slm::tensor_view v(t, slm::shape{3, 4}, raw.data());
    std::vector<float> flat(12), transposed(12);
    ASSERT_TRUE(v.to_f32(flat).ok());
    ASSERT_TRUE(v.transpose(0, 1)->to_f32(transposed).ok());
    for (std::size_t r = 0; r < 3; ++r)
      for (std::size_t c = 0; c < 4; ++c) {
        const float a = flat[r * 4 + c], b = transposed[c * 3 + r];
        EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << r << "," << c;
        const float one = slm::tensor_view::decode_f32(t, raw.data() + (r * 4 + c) * slm::size_of(t));
        EXPECT_TRUE(a == one || (std::isnan(a) && std::isnan(one))) << r << "," << c;
      }
  }
}

// plan() + begin_stream(): the header first, then each tensor's bytes in file order;
// the result equals what the in-memory writer produces from the same tensors.
TEST(Safetensors, StreamingWriterMatchesInMemoryWriter) {
  slm_test::temp_dir dir("stream");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<std::uint8_t> b = {7, 8, 9};
  std::vector<std::uint16_t> c = {0x3F80, 0x4000};
  st::writer whole, planned;
  whole.set_metadata("format", "pt");
  planned.set_metadata("format", "pt");
  ASSERT_TRUE(whole.add("a", dtype::f32, slm::shape{2, 3}, std::as_bytes(std::span(a))).ok());
  ASSERT_TRUE(whole.add("b", dtype::u8, slm::shape{3}, std::as_bytes(std::span(b))).ok());
  ASSERT_TRUE(whole.add("c", dtype::bf16, slm::shape{2}, std::as_bytes(std::span(c))).ok());
  ASSERT_TRUE(planned.plan("b", dtype::u8, slm::shape{3}).ok());
  ASSERT_TRUE(planned.plan("a", dtype::f32, slm::shape{2, 3}).ok());
  ASSERT_TRUE(planned.plan("c", dtype::bf16, slm::shape{2}).ok());
  EXPECT_TRUE(fails_with(planned.write(dir / "x.safetensors"), errc::invalid_argument, {"planned", "begin_stream"}));
  auto s = planned.begin_stream(dir / "s.safetensors");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->next_name(), "a");  // F32 first, as the reference orders dtypes
  EXPECT_TRUE(fails_with(s->append("c", std::as_bytes(std::span(c))), errc::invalid_argument, {"expected tensor 'a' next"}));
  ASSERT_TRUE(s->append("a", std::as_bytes(std::span(a))).ok());
  EXPECT_TRUE(fails_with(s->finish(), errc::invalid_argument, {"was never appended"}));
  EXPECT_TRUE(fails_with(s->append("c", std::as_bytes(std::span(c)).first(3)), errc::invalid_argument, {"needs 4 bytes, got 3"}));
  ASSERT_TRUE(s->append("c", std::as_bytes(std::span(c))).ok());
  ASSERT_TRUE(s->append("b", std::as_bytes(std::span(b))).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "s.safetensors"));
  ASSERT_TRUE(s->finish().ok());
  auto streamed = slm::mapped_file::open(dir / "s.safetensors");
  auto expect = whole.serialize();
  ASSERT_TRUE(streamed.ok() && expect.ok());
  ASSERT_EQ(streamed->size(), expect->size());
  EXPECT_EQ(0, std::memcmp(streamed->bytes().data(), expect->data(), expect->size()));
  {  // an abandoned stream leaves nothing behind
    auto t = planned.begin_stream(dir / "t.safetensors");
    ASSERT_TRUE(t.ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "t.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "t.safetensors.tmp"));
  EXPECT_TRUE(slm_test::temporaries_in(dir.path()).empty());
}

// Writers replace files through a unique temporary created exclusively (issue 18), not a
// fixed PATH.tmp: a symlink planted at PATH.tmp is neither followed nor replaced, so its
// target keeps its bytes (the old writers opened PATH.tmp with fopen "wb" and wrote
// through it).
TEST(AtomicFile, SymlinkPlantedAtTheOldTemporaryNameIsNotFollowed) {
  slm_test::temp_dir dir("planted");
  ASSERT_TRUE(slm_test::write_file(dir / "victim", "precious"));
  for (const char* name : {"a.safetensors.tmp", "s.safetensors.tmp"}) std::filesystem::create_symlink(dir / "victim", dir / name);
  std::vector<float> x = {1, 2, 3, 4};
  st::writer w;
  ASSERT_TRUE(w.add("x", dtype::f32, slm::shape{4}, std::as_bytes(std::span(x))).ok());
  ASSERT_TRUE(w.write(dir / "a.safetensors").ok());
  st::writer planned;
  ASSERT_TRUE(planned.plan("x", dtype::f32, slm::shape{4}).ok());
  auto s = planned.begin_stream(dir / "s.safetensors");
  ASSERT_TRUE(s.ok()) << s.error().message();
  ASSERT_TRUE(s->append("x", std::as_bytes(std::span(x))).ok());
  ASSERT_TRUE(s->finish().ok());
  auto victim = slm::mapped_file::open(dir / "victim");
  ASSERT_TRUE(victim.ok());
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(victim->bytes().data()), victim->size()), "precious");
  for (const char* name : {"a.safetensors", "s.safetensors"}) {
    EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(dir / name))) << name;
    auto f = st::file::open(dir / name);
    ASSERT_TRUE(f.ok()) << f.error().message();
    EXPECT_EQ(f->tensors().size(), 1u);
  }
  // Only the planted links remain, untouched.
  EXPECT_EQ(slm_test::temporaries_in(dir.path()), (std::vector<std::string>{"a.safetensors.tmp", "s.safetensors.tmp"}));
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "a.safetensors.tmp"));
}

// Two threads replacing one file over and over: every write succeeds (each has its own
// temporary), the file is always one writer's whole file, and no temporary is left. With a
// shared PATH.tmp the writers truncate and interleave each other's bytes, and the second
// rename finds no temporary and fails.
TEST(AtomicFile, ConcurrentWritersOfOnePathEachReplaceItWhole) {
  slm_test::temp_dir dir("concurrent");
  const auto path = dir / "m.safetensors";
  constexpr std::size_t n = 16384;  // 64 KiB of data per file
  std::vector<float> ones(n, 1.0f), twos(n, 2.0f);
  st::writer w1, w2;
  ASSERT_TRUE(w1.add("x", dtype::f32, slm::shape{static_cast<std::int64_t>(n)}, std::as_bytes(std::span(ones))).ok());
  ASSERT_TRUE(w2.add("x", dtype::f32, slm::shape{static_cast<std::int64_t>(n)}, std::as_bytes(std::span(twos))).ok());
  std::atomic<int> failed{0};
  std::string first_error;
  std::atomic<bool> go{false};
  auto writer_loop = [&](const st::writer& w) {
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < 8; ++i)
      if (auto r = w.write(path); !r.ok() && failed.fetch_add(1) == 0) first_error = r.message();
  };
  std::thread a(writer_loop, std::cref(w1)), b(writer_loop, std::cref(w2));
  go = true;
  a.join();
  b.join();
  EXPECT_EQ(failed.load(), 0) << first_error;
  auto f = st::file::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message();
  std::vector<float> got(n);
  ASSERT_TRUE(f->tensor("x")->to_f32(got).ok());
  EXPECT_TRUE(got == ones || got == twos);
  EXPECT_TRUE(slm_test::temporaries_in(dir.path()).empty());
}

// Every failure removes the temporary: a rename that cannot replace the target (a
// directory), a write into a missing directory, an atomic_file dropped before commit().
TEST(AtomicFile, FailuresLeaveNoTemporary) {
  slm_test::temp_dir dir("failures");
  std::filesystem::create_directories(dir / "occupied" / "inside");
  std::vector<float> x = {1, 2};
  st::writer w;
  ASSERT_TRUE(w.add("x", dtype::f32, slm::shape{2}, std::as_bytes(std::span(x))).ok());
  EXPECT_TRUE(fails_with(w.write(dir / "occupied"), errc::io_error, {"occupied", "cannot rename the temporary file into place"}));
  EXPECT_TRUE(fails_with(slm::write_file_atomically(dir / "missing" / "f.json", slm_test::bytes_of("{}")), errc::io_error,
                         {"missing", "f.json.tmp", "cannot create"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "missing"));
  {
    auto f = slm::atomic_file::create(dir / "dropped.json");
    ASSERT_TRUE(f.ok()) << f.error().message();
    ASSERT_TRUE(f->write("{\"a\": 1}").ok());
    EXPECT_TRUE(std::filesystem::exists(f->temp_path()));
    EXPECT_EQ(f->temp_path().parent_path(), dir.path());
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "dropped.json"));
  EXPECT_TRUE(slm_test::temporaries_in(dir.path()).empty());
  // Success: the whole text under the name, with the permissions asked for, nothing else.
  ASSERT_TRUE(slm::write_file_atomically(dir / "private.bin", slm_test::bytes_of("secret"), 0600).ok());
  const auto perms = std::filesystem::status(dir / "private.bin").permissions();
  EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all), std::filesystem::perms::none);
  EXPECT_EQ(std::filesystem::file_size(dir / "private.bin"), 6u);
  EXPECT_TRUE(slm_test::temporaries_in(dir.path()).empty());
}
