// What a template cannot make a render do, whatever it is: print a shared
// value into more than the output limit, nest expressions, values or
// recursion past its bounds, build a string or list before its size is
// checked, overflow an integer, or take a different width than jinja2
// silently. Every limit is named in its error.
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/jinja/chat_template.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> RenderWith(const std::string& source,
                                       const Limits& limits = {},
                                       Dict context = {}) {
  absl::StatusOr<ChatTemplate> chat_template =
      ChatTemplate::Create(source, limits);
  if (!chat_template.ok()) return chat_template.status();
  return chat_template->Render(Value::FromDict(std::move(context)));
}

void ExpectExhausted(const absl::StatusOr<std::string>& result,
                     const std::string& what) {
  ASSERT_FALSE(result.ok()) << result->substr(0, 200);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted)
      << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr(what));
}

std::string Repeated(const std::string& piece, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += piece;
  return out;
}

// A list holding one list twice, 40 times over, prints 2**40 times the
// leaf: refused while printing, before the text is built.
TEST(BoundsTest, PrintingASharedListStopsAtTheOutputLimit) {
  std::string doubling =
      "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}"
      "{% set ns.x = [ns.x, ns.x] %}{% endfor %}";
  ExpectExhausted(RenderWith(doubling + "{{ ns.x }}"), "max_output_bytes");
  ExpectExhausted(RenderWith(doubling + "{{ ns.x | string | length }}"),
                  "max_output_bytes");
  ExpectExhausted(RenderWith(doubling + "{{ (ns.x ~ '') | length }}"),
                  "max_output_bytes");
  ExpectExhausted(RenderWith(doubling + "{{ [ns.x] | join(',') | length }}"),
                  "max_output_bytes");
  ExpectExhausted(RenderWith(doubling + "{{ '{}'.format(ns.x) | length }}"),
                  "max_output_bytes");
  ExpectExhausted(RenderWith(doubling + "{{ ns.x | tojson | length }}"),
                  "max_output_bytes");
  ExpectExhausted(RenderWith(doubling + "{{ raise_exception(ns.x) }}"),
                  "max_output_bytes");
}

