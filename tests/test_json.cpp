// Tests for slm/io/json.hpp: the strict RFC 8259 reader, its error messages and limits,
// exact 64-bit integers, and the writer's round trip. Built with and without exceptions.
#include "slm/io/json.hpp"
#include "slm/io/config_reader.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace {

using slm::errc;
using slm::json::dump;
using slm::json::kind;
using slm::json::parse;
using slm::json::parse_options;
using slm::json::value;

// Parses text that must be valid and returns the value (null after a failed expectation).
value ok(std::string_view text, const parse_options& opt = {}) {
  auto r = parse(text, opt);
  EXPECT_TRUE(r.ok()) << "input: " << text << "\nerror: " << r.message();
  return r.ok() ? std::move(r).value() : value();
}

// Expects `text` to fail with `code` and a message that starts "line L, column C: what".
void expect_error(std::string_view text, errc code, std::size_t line, std::size_t column, std::string_view what,
                  const parse_options& opt = {}) {
  auto r = parse(text, opt);
  ASSERT_FALSE(r.ok()) << "input: " << text << " parsed as " << dump(r.value());
  EXPECT_EQ(r.code(), code) << r.message();
  const std::string prefix = slm::cat("line ", line, ", column ", column, ": ", what);
  EXPECT_EQ(r.message().substr(0, prefix.size()), prefix) << "input: " << text;
}

void expect_parse_error(std::string_view text, std::size_t line, std::size_t column, std::string_view what) {
  expect_error(text, errc::parse_error, line, column, what);
}

std::string message_of(std::string_view text, const parse_options& opt = {}) {
  auto r = parse(text, opt);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? std::string() : r.message();
}

// parse(dump(v)) must succeed and dump the same: the writer's output is stable.
void expect_stable_dump(const value& v) {
  const std::string once = dump(v);
  auto again = parse(once);
  ASSERT_TRUE(again.ok()) << once << "\n" << again.message();
  EXPECT_EQ(dump(again.value()), once);
}

TEST(Json, KindNames) {
  EXPECT_EQ(slm::json::to_string(kind::null), "null");
  EXPECT_EQ(slm::json::to_string(kind::boolean), "boolean");
  EXPECT_EQ(slm::json::to_string(kind::number), "number");
  EXPECT_EQ(slm::json::to_string(kind::string), "string");
  EXPECT_EQ(slm::json::to_string(kind::array), "array");
  EXPECT_EQ(slm::json::to_string(kind::object), "object");
}

TEST(Json, Literals) {
  EXPECT_TRUE(ok("null").is_null());
  EXPECT_TRUE(ok("true").is_bool());
  EXPECT_TRUE(ok("true").as_bool());
  EXPECT_FALSE(ok("false").as_bool());
  EXPECT_EQ(ok("42").type(), kind::number);
  EXPECT_EQ(ok("42").as_double(), 42.0);
  EXPECT_EQ(ok("\"hi\"").as_string(), "hi");
  EXPECT_EQ(ok("[]").type(), kind::array);
  EXPECT_EQ(ok("{}").type(), kind::object);
  EXPECT_EQ(ok(" \t\r\n null \t\r\n ").type(), kind::null);
  EXPECT_TRUE(value().is_null());
}

TEST(Json, WrongKindAccessorsAreSafe) {
  const value s = ok("\"x\"");
  EXPECT_FALSE(s.as_bool());
  EXPECT_EQ(s.as_double(), 0.0);
  EXPECT_FALSE(s.as_int64().has_value());
  EXPECT_TRUE(s.items().empty());
  EXPECT_TRUE(s.members().empty());
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.find("x"), nullptr);
  EXPECT_TRUE(s["x"].is_null());
  EXPECT_TRUE(s[0].is_null());
  EXPECT_EQ(ok("1").as_string(), "");
}

TEST(Json, NestingAndAccess) {
  const value v = ok(R"({"model_type": "qwen2", "layers": [1, [2, 3], {"a": null}], "rope": {"theta": 1e6}})");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v.members()[0].key, "model_type");
  EXPECT_EQ(v.members()[1].key, "layers");
  EXPECT_EQ(v.members()[2].key, "rope");
  EXPECT_EQ(v["model_type"].as_string(), "qwen2");
  const value& layers = v["layers"];
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers.items()[0].as_int64(), 1);
  EXPECT_EQ(layers[1][1].as_int64(), 3);
  EXPECT_TRUE(layers[2].find("a") != nullptr);
  EXPECT_TRUE(layers[2]["a"].is_null());
  EXPECT_TRUE(layers[3].is_null());  // out of range
  EXPECT_EQ(v["rope"]["theta"].as_double(), 1e6);
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_TRUE(v["missing"]["deeper"].is_null());
}

TEST(Json, ConfigGetters) {
  const value v = ok(R"({"name": "m", "eps": 1e-6, "layers": 24, "tie": true, "big": 1.5})");
  EXPECT_EQ(v.get_string("name", "x"), "m");
  EXPECT_EQ(v.get_string("absent", "x"), "x");
  EXPECT_EQ(v.get_string("layers", "x"), "x");  // wrong kind
  EXPECT_EQ(v.get_double("eps", 0.0), 1e-6);
  EXPECT_EQ(v.get_double("layers", 0.0), 24.0);
  EXPECT_EQ(v.get_double("name", 7.0), 7.0);
  EXPECT_EQ(v.get_int64("layers", -1), 24);
  EXPECT_EQ(v.get_int64("big", -1), -1);  // not an integer
  EXPECT_EQ(v.get_uint64("layers", 0), 24u);
  EXPECT_TRUE(v.get_bool("tie", false));
  EXPECT_TRUE(v.get_bool("name", true));
}

