// ChatTemplate's contract beyond parity with jinja2 (parity_test.cc):
// unsupported constructs refused at Create with their position, every
// limit enforced and named, raise_exception's message, the injected
// clock, concurrent renders.
#include "text/jinja/chat_template.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/civil_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {
namespace {

using ::testing::HasSubstr;

Value Context(Dict dict = {}) { return Value::FromDict(std::move(dict)); }

absl::StatusOr<std::string> RenderWith(const std::string& source,
                                       const Limits& limits = {},
                                       Value context = Context()) {
  absl::StatusOr<ChatTemplate> chat_template =
      ChatTemplate::Create(source, limits);
  if (!chat_template.ok()) return chat_template.status();
  return chat_template->Render(context);
}

void ExpectRefusedAtLoad(const std::string& source, const std::string& what) {
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Create(source);
  ASSERT_FALSE(chat_template.ok()) << source;
  EXPECT_EQ(chat_template.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(chat_template.status().message(), HasSubstr(what)) << source;
}

TEST(ChatTemplateTest, RefusesUnsupportedConstructsAtLoadNamingThem) {
  ExpectRefusedAtLoad("ab\n  {% include 'other.jinja' %}",
                      "unsupported construct 'include' statement at line 2, "
                      "column 6");
  ExpectRefusedAtLoad("{% extends 'base' %}", "'extends' statement");
  ExpectRefusedAtLoad("{% call m() %}x{% endcall %}", "'call' statement");
  ExpectRefusedAtLoad("{% filter upper %}x{% endfilter %}",
                      "'filter' statement");
  ExpectRefusedAtLoad("{% do x %}", "'do' statement");
  ExpectRefusedAtLoad("{% raw %}{{ x }}{% endraw %}",
                      "unsupported construct 'raw'");
  ExpectRefusedAtLoad("{{ x | wordwrap(3) }}",
                      "unsupported construct filter 'wordwrap' at line 1, "
                      "column 8");
  ExpectRefusedAtLoad("{{ x is testable }}", "test 'testable'");
  ExpectRefusedAtLoad("{{ messages.append(1) }}", "method 'append'");
  ExpectRefusedAtLoad("{% for x in y recursive %}{% endfor %}",
                      "'recursive' loop");
  ExpectRefusedAtLoad("{{ f(*args) }}", "'*args' or '**kwargs'");
  ExpectRefusedAtLoad("{% frobnicate %}", "unknown tag 'frobnicate'");
}

TEST(ChatTemplateTest, RefusesSyntaxErrorsWithTheirPosition) {
  ExpectRefusedAtLoad("{% if x %}open", "'if' is never closed");
  ExpectRefusedAtLoad("{{ 'open }}", "line 1, column 4: unterminated string");
  ExpectRefusedAtLoad("{{ x ", "missing '}}'");
  ExpectRefusedAtLoad("{% for x in y %}{% endif %}", "");
  ExpectRefusedAtLoad("{% break %}", "'break' outside a for loop");
  ExpectRefusedAtLoad("{{ (1 }}", "line 1, column 7: unexpected '}'");
  ExpectRefusedAtLoad("{{ 1 ]}}", "unexpected ']'");
  ExpectRefusedAtLoad("\xff", "not valid UTF-8");
}

TEST(ChatTemplateTest, EnforcesTemplateSizeAndParseDepth) {
  Limits limits;
  limits.max_template_bytes = 10;
  absl::StatusOr<ChatTemplate> too_long =
      ChatTemplate::Create("{{ 'eleven' }}", limits);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_long.status().message(), HasSubstr("max_template_bytes"));

  std::string deep =
      "{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}";
  absl::StatusOr<ChatTemplate> too_deep = ChatTemplate::Create(deep);
  EXPECT_EQ(too_deep.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_deep.status().message(), HasSubstr("max_nesting_depth"));
  std::string deep_ifs;
  for (int i = 0; i < 100; ++i) deep_ifs += "{% if true %}";
  EXPECT_THAT(ChatTemplate::Create(deep_ifs).status().message(),
              HasSubstr("max_nesting_depth"));
}

TEST(ChatTemplateTest, EnforcesRenderLimitsNamingThem) {
  Limits limits;
  limits.max_output_bytes = 1000;
  absl::StatusOr<std::string> output =
      RenderWith("{% for i in range(200) %}0123456789{% endfor %}", limits);
  EXPECT_EQ(output.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(output.status().message(), HasSubstr("max_output_bytes"));
  EXPECT_THAT(RenderWith("{{ 'ab' * 100000 }}", limits).status().message(),
              HasSubstr("max_output_bytes"));
  EXPECT_THAT(RenderWith("{% set ns = namespace(s='x') %}{% for i in "
                         "range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                         limits)
                  .status()
                  .message(),
              HasSubstr("max_output_bytes"));

  limits = Limits();
  limits.max_loop_iterations = 100;
  EXPECT_THAT(RenderWith("{% for i in range(60) %}{% for j in [1, 2] %}"
                         "{% endfor %}{% endfor %}",
                         limits)
                  .status()
                  .message(),
              HasSubstr("max_loop_iterations"));
  EXPECT_THAT(RenderWith("{{ range(1000000) | length }}").status().message(),
              HasSubstr("MAX_RANGE"));

  limits = Limits();
  limits.max_steps = 1000;
  EXPECT_THAT(
      RenderWith("{% for i in range(500) %}{{ i + 1 }}{% endfor %}", limits)
          .status()
          .message(),
      HasSubstr("max_steps"));

  // A macro that calls itself stops at the nesting limit.
  absl::StatusOr<std::string> recursion =
      RenderWith("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(recursion.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(recursion.status().message(), HasSubstr("max_render_depth"));
}

TEST(ChatTemplateTest, RaisedMessageIsTheTemplatesText) {
  absl::StatusOr<std::string> raised = RenderWith(
      "{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}");
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChatTemplate::RaisedMessage(raised.status()),
            "Roles must alternate");

  absl::StatusOr<std::string> undefined = RenderWith("{{ missing.key }}");
  ASSERT_FALSE(undefined.ok());
  EXPECT_EQ(ChatTemplate::RaisedMessage(undefined.status()), std::nullopt);
  EXPECT_THAT(undefined.status().message(),
              HasSubstr("'missing' is undefined (at line 1, column 1)"));
}

TEST(ChatTemplateTest, StrftimeNowReadsTheInjectedClock) {
  platform::test_util::FakeClock clock(absl::FromCivil(
      absl::CivilSecond(2024, 12, 31, 23, 59, 58), absl::UTCTimeZone()));
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Create(
      "Today Date: {{ strftime_now('%d %b %Y') }} {{ strftime_now('%H:%M') }}",
      Limits{}, &clock, absl::UTCTimeZone());
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  EXPECT_EQ(*chat_template->Render(Context()), "Today Date: 31 Dec 2024 23:59");
}

TEST(ChatTemplateTest, RendersConcurrentlyFromOneTemplate) {
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Create(
      "{% set ns = namespace(n=0) %}{% for m in messages %}"
      "{% set ns.n = ns.n + 1 %}{{ m }}{% endfor %}={{ ns.n }}");
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  std::vector<std::string> outputs(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Dict context;
      std::vector<Value> messages;
      for (int i = 0; i <= t; ++i) messages.push_back(Value::Int(i));
      context.Set("messages", Value::List(std::move(messages)));
      for (int repeat = 0; repeat < 200; ++repeat) {
        absl::StatusOr<std::string> out =
            chat_template->Render(Value::FromDict(context));
        outputs[t] = out.ok() ? *out : out.status().ToString();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) {
    std::string expected;
    for (int i = 0; i <= t; ++i) expected += std::to_string(i);
    EXPECT_EQ(outputs[t], expected + "=" + std::to_string(t + 1));
  }
}

TEST(ChatTemplateTest, RefusesWhatTheSandboxRefuses) {
  EXPECT_THAT(RenderWith("{% set ns = namespace() %}{% set ns._private = 1 %}")
                  .status()
                  .message(),
              HasSubstr("underscore-prefixed"));
  EXPECT_THAT(RenderWith("{% set x = 1 %}{% set x.y = 2 %}").status().message(),
              HasSubstr("non-namespace"));
  EXPECT_FALSE(ChatTemplate::Create("{{ 'x' }}")->Render(Value()).ok());
}

}  // namespace
}  // namespace castserve::text::jinja