// Chains the parser builds by iterating nest as deep as recursion would:
// each is refused at Create, naming the limit.
TEST(BoundsTest, LeftNestedChainsAreBoundedAtParse) {
  const std::string chains[] = {
      "{{ 1" + Repeated(" + 1", 20000) + " }}",
      "{{ x" + Repeated(".a", 20000) + " }}",
      "{{ x" + Repeated(" | first", 20000) + " }}",
      "{{ a" + Repeated("[0]", 20000) + " }}",
      "{{ a" + Repeated(" and a", 20000) + " }}",
      "{{ f" + Repeated("()", 20000) + " }}",
      "{{ 1" + Repeated(" if 1", 1000) + " }}",
  };
  for (const std::string& source : chains) {
    absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Create(source);
    ASSERT_FALSE(chat_template.ok()) << source.substr(0, 40);
    EXPECT_EQ(chat_template.status().code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(chat_template.status().message(),
                HasSubstr("max_nesting_depth"));
  }
  // Up to the limit they parse and render.
  Limits limits;
  EXPECT_EQ(*RenderWith("{{ 1" + Repeated(" + 1", 60) + " }}", limits), "61");
}

// Values nested by a loop: refused at the value limit, never a stack
// overflow when printed, compared or freed.
TEST(BoundsTest, ValuesNestedByALoopStopAtTheValueLimit) {
  ExpectExhausted(
      RenderWith("{% set ns = namespace(x=1) %}{% for i in range(100000) %}"
                 "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
      "max_value_depth");
  ExpectExhausted(
      RenderWith("{% set ns = namespace(x=1) %}{% for i in range(100000) %}"
                 "{% set ns.x = {'a': ns.x} %}{% endfor %}"
                 "{{ ns.x == ns.x }}"),
      "max_value_depth");
  // A chain of namespaces is freed without recursion; printing it stops
  // at the value limit.
  std::string chain =
      "{% set ns = namespace(x=1) %}{% for i in range(20000) %}"
      "{% set ns.x = namespace(x=ns.x) %}{% endfor %}";
  EXPECT_EQ(*RenderWith(chain + "done"), "done");
  ExpectExhausted(RenderWith(chain + "{{ ns }}"), "max_value_depth");
  // A namespace that holds itself prints to the limit, and is freed.
  ExpectExhausted(
      RenderWith("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}"),
      "max_value_depth");
  // A bound method holds its dict: its depth counts.
  ExpectExhausted(
      RenderWith("{% set ns = namespace(x={}) %}{% for i in range(100000) %}"
                 "{% set ns.x = {'get': ns.x.get} %}{% endfor %}"),
      "max_value_depth");
  // A context nested past the limit is refused before the render.
  Value deep = Value::Int(1);
  for (int i = 0; i < 300; ++i) deep = Value::List({deep});
  Dict context;
  context.Set("deep", deep);
  ExpectExhausted(RenderWith("{{ 1 }}", Limits{}, context), "max_value_depth");
}

TEST(BoundsTest, RenderRecursionIsBoundedAsAWhole) {
  // Macro calls from deep expressions in deep statements: one bound.
  Limits limits;
  limits.max_render_depth = 40;
  ExpectExhausted(
      RenderWith("{% macro f(n) %}{% if true %}{{ f(n + 1) }}{% endif %}"
                 "{% endmacro %}{{ f(0) }}",
                 limits),
      "max_render_depth");
}

// Each builder refuses by name, before building, what would pass the
// limit.
TEST(BoundsTest, ResultsAreSizedBeforeTheyAreBuilt) {
  Limits limits;
  limits.max_output_bytes = 1000;
  Dict context;
  context.Set("s", Value::String(std::string(900, '<')));
  context.Set("words", Value::String(Repeated("a ", 400)));
  ExpectExhausted(RenderWith("{% for c in s %}{% endfor %}", limits, context),
                  "iterating a string");
  ExpectExhausted(RenderWith("{{ s | list | length }}", limits, context),
                  "iterating a string");
  ExpectExhausted(RenderWith("{{ words.split() | length }}", limits, context),
                  "str.split()");
  ExpectExhausted(
      RenderWith("{{ words.split(' ') | length }}", limits, context),
      "str.split()");
  ExpectExhausted(RenderWith("{{ s | e | length }}", limits, context),
                  "'escape' would build 3600 bytes");
  ExpectExhausted(
      RenderWith("{{ (s[:400] ~ '\\n' ~ s[:400]) | indent(300) | length }}",
                 limits, context),
      "'indent' would build 1101 bytes");
  ExpectExhausted(
      RenderWith("{{ ','.join([s, s]) | length }}", limits, context),
      "str.join() would build 1801 bytes");
  ExpectExhausted(
      RenderWith("{{ s | replace('<', 'ab') | length }}", limits, context),
      "'replace' would build 1800 bytes");
  ExpectExhausted(
      RenderWith("{{ s.replace('<', 'ab') | length }}", limits, context),
      "str.replace() would build 1800 bytes");
  ExpectExhausted(RenderWith("{{ ('ab' * 600) | length }}", limits),
                  "'*' would build 1200 bytes");
  ExpectExhausted(RenderWith("{{ range(100) | length }}", limits),
                  "range() would build 1600 bytes");
  // Repeating nothing, however often, is nothing (and takes no time).
  EXPECT_EQ(*RenderWith("[{{ '' * 9223372036854775807 }}]"
                        "{{ [] * 9223372036854775807 }}"),
            "[][]");
}

// jinja2's widths, exactly, or a refusal naming why: never a different
// prompt.
TEST(BoundsTest, IndentAndTojsonWidthsAreExact) {
  EXPECT_EQ(*RenderWith("{{ 'a\\nb' | indent(300) }}"),
            "a\n" + std::string(300, ' ') + "b");
  EXPECT_EQ(*RenderWith("{{ 'a\\nb' | indent(-2) }}"), "a\nb");
  EXPECT_EQ(*RenderWith("{{ 'a\\nb' | indent(true) }}"), "a\n b");
  EXPECT_THAT(RenderWith("{{ 'a\\nb' | indent(1.5) }}").status().message(),
              HasSubstr("non-int of type 'float'"));
  EXPECT_EQ(*RenderWith("{{ [1] | tojson(indent=100) }}"),
            "[\n" + std::string(100, ' ') + "1\n]");
  EXPECT_EQ(*RenderWith("{{ 5 | tojson(indent=9223372036854775807) }}"), "5");
  EXPECT_EQ(*RenderWith("{{ [1] | tojson(indent=-1) }}"), "[\n1\n]");
  ExpectExhausted(RenderWith("{{ [1] | tojson(indent=9223372036854775807) }}"),
                  "'tojson'");
  ExpectExhausted(RenderWith("{{ 'a\\nb' | indent(9223372036854775807) }}"),
                  "'indent'");
}

TEST(BoundsTest, IntegerEdgesAreExactOrRefused) {
  // \U with eight digits: a code point past U+10FFFF is refused.
  for (const char* escape : {"\\UFFFFFFFF", "\\U80000000", "\\U00110000"}) {
    absl::StatusOr<ChatTemplate> chat_template =
        ChatTemplate::Create(std::string("{{ '") + escape + "' }}");
    ASSERT_FALSE(chat_template.ok()) << escape;
    EXPECT_THAT(chat_template.status().message(),
                HasSubstr("escape outside Unicode scalar values"));
  }
  EXPECT_EQ(*RenderWith("{{ '\\U0001F600' }}"), "\xF0\x9F\x98\x80");
  // range() across all of int64, as Python counts it.
  EXPECT_EQ(*RenderWith("{{ range(-9223372036854775807 - 1, "
                        "9223372036854775807, 4611686018427387905) | list }}"),
            "[-9223372036854775808, -4611686018427387903, 2, "
            "4611686018427387907]");
  EXPECT_EQ(*RenderWith("{{ range(9223372036854775807, "
                        "-9223372036854775807 - 1, -9223372036854775807) "
                        "| list }}"),
            "[9223372036854775807, 0, -9223372036854775807]");
  // Slices with steps near the int64 bounds.
  EXPECT_EQ(*RenderWith("{{ [1, 2, 3][1::9223372036854775807] }}"), "[2]");
  EXPECT_EQ(*RenderWith("{{ 'abc'[::-9223372036854775807 - 1] }}"), "c");
  // INT64_MIN % -1 traps in C++; Python: divisible.
  EXPECT_EQ(*RenderWith("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}"),
            "True");
}

}  // namespace
}  // namespace castserve::text::jinja
