// status / result<T>, message building, error propagation; dtype names and sizes.
#include "slm/core/status.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "slm/core/dtype.hpp"
#include "test_helpers.hpp"

using slm::errc;

namespace {

slm::result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return slm::make_error(errc::invalid_argument, "'", c, "' is not a digit");
  return c - '0';
}

slm::result<int> sum_digits(std::string_view s) {
  int total = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto d = parse_digit(s[i]);
    if (!d) return std::move(d).take_error().with_context(slm::cat("at offset ", i));
    total += *d;
  }
  return total;
}

slm::status check_all(std::string_view s) {
  SLM_TRY(sum_digits(s));
  SLM_TRY(slm::status{});
  return {};
}

// SLM_TRY on an xvalue into a temporary (with_context on an rvalue returns status&&):
// the macro must hold the status by value, not bind a reference to the dying temporary.
slm::status check_with_context(std::string_view s) {
  SLM_TRY(sum_digits(s).with_context("digits"));
  SLM_TRY(check_all(s).with_context("again"));
  return {};
}

}  // namespace

TEST(Status, OkAndError) {
  slm::status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.to_string(), "ok");
  slm::status e(errc::format_error, "bad");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), errc::format_error);
  e.with_context("file.safetensors");
  EXPECT_EQ(e.message(), "file.safetensors: bad");
  EXPECT_EQ(slm::status(errc::io_error, "").to_string(), "I/O error");
  EXPECT_EQ(slm::to_string(errc::cancelled), "cancelled");
}

TEST(Status, ResultCarriesValueOrError) {
  auto r = sum_digits("123");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 6);
  auto bad = sum_digits("12x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::invalid_argument);
  EXPECT_EQ(bad.message(), "at offset 2: 'x' is not a digit");
  EXPECT_EQ(bad.value_or(-1), -1);
  EXPECT_TRUE(slm_test::fails_with(check_all("9a"), errc::invalid_argument, {"offset 1"}));
  EXPECT_TRUE(check_all("99").ok());
  // Both the result<T> and the status form keep their message through SLM_TRY.
  const slm::status ctx = check_with_context("4y");
  EXPECT_EQ(ctx.code(), errc::invalid_argument);
  EXPECT_EQ(ctx.message(), "digits: at offset 1: 'y' is not a digit");
  EXPECT_TRUE(check_with_context("42").ok());
}

TEST(Status, ResultHoldsMoveOnlyTypes) {
  slm::result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
  // An ok status is not a value: building a result from one is reported, not UB.
  slm::result<int> odd{slm::status{}};
  EXPECT_FALSE(odd.ok());
}

TEST(Status, CatFormatsNumbers) {
  EXPECT_EQ(slm::cat("a", 1, ' ', -2, " ", 2.5, " ", std::uint64_t(18446744073709551615ull), " ", true),
            "a1 -2 2.5 18446744073709551615 true");
  EXPECT_EQ(slm::cat(0.1f), "0.1");  // shortest round-trip form
}

TEST(Dtype, NamesRoundTripAndSizes) {
  for (slm::dtype t : slm::all_dtypes) {
    auto back = slm::dtype_from_safetensors_name(slm::safetensors_name(t));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(slm::dtype_from_safetensors_name("f32").has_value());  // case matters, as in the format
  EXPECT_EQ(slm::size_of(slm::dtype::bf16), 2u);
  EXPECT_EQ(slm::size_of(slm::dtype::f8_e4m3), 1u);
  EXPECT_EQ(slm::size_of(slm::dtype::c64), 8u);
  EXPECT_EQ(slm::size_of(slm::dtype::f4), 0u);
  EXPECT_EQ(slm::bits_of(slm::dtype::f4), 4u);
  EXPECT_EQ(slm::bits_of(slm::dtype::f6_e3m2), 6u);
  EXPECT_TRUE(slm::is_floating(slm::dtype::f8_e5m2));
  EXPECT_FALSE(slm::is_floating(slm::dtype::boolean));
}