TEST(Json, Escapes) {
  EXPECT_EQ(ok(R"("\" \\ \/ \b \f \n \r \t")").as_string(), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(ok(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(ok(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");  // U+1F600
  EXPECT_EQ(ok(R"("\uDBFF\uDFFF")").as_string(), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  EXPECT_EQ(ok(R"("a\u0000b")").as_string(), std::string_view("a\0b", 3));
  EXPECT_EQ(ok(R"("plain \u0120text")").as_string(), "plain \xC4\xA0text");
}

TEST(Json, EscapeErrors) {
  expect_parse_error(R"(["\x"])", 1, 3, "invalid escape");
  expect_parse_error(R"(["\'"])", 1, 3, "invalid escape");
  expect_parse_error(R"("\u12G4")", 1, 2, "invalid \\u escape");
  expect_parse_error(R"("\u12")", 1, 2, "invalid \\u escape");
  expect_parse_error("\"\\", 1, 2, "unterminated string");
  expect_parse_error(R"("\ud83d")", 1, 2, "unpaired surrogate");
  expect_parse_error(R"("\ud83dx")", 1, 2, "unpaired surrogate");
  expect_parse_error(R"("\ud83d\n")", 1, 2, "unpaired surrogate");
  expect_parse_error(R"("\ud83d\u0041")", 1, 2, "unpaired surrogate");
  expect_parse_error(R"("\ud83d\ud83d")", 1, 2, "unpaired surrogate");
  expect_parse_error(R"("ab\ude00")", 1, 4, "unpaired surrogate");
  expect_parse_error(R"("\ud83d\u12")", 1, 8, "invalid \\u escape");
  EXPECT_EQ(message_of(R"("\ude00")"),
            "line 1, column 2: unpaired surrogate (expected a high surrogate \\uD800-\\uDBFF before it, found a lone "
            "\\uDE00)");
}

TEST(Json, StringErrors) {
  expect_parse_error("\"abc", 1, 1, "unterminated string");
  expect_parse_error("[\"a\nb\"]", 1, 4, "unescaped control character in string");
  expect_parse_error("\"a\tb\"", 1, 3, "unescaped control character in string");
  expect_parse_error(std::string_view("\"a\0b\"", 5), 1, 3, "unescaped control character in string");
  expect_parse_error("\"\x1F\"", 1, 2, "unescaped control character in string");
  EXPECT_EQ(ok("\"\x7F\"").as_string(), "\x7F");  // DEL is not a control character to JSON
  expect_parse_error("'single'", 1, 1, "invalid value");
  EXPECT_EQ(message_of("\"a\x01\""),
            "line 1, column 3: unescaped control character in string (expected an escape such as \\n or \\u001F, found "
            "byte 0x01)");
}

TEST(Json, ValidUtf8) {
  EXPECT_EQ(ok("\"\xC3\xA9\"").as_string(), "\xC3\xA9");                      // U+00E9
  EXPECT_EQ(ok("\"\xC2\x80\xDF\xBF\"").as_string(), "\xC2\x80\xDF\xBF");      // 2-byte range ends
  EXPECT_EQ(ok("\"\xE0\xA0\x80\xEF\xBF\xBF\"").as_string().size(), 6u);      // U+0800, U+FFFF
  EXPECT_EQ(ok("\"\xED\x9F\xBF\xEE\x80\x80\"").as_string().size(), 6u);      // around the surrogates
  EXPECT_EQ(ok("\"\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\"").as_string().size(), 8u);  // U+10000, U+10FFFF
  EXPECT_EQ(ok("{\"\xE4\xBD\xA0\xE5\xA5\xBD\": 1}")["\xE4\xBD\xA0\xE5\xA5\xBD"].as_int64(), 1);
}

TEST(Json, InvalidUtf8) {
  expect_parse_error("\"\x80\"", 1, 2, "invalid UTF-8: stray continuation byte");
  expect_parse_error("\"a\xBF\"", 1, 3, "invalid UTF-8: stray continuation byte");
  expect_parse_error("\"\xC0\xAF\"", 1, 2, "invalid UTF-8: overlong encoding");
  expect_parse_error("\"\xC1\xBF\"", 1, 2, "invalid UTF-8: overlong encoding");
  expect_parse_error("\"\xE0\x80\xAF\"", 1, 2, "invalid UTF-8: overlong encoding");
  expect_parse_error("\"\xE0\x9F\xBF\"", 1, 2, "invalid UTF-8: overlong encoding");
  expect_parse_error("\"\xF0\x80\x80\xAF\"", 1, 2, "invalid UTF-8: overlong encoding");
  expect_parse_error("\"\xF0\x8F\xBF\xBF\"", 1, 2, "invalid UTF-8: overlong encoding");
  expect_parse_error("\"\xED\xA0\x80\"", 1, 2, "invalid UTF-8: encoded surrogate");
  expect_parse_error("\"\xED\xBF\xBF\"", 1, 2, "invalid UTF-8: encoded surrogate");
  expect_parse_error("\"\xF4\x90\x80\x80\"", 1, 2, "invalid UTF-8: code point above U+10FFFF");
  expect_parse_error("\"\xF5\x80\x80\x80\"", 1, 2, "invalid UTF-8: code point above U+10FFFF");
  expect_parse_error("\"\xF8\x88\x80\x80\x80\"", 1, 2, "invalid UTF-8: byte never used in UTF-8");
  expect_parse_error("\"\xFF\"", 1, 2, "invalid UTF-8: byte never used in UTF-8");
  expect_parse_error("\"\xC3\"", 1, 2, "invalid UTF-8: truncated sequence");
  expect_parse_error("\"\xE2\x82\"", 1, 2, "invalid UTF-8: truncated sequence");
  expect_parse_error("\"\xF0\x9F\x98\"", 1, 2, "invalid UTF-8: truncated sequence");
  expect_parse_error("\"\xE2\x82", 1, 2, "invalid UTF-8: truncated sequence");  // at end of input
  expect_parse_error("\"\xC3\x41\"", 1, 2, "invalid UTF-8: truncated sequence");
  // Outside strings no byte above 0x7F is valid JSON at all.
  expect_parse_error("[\xC3\xA9]", 1, 2, "invalid value");
  EXPECT_EQ(message_of("\"\xED\xA0\x80\""),
            "line 1, column 2: invalid UTF-8: encoded surrogate (expected a Unicode scalar value, found bytes 0xED "
            "0xA0)");
  EXPECT_EQ(message_of("\"\xE2\x82!\""),
            "line 1, column 2: invalid UTF-8: truncated sequence (expected a continuation byte, found '!')");
}

TEST(Json, ExactIntegers) {
  const value max_u = ok("18446744073709551615");
  EXPECT_TRUE(max_u.is_integer());
  EXPECT_EQ(max_u.as_uint64(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_FALSE(max_u.as_int64().has_value());
  EXPECT_EQ(max_u.as_double(), 18446744073709551615.0);

  const value min_i = ok("-9223372036854775808");
  EXPECT_EQ(min_i.as_int64(), std::numeric_limits<std::int64_t>::min());
  EXPECT_FALSE(min_i.as_uint64().has_value());
  EXPECT_EQ(ok("9223372036854775807").as_int64(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(ok("9007199254740993").as_uint64(), 9007199254740993u);  // 2^53 + 1: beyond double
  EXPECT_EQ(ok("[0, 12345678901234]")[1].as_int64(), 12345678901234);

  // Beyond the types: not exact, but still numbers.
  const value too_big = ok("18446744073709551616");
  EXPECT_FALSE(too_big.is_integer());
  EXPECT_FALSE(too_big.as_uint64().has_value());
  EXPECT_EQ(too_big.as_double(), 18446744073709551616.0);
  EXPECT_FALSE(ok("-9223372036854775809").as_int64().has_value());
  EXPECT_FALSE(ok("-1").as_uint64().has_value());
  EXPECT_EQ(ok("-0").as_int64(), 0);
  EXPECT_EQ(ok("-0").as_uint64(), 0u);
}

TEST(Json, NonIntegerLiterals) {
  EXPECT_FALSE(ok("1.5").as_int64().has_value());
  EXPECT_FALSE(ok("1.5").as_uint64().has_value());
  EXPECT_FALSE(ok("1.5").is_integer());
  EXPECT_EQ(ok("1.0").as_int64(), 1);
  EXPECT_EQ(ok("1e3").as_uint64(), 1000u);
  EXPECT_EQ(ok("-2.5e1").as_double(), -25.0);
  EXPECT_EQ(ok("-2E+2").as_int64(), -200);
  EXPECT_FALSE(ok("-2E+2").as_uint64().has_value());
  EXPECT_EQ(ok("9007199254740991.0").as_int64(), 9007199254740991);  // 2^53 - 1
  EXPECT_FALSE(ok("9007199254740992.0").as_int64().has_value());     // 2^53: not exact any more
  EXPECT_FALSE(ok("1e20").as_uint64().has_value());
  EXPECT_EQ(ok("0.1").as_double(), 0.1);
  EXPECT_EQ(ok("2.2250738585072014e-308").as_double(), std::numeric_limits<double>::min());
  EXPECT_EQ(ok("1.7976931348623157e308").as_double(), std::numeric_limits<double>::max());
  EXPECT_EQ(ok("4.9e-324").as_double(), std::numeric_limits<double>::denorm_min());
}

TEST(Json, NumberRange) {
  expect_error("1e999", errc::out_of_range, 1, 1, "number out of range: overflows a double");
  expect_error("[0, -1e999]", errc::out_of_range, 1, 5, "number out of range");
  expect_error("1.7976931348623159e308", errc::out_of_range, 1, 1, "number out of range");
  expect_error("123456789e99999999999999999999", errc::out_of_range, 1, 1, "number out of range");
  EXPECT_EQ(message_of("1e999"),
            "line 1, column 1: number out of range: overflows a double (expected a magnitude of at most "
            "1.7976931348623157e308, found '1e999')");
  // Underflow reads as a (signed) zero.
  EXPECT_EQ(ok("1e-400").as_double(), 0.0);
  EXPECT_TRUE(std::signbit(ok("-1e-400").as_double()));
  EXPECT_EQ(ok("0.0000000000000000000000000000000000000000001e-300").as_double(), 0.0);
  EXPECT_EQ(ok("0e99999").as_double(), 0.0);
}

TEST(Json, NumberSyntaxErrors) {
  expect_parse_error("01", 1, 1, "invalid number: leading zero");
  expect_parse_error("[-012]", 1, 3, "invalid number: leading zero");
  expect_parse_error("-", 1, 2, "invalid number");
  expect_parse_error("-a", 1, 2, "invalid number");
  expect_parse_error("1.", 1, 3, "invalid number");
  expect_parse_error("1.e5", 1, 3, "invalid number");
  expect_parse_error("1e", 1, 3, "invalid number");
  expect_parse_error("1e+", 1, 4, "invalid number");
  expect_parse_error(".5", 1, 1, "invalid value");
  expect_parse_error("+1", 1, 1, "invalid value");
  expect_parse_error("0x10", 1, 2, "trailing characters after the top-level value");
  expect_parse_error("NaN", 1, 1, "invalid value");
  expect_parse_error("[Infinity]", 1, 2, "invalid value");
  expect_parse_error("-Infinity", 1, 2, "invalid number");
  expect_parse_error("[1 2]", 1, 4, "unfinished array");
  EXPECT_EQ(message_of("1."), "line 1, column 3: invalid number (expected a digit after '.', found end of input)");
}

TEST(Json, SyntaxErrorsWithPositions) {
  expect_parse_error("", 1, 1, "missing value");
  expect_parse_error("  \n  ", 2, 3, "missing value");
  expect_parse_error("[1,]", 1, 3, "trailing comma in array");
  expect_parse_error("{\"a\": 1,}", 1, 8, "trailing comma in object");
  expect_parse_error("{\n  \"a\": 1,\n  \"b\": 2,\n}", 3, 9, "trailing comma in object");
  expect_parse_error("{\"a\" 1}", 1, 6, "invalid object member");
  expect_parse_error("{\"a\": 1 \"b\": 2}", 1, 9, "unfinished object");
  expect_parse_error("{1: 2}", 1, 2, "invalid object key");
  expect_parse_error("{'a': 2}", 1, 2, "invalid object key");
  expect_parse_error("{\"a\": 1, 2: 3}", 1, 10, "invalid object key");
  expect_parse_error("[1, 2", 1, 6, "unfinished array");
  expect_parse_error("{\"a\": [1, 2}", 1, 12, "unfinished array");
  expect_parse_error("[", 1, 2, "missing value");
  expect_parse_error("{", 1, 2, "invalid object key");
  expect_parse_error("{\"a\":", 1, 6, "missing value");
  expect_parse_error("[]]", 1, 3, "trailing characters after the top-level value");
  expect_parse_error("{} {}", 1, 4, "trailing characters after the top-level value");
  expect_parse_error("1 2", 1, 3, "trailing characters after the top-level value");
  expect_parse_error("[,1]", 1, 2, "invalid value");
  expect_parse_error("[1,,2]", 1, 4, "invalid value");
  expect_parse_error("tru", 1, 4, "invalid literal");
  expect_parse_error("trUe", 1, 3, "invalid literal");
  expect_parse_error("[nul]", 1, 5, "invalid literal");
  expect_parse_error("None", 1, 1, "invalid value");
  expect_parse_error("[true false]", 1, 7, "unfinished array");
  expect_parse_error("truex", 1, 5, "trailing characters after the top-level value");
  expect_parse_error("// c\n1", 1, 1, "invalid value");
  expect_parse_error("[1 /* c */]", 1, 4, "unfinished array");
  expect_parse_error("\f1", 1, 1, "invalid value");                 // form feed is not whitespace
  expect_parse_error("1\xC2\xA0", 1, 2, "trailing characters");   // nor is U+00A0
  // Columns count bytes: the two-byte é moves the error two columns.
  expect_parse_error("{\"\xC3\xA9\": x}", 1, 8, "invalid value");
  expect_parse_error("[\r\n1,\r\n]", 2, 2, "trailing comma in array");
  EXPECT_EQ(message_of("[1,]"), "line 1, column 3: trailing comma in array (expected a value after ',', found ']')");
  EXPECT_EQ(message_of("{\n \"a\" 1}"),
            "line 2, column 6: invalid object member (expected ':' after the key, found '1')");
  EXPECT_EQ(message_of("[1\n\n  x"), "line 3, column 3: unfinished array (expected ',' or ']', found 'x')");
  EXPECT_EQ(message_of("[1\n"), "line 2, column 1: unfinished array (expected ',' or ']', found end of input)");
  EXPECT_EQ(message_of("[\x01]"), "line 1, column 2: invalid value (expected a JSON value, found byte 0x01)");
}

std::string nested_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(Json, DepthLimit) {
  const value deep = ok(nested_arrays(256));
  const value* v = &deep;
  for (int level = 1; level < 256; ++level) v = &(*v)[0];
  EXPECT_TRUE(v->is_array());
  EXPECT_EQ(v->size(), 0u);
  // Copying, dumping and destroying recurse per level: fine at the limit.
  const value copy = deep;
  EXPECT_EQ(dump(copy), nested_arrays(256));
  expect_error(nested_arrays(257), errc::out_of_range, 1, 257, "nesting too deep");
  EXPECT_EQ(message_of(nested_arrays(257)),
            "line 1, column 257: nesting too deep (expected at most 256 nested arrays and objects, found '[' opening "
            "level 257)");

  // Objects count too, and a custom limit applies.
  parse_options two;
  two.max_depth = 2;
  EXPECT_TRUE(parse(R"({"a": [1]})", two).ok());
  expect_error(R"({"a": [{}]})", errc::out_of_range, 1, 8, "nesting too deep", two);
  parse_options none;
  none.max_depth = 0;
  EXPECT_TRUE(parse("1", none).ok());
  expect_error("[]", errc::out_of_range, 1, 1, "nesting too deep", none);

  // Far past the limit: rejected at the limit, without deep recursion anywhere.
  expect_error(std::string(1000000, '['), errc::out_of_range, 1, 257, "nesting too deep");
  // Siblings do not add up: depth is nesting, not count.
  std::string wide = "[";
  for (int i = 0; i < 1000; ++i) wide += i ? ",[[]]" : "[[]]";
  EXPECT_EQ(ok(wide + "]").size(), 1000u);
}

TEST(Json, SizeLimit) {
  parse_options small;
  small.max_bytes = 8;
  EXPECT_TRUE(parse("[1,2,3] ", small).ok());  // exactly 8 bytes
  auto r = parse("[1,2,3,4]", small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::out_of_range);
  EXPECT_EQ(r.message(), "input too large (expected at most 8 bytes per parse_options::max_bytes, found 9 bytes)");
}

// `[item,item,...,last]` of at least `bytes` bytes: the shapes where a value costs the
// most memory per byte of text.
std::string array_of(std::string_view item, std::size_t bytes, std::string_view last = "0") {
  std::string s = "[";
  s.reserve(bytes + item.size() + 8);
  while (s.size() < bytes) s.append(item).push_back(',');
  return s.append(last).append("]");
}

// Each hostile shape (one 40-byte value per 2 or 3 bytes of text, 256-deep nests, many
// keys) either parses or is refused with out_of_range, and the parser's own count of
// what it held never passes the budget: 32 bytes per input byte + 1 MiB by default.
// Old code held about 40 bytes per byte of "[0,0,...]" (3.7 GB for a 62 MB config.json).
TEST(Json, MemoryBudgetBoundsHostileShapes) {
  constexpr std::size_t bytes = 128u << 10;
  std::string keys = "{";
  for (std::size_t i = 0; keys.size() < bytes; ++i) keys.append("\"").append(std::to_string(i)).append("\":0,");
  keys += "\"x\":0}";
  const std::string nests = array_of(std::string(255, '[') + std::string(255, ']'), bytes);
  const std::string shapes[] = {array_of("0", bytes), array_of("[]", bytes), array_of("{}", bytes),
                                array_of("\"\"", bytes), array_of("[0]", bytes), array_of(R"(["a","b"])", bytes),
                                keys, nests};
  std::size_t refused = 0;
  for (const std::string& text : shapes) {
    slm::json::parse_stats stats;
    auto r = parse(text, {}, stats);
    EXPECT_EQ(stats.budget_bytes, 32 * text.size() + (1u << 20));
    EXPECT_LE(stats.peak_bytes, stats.budget_bytes) << text.substr(0, 40);
    EXPECT_GT(stats.peak_bytes, text.size()) << text.substr(0, 40);  // the count is no token figure
    if (!r.ok()) {
      ++refused;
      EXPECT_EQ(r.code(), errc::out_of_range);
      EXPECT_NE(r.message().find(": document needs too much memory (expected at most "), std::string::npos)
          << r.message();
    }
  }
  EXPECT_LT(refused, std::size(shapes));  // the budget is not so tight that it refuses all

  // At 8 bytes per input byte the one-value-per-two-bytes shape is refused, early.
  parse_options tight;
  tight.memory_per_input_byte = 8;
  slm::json::parse_stats stats;
  auto r = parse(shapes[0], tight, stats);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::out_of_range);
  EXPECT_EQ(stats.budget_bytes, 8 * shapes[0].size() + (1u << 20));
  EXPECT_LE(stats.peak_bytes, stats.budget_bytes);
}

TEST(Json, MemoryBudgetRefusesPastMaxMemory) {
  // 100001 numbers: their 40-byte values alone are 4 MB, from 200 KB of text.
  const std::string zeros = array_of("0", 200000);
  parse_options capped;
  capped.max_memory = 1u << 20;
  slm::json::parse_stats stats;
  auto r = parse(zeros, capped, stats);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::out_of_range);
  EXPECT_EQ(r.message().rfind("line 1, column ", 0), 0u) << r.message();
  EXPECT_NE(r.message().find(": document needs too much memory (expected at most 1048576 bytes for the parse "
                             "(parse_options: 32 per input byte + 1 MiB, at most max_memory 1048576), found "),
            std::string::npos)
      << r.message();
  EXPECT_EQ(stats.budget_bytes, 1u << 20);
  EXPECT_LE(stats.peak_bytes, 1u << 20);

  // With room, the same text parses, and the count covers at least the tree's elements.
  capped.max_memory = 16u << 20;
  capped.memory_per_input_byte = 100;
  auto roomy = parse(zeros, capped, stats);
  ASSERT_TRUE(roomy.ok()) << roomy.message();
  EXPECT_EQ(roomy->size(), 100001u);
  EXPECT_GE(stats.peak_bytes, 100001 * sizeof(value));
  EXPECT_LE(stats.peak_bytes, 16u << 20);

  // A zero budget still reads scalars and empty containers, which allocate nothing.
  parse_options none;
  none.max_memory = 0;
  EXPECT_TRUE(parse("[]", none).ok());
  EXPECT_TRUE(parse("{}", none).ok());
  EXPECT_TRUE(parse("12345", none).ok());
  EXPECT_TRUE(parse(R"("short")", none).ok());
  EXPECT_EQ(parse("[1]", none).code(), errc::out_of_range);  // elements wait on a scratch stack
  EXPECT_EQ(parse(R"({"a": 1})", none).code(), errc::out_of_range);
  EXPECT_EQ(parse(R"("a string too long for the bytes inside a std::string")", none).code(), errc::out_of_range);
}

TEST(Json, DuplicateKeys) {
  expect_parse_error(R"({"a": 1, "b": 2, "a": 3})", 1, 18, "duplicate key");
  EXPECT_EQ(message_of(R"({"a": 1, "a": 2})"),
            "line 1, column 10: duplicate key (expected unique keys in an object, found \"a\" again)");
  // Equal after decoding escapes.
  expect_parse_error(R"({"a": 1, "\u0061": 2})", 1, 10, "duplicate key");
  // The same key in different objects is fine.
  EXPECT_TRUE(parse(R"({"a": {"a": 1}, "b": {"a": 2}})").ok());
  // Long keys are shortened in the message.
  const std::string long_key(100, 'k');
  const std::string msg = message_of("{\"" + long_key + "\":1,\"" + long_key + "\":2}");
  EXPECT_NE(msg.find("found \"" + std::string(64, 'k') + "...\" again"), std::string::npos) << msg;

  parse_options lenient;
  lenient.allow_duplicate_keys = true;
  const value v = ok(R"({"a": 1, "b": 2, "a": 3})", lenient);
  EXPECT_EQ(v.size(), 3u);
  EXPECT_EQ(v["a"].as_int64(), 1);  // the first one wins
  EXPECT_EQ(v.members()[2].val.as_int64(), 3);
}

TEST(Json, DuplicateKeysInLargeObjects) {
  // Past the linear-scan size the hash index finds duplicates.
  std::string text = "{";
  for (int i = 0; i < 1000; ++i) text += slm::cat("\"key", i, "\": ", i, ",");
  std::string with_dup = text + "\"key500\": 0}";
  text.back() = '}';
  const value v = ok(text);
  EXPECT_EQ(v.size(), 1000u);
  for (int i = 0; i < 1000; i += 37) EXPECT_EQ(v[slm::cat("key", i)].as_int64(), i);
  EXPECT_EQ(v.find("key1000"), nullptr);
  const std::size_t dup_column = with_dup.rfind("\"key500\"") + 1;
  expect_parse_error(with_dup, 1, dup_column, "duplicate key");
  EXPECT_EQ(message_of(with_dup), slm::cat("line 1, column ", dup_column,
                                           ": duplicate key (expected unique keys in an object, found \"key500\" again)"));
  // Of several duplicates, the first in document order is reported.
  std::string two_dups = text;
  two_dups.back() = ',';
  two_dups += "\"key700\": 1, \"key3\": 2}";
  expect_parse_error(two_dups, 1, two_dups.rfind("\"key700\"") + 1, "duplicate key");
  // Nested big objects are checked too, and their positions survive the outer object.
  expect_parse_error("[1, {\"x\": " + with_dup + "}]", 1, dup_column + 10, "duplicate key");

  parse_options lenient;
  lenient.allow_duplicate_keys = true;
  const value l = ok(with_dup, lenient);
  EXPECT_EQ(l.size(), 1001u);
  EXPECT_EQ(l["key500"].as_int64(), 500);
}

TEST(Json, ByteOrderMark) {
  const value v = ok("\xEF\xBB\xBF{\"a\": 1}");
  EXPECT_EQ(v["a"].as_int64(), 1);
  // Columns start after the BOM.
  expect_parse_error("\xEF\xBB\xBF[1,]", 1, 3, "trailing comma in array");
  expect_parse_error("\xEF\xBB\xBF", 1, 1, "missing value");
  // Only at the very start.
  expect_parse_error(" \xEF\xBB\xBF{}", 1, 2, "invalid value");
  expect_parse_error("{}\xEF\xBB\xBF", 1, 3, "trailing characters");
  expect_parse_error("\xEF\xBB{}", 1, 1, "invalid value");
}

TEST(Json, LargeDocuments) {
  // A tokenizer-vocab-like object with 200k members (the tests also run unoptimized and
  // under sanitizers, so they stay at a few MB).
  std::string vocab = "{";
  for (int i = 0; i < 200000; ++i) vocab += slm::cat(i ? "," : "", "\"tok", i, "\":", i);
  vocab += "}";
  const value v = ok(vocab);
  ASSERT_EQ(v.size(), 200000u);
  for (int i = 0; i < 200000; i += 997) EXPECT_EQ(v[slm::cat("tok", i)].as_int64(), i);
  EXPECT_EQ(v.members()[199999].key, "tok199999");
  EXPECT_EQ(dump(v), vocab);  // already compact, so the writer reproduces it byte for byte

  // A safetensors-header-like object.
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  for (std::uint64_t i = 0; i < 20000; ++i) {
    header += slm::cat(",\"model.layers.", i, ".weight\":{\"dtype\":\"BF16\",\"shape\":[64,64],\"data_offsets\":[",
                       i * 8192, ",", i * 8192 + 8192, "]}");
  }
  header += "}";
  const value h = ok(header);
  ASSERT_EQ(h.size(), 20001u);
  EXPECT_EQ(h["__metadata__"]["format"].as_string(), "pt");
  for (std::uint64_t i = 0; i < 20000; i += 97) {
    const value& t = h[slm::cat("model.layers.", i, ".weight")];
    ASSERT_TRUE(t.is_object()) << i;
    EXPECT_EQ(t["data_offsets"][1].as_uint64(), i * 8192 + 8192);
  }
  EXPECT_EQ(dump(h), header);
}

TEST(Json, BuildAndDump) {
  value header = value::make_object();
  value& meta = header.set("__metadata__", value::make_object());
  meta.set("format", "pt");
  value& t = header.set("w", value::make_object());
  t.set("dtype", "F32");
  value& shape = t.set("shape", value::make_array());
  shape.push_back(2);
  shape.push_back(std::uint64_t{3});
  value& offsets = t.set("data_offsets", value::make_array());
  offsets.push_back(0);
  offsets.push_back(std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(dump(header),
            R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,18446744073709551615]}})");
  // set() replaces in place, keeping the order.
  header.set("__metadata__", nullptr);
  EXPECT_EQ(header.size(), 2u);
  EXPECT_EQ(header.members()[0].key, "__metadata__");
  EXPECT_TRUE(header["__metadata__"].is_null());
  expect_stable_dump(header);

  // A null value turns into the container it is used as.
  value a;
  a.push_back(true);
  a.push_back(nullptr);
  a.push_back("x");
  a.push_back(std::string("y"));
  a.push_back(std::string_view("z"));
  a.push_back(-7);
  a.push_back(0.5);
  EXPECT_EQ(dump(a), R"([true,null,"x","y","z",-7,0.5])");
  value o;
  o.set("k", 1);
  EXPECT_EQ(dump(o), R"({"k":1})");

  // Large built objects get the index too.
  value big = value::make_object();
  for (int i = 0; i < 100; ++i) big.set(slm::cat("k", i), i);
  big.set("k50", "replaced");
  EXPECT_EQ(big.size(), 100u);
  EXPECT_EQ(big["k50"].as_string(), "replaced");
  EXPECT_EQ(big["k99"].as_int64(), 99);
  EXPECT_EQ(big.members()[50].key, "k50");
}

TEST(Json, DumpNumbers) {
  EXPECT_EQ(dump(value(0.1)), "0.1");
  EXPECT_EQ(dump(value(1.0)), "1");
  EXPECT_EQ(dump(value(-0.0)), "-0");
  EXPECT_EQ(dump(value(1e300)), "1e+300");
  EXPECT_EQ(dump(value(5e-324)), "5e-324");
  EXPECT_EQ(dump(value(std::numeric_limits<double>::quiet_NaN())), "null");
  EXPECT_EQ(dump(value(std::numeric_limits<double>::infinity())), "null");
  EXPECT_EQ(dump(value(std::numeric_limits<std::int64_t>::min())), "-9223372036854775808");
  EXPECT_EQ(dump(value(std::numeric_limits<std::uint64_t>::max())), "18446744073709551615");
  EXPECT_EQ(dump(value(1.0f / 3.0f)), "0.3333333432674408");  // the float's exact double
  EXPECT_EQ(dump(ok("1.50")), "1.5");
  EXPECT_EQ(dump(ok("1E2")), "100");
  EXPECT_EQ(dump(ok("-0")), "-0");
  EXPECT_EQ(dump(ok("100000000000000000000000")), "1e+23");
  EXPECT_EQ(dump(ok("0.30000000000000004")), "0.30000000000000004");
  EXPECT_EQ(ok(dump(value(0.1 + 0.2))).as_double(), 0.1 + 0.2);
}

TEST(Json, DumpStrings) {
  EXPECT_EQ(dump(value("a\"b\\c/d")), R"("a\"b\\c/d")");
  EXPECT_EQ(dump(value("\b\f\n\r\t")), R"("\b\f\n\r\t")");
  EXPECT_EQ(dump(value(std::string_view("\x00\x01\x1F\x7F", 4))), "\"\\u0000\\u0001\\u001f\x7F\"");
  EXPECT_EQ(dump(value("caf\xC3\xA9 \xF0\x9F\x98\x80")), "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");
  // Invalid UTF-8 (only possible in built values) becomes U+FFFD, keeping the output valid.
  EXPECT_EQ(dump(value("a\xFF" "b\xC3")), "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\"");
  EXPECT_EQ(dump(value("\xED\xA0\x80")), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
  const value key = ok(R"({"\n\u0001\"": "\ud83d\ude00"})");
  EXPECT_EQ(dump(key), "{\"\\n\\u0001\\\"\":\"\xF0\x9F\x98\x80\"}");
}

TEST(Json, DumpRoundTrips) {
  const char* docs[] = {
      "null", "true", "false", "0", "-1", "3.14159", "1e-7", "-2.5E+300", "18446744073709551615",
      "-9223372036854775808", "18446744073709551616", "\"\"", "\"\\u0000\\u001f\\ud83d\\ude00\"", "[]", "{}",
      R"({"a": [1, 2, {"b": [null, true, "x"]}], "c": {"d": {}}, "": [[[]]]})",
      R"({"vocab": {"hello": 0, "\u0120world": 1, "\u00e9": 2}, "merges": ["h e", "he llo"]})",
      "[1.7976931348623157e308, 4.9e-324, -0.0, 0.1, 123456789012345680000, 1e21, 1e22]",
  };
  for (const char* doc : docs) {
    SCOPED_TRACE(doc);
    expect_stable_dump(ok(doc));
  }
}

TEST(Json, CopyAndMove) {
  const value original = ok(R"({"a": [1, "two", {"three": 3}], "b": "x"})");
  value copy = original;
  EXPECT_EQ(dump(copy), dump(original));
  copy.set("b", "changed");
  EXPECT_EQ(original["b"].as_string(), "x");

  value moved = std::move(copy);
  EXPECT_EQ(moved["b"].as_string(), "changed");

  // Assigning a part of a value to the value itself keeps the part alive.
  value tree = original;
  tree = tree["a"];
  EXPECT_EQ(dump(tree), R"([1,"two",{"three":3}])");
  tree = std::move(const_cast<value&>(tree[2]));
  EXPECT_EQ(dump(tree), R"({"three":3})");
  value& self = tree;
  tree = self;
  tree = std::move(self);
  EXPECT_EQ(dump(tree), R"({"three":3})");

  // A copied large object keeps a working index.
  value big = value::make_object();
  for (int i = 0; i < 50; ++i) big.set(slm::cat("k", i), i);
  const value big_copy = big;
  big = value();
  EXPECT_EQ(big_copy["k42"].as_int64(), 42);
}

// The one config-field reader of every family: absent and null keep the default, a
// required key must be there, and a value of the wrong type or range is refused with an
// error naming the file and the key (never read as something else).
TEST(ConfigReader, StrictFieldsNameFileAndKey) {
  auto doc = parse(R"({"n": 4096, "f": 4096.0, "neg": -1, "half": 1.5, "text": "128", "yes": true, "nul": null,
                       "big": 1099511627777, "eps": 1e-5, "act": "gelu", "list": [1, 2, 3], "bad_list": [1, -2],
                       "types": ["a", "b"], "mixed": ["a", 1]})");
  ASSERT_TRUE(doc.ok());
  const slm::config_reader r{*doc, "X config.json"};
  auto refused = [](const slm::status& st, std::string_view key, std::string_view says) {
    return st.code() == errc::format_error && st.message().find("X config.json: \"" + std::string(key) + "\" " +
                                                                std::string(says)) != std::string::npos;
  };
  std::size_t n = 7;
  EXPECT_TRUE(r.size("n", n).ok());
  EXPECT_EQ(n, 4096u);
  EXPECT_TRUE(r.size("f", n).ok());  // an integral double is a size
  EXPECT_EQ(n, 4096u);
  n = 7;
  EXPECT_TRUE(r.size("absent", n).ok());
  EXPECT_TRUE(r.size("nul", n).ok());
  EXPECT_EQ(n, 7u);  // absent and null keep the default
  EXPECT_TRUE(refused(r.size("absent", n, true), "absent", "is missing"));
  EXPECT_TRUE(refused(r.size("nul", n, true), "nul", "is missing"));
  for (const char* key : {"neg", "half", "text", "yes", "big"})
    EXPECT_TRUE(refused(r.size(key, n), key, "is not an integer in [0, 1099511627776]")) << key;
  EXPECT_TRUE(refused(r.size("n", n, false, 100), "n", "is not an integer in [0, 100]"));
  EXPECT_EQ(n, 7u);  // a refusal leaves the value alone
  EXPECT_TRUE(refused(r.positive("absent", n), "absent", "is missing"));
  auto zero = parse(R"({"z": 0})");
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(refused(slm::config_reader{*zero, "X config.json"}.positive("z", n), "z", "is 0"));

  double d = 2.0;
  float f = 3.0f;
  EXPECT_TRUE(r.number("eps", d).ok());
  EXPECT_EQ(d, 1e-5);
  EXPECT_TRUE(r.number("eps", f).ok());
  EXPECT_EQ(f, 1e-5f);
  EXPECT_TRUE(refused(r.number("text", d), "text", "is not a finite number"));
  EXPECT_TRUE(refused(r.number("absent", d, true), "absent", "is missing"));

  bool b = false;
  EXPECT_TRUE(r.boolean("yes", b).ok());
  EXPECT_TRUE(b);
  EXPECT_TRUE(refused(r.boolean("n", b), "n", "is not true or false"));

  std::string str = "default";
  EXPECT_TRUE(r.string("absent", str).ok());
  EXPECT_EQ(str, "default");
  EXPECT_TRUE(refused(r.string("n", str), "n", "is not a string"));
  EXPECT_TRUE(r.choice("act", str, {"relu", "gelu"}).ok());
  EXPECT_EQ(str, "gelu");
  EXPECT_TRUE(refused(r.choice("act", str, {"silu", "relu"}), "act", "is \"gelu\", expected one of \"silu\", \"relu\""));
  str = "silu";
  EXPECT_TRUE(r.choice("absent", str, {"silu"}).ok());  // the default stands

  std::vector<std::size_t> v;
  EXPECT_TRUE(r.sizes("list", v, true, 10).ok());
  EXPECT_EQ(v, (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_TRUE(refused(r.sizes("list", v, true, 2), "list", "holds a value that is not an integer in [0, 2]"));
  EXPECT_TRUE(refused(r.sizes("bad_list", v, true, 10), "bad_list", "holds a value"));
  EXPECT_TRUE(refused(r.sizes("n", v, true, 10), "n", "is not a list"));
  EXPECT_TRUE(refused(r.sizes("absent", v, true, 10), "absent", "is missing"));

  std::vector<std::string_view> t;
  EXPECT_TRUE(r.strings("types", 2, t).ok());
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1], "b");
  std::vector<std::string_view> u;
  EXPECT_TRUE(refused(r.strings("types", 3, u), "types", "is not a list of 3 strings (one per layer)"));
  EXPECT_TRUE(refused(r.strings("mixed", 2, u), "mixed", "holds a non-string"));
}

}  // namespace
