// Every committed chat template (testdata/templates/) over the
// conversations tools/gen_chat_template_references.py rendered with
// transformers and jinja2 (testdata/references/): castserve's render must
// equal jinja2's byte for byte, and where jinja2 raised, castserve must
// fail too (with the same message when raise_exception raised it).
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"
#include "text/jinja/chat_context.h"
#include "text/jinja/chat_template.h"

namespace castserve::text::jinja {
namespace {

constexpr char kTestdata[] = "text/jinja/tests/testdata";

std::string ReadText(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

Value FromJson(const nlohmann::ordered_json& json) {
  absl::StatusOr<Value> value = ValueFromJson(json);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : Value();
}

// A clock stopped at the time the generator gave strftime_now
// ("2026-07-04T15:30:00", UTC).
std::unique_ptr<platform::test_util::FakeClock> FixedClock(
    const std::string& iso) {
  int year, month, day, hour, minute, second;
  EXPECT_EQ(std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &year, &month, &day,
                        &hour, &minute, &second),
            6);
  return std::make_unique<platform::test_util::FakeClock>(
      absl::FromCivil(absl::CivilSecond(year, month, day, hour, minute, second),
                      absl::UTCTimeZone()));
}

struct Counts {
  int rendered = 0;
  int errors = 0;
};

Counts CheckReferences(const std::filesystem::path& path) {
  Counts counts;
  nlohmann::ordered_json references =
      nlohmann::ordered_json::parse(ReadText(path.string()));
  std::string name = references["template"].get<std::string>();
  // The references name the template they were rendered from.
  EXPECT_EQ(name, path.stem().string() + ".jinja") << path;
  std::string source = ReadText(std::string(kTestdata) + "/templates/" + name);
  std::unique_ptr<platform::test_util::FakeClock> clock =
      FixedClock(references["now"].get<std::string>());
  absl::StatusOr<ChatTemplate> chat_template =
      ChatTemplate::Create(source, Limits{}, clock.get(), absl::UTCTimeZone());
  EXPECT_TRUE(chat_template.ok()) << name << ": " << chat_template.status();
  if (!chat_template.ok()) return counts;
  Value special_tokens = FromJson(references["special_tokens"]);
  int index = 0;
  for (const auto& test_case : references["cases"]) {
    SCOPED_TRACE(name + " case " + std::to_string(index++));
    ChatInputs inputs;
    inputs.messages = FromJson(test_case["messages"]);
    inputs.add_generation_prompt =
        test_case["add_generation_prompt"].get<bool>();
    if (test_case.contains("tools"))
      inputs.tools = FromJson(test_case["tools"]);
    if (test_case.contains("extra")) {
      inputs.extra = FromJson(test_case["extra"]).dict();
    }
    inputs.special_tokens = special_tokens.dict();
    absl::StatusOr<Value> context = BuildChatContext(inputs);
    EXPECT_TRUE(context.ok()) << context.status();
    if (!context.ok()) continue;
    absl::StatusOr<std::string> rendered = chat_template->Render(*context);
    if (test_case.contains("expected")) {
      EXPECT_TRUE(rendered.ok()) << rendered.status();
      if (!rendered.ok()) continue;
      EXPECT_EQ(*rendered, test_case["expected"].get<std::string>());
      ++counts.rendered;
      continue;
    }
    EXPECT_FALSE(rendered.ok())
        << "jinja2 raised \"" << test_case["error"].get<std::string>()
        << "\" but castserve rendered:\n"
        << *rendered;
    if (rendered.ok()) continue;
    if (test_case["raised"].get<bool>()) {
      EXPECT_EQ(ChatTemplate::RaisedMessage(rendered.status()),
                test_case["error"].get<std::string>())
          << rendered.status();
    }
    ++counts.errors;
  }
  return counts;
}

// The file names (without extension) in `folder` ending in `extension`.
std::set<std::string> Stems(const std::string& folder,
                            const std::string& extension) {
  std::set<std::string> stems;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() == extension) {
      stems.insert(entry.path().stem().string());
    }
  }
  return stems;
}

TEST(ParityTest, EveryTemplateRendersAsJinja2) {
  // Every committed template has its references and every reference its
  // template: a template without references is not silently skipped.
  std::set<std::string> templates =
      Stems(std::string(kTestdata) + "/templates", ".jinja");
  std::set<std::string> references =
      Stems(std::string(kTestdata) + "/references", ".json");
  ASSERT_EQ(templates, references);
  std::map<std::string, Counts> counts;
  for (const std::string& name : references) {
    counts[name] = CheckReferences(std::string(kTestdata) + "/references/" +
                                   name + ".json");
  }
  int total = 0;
  for (const auto& [name, count] : counts) {
    std::printf("%-40s %3d rendered, %2d expected errors\n", name.c_str(),
                count.rendered, count.errors);
    total += count.rendered + count.errors;
  }
  std::printf("%zu templates, %d conversations\n", counts.size(), total);
  EXPECT_GE(counts.size(), 8u);
  for (const auto& [name, count] : counts) {
    EXPECT_GE(count.rendered + count.errors, 50) << name;
  }
}

// One construct per template (whitespace control, loops, filters, tests,
// methods, printing of values, tojson, undefined), rendered by jinja2.
TEST(ParityTest, EveryFeatureRendersAsJinja2) {
  nlohmann::ordered_json features = nlohmann::ordered_json::parse(
      ReadText(std::string(kTestdata) + "/features.json"));
  ASSERT_GE(features.size(), 50u);
  std::unique_ptr<platform::test_util::FakeClock> clock =
      FixedClock("2026-07-04T15:30:00");
  int errors = 0;
  for (const auto& feature : features) {
    std::string source = feature["template"].get<std::string>();
    SCOPED_TRACE(source);
    absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Create(
        source, Limits{}, clock.get(), absl::UTCTimeZone());
    absl::StatusOr<std::string> rendered =
        chat_template.ok()
            ? chat_template->Render(FromJson(feature["context"]))
            : absl::StatusOr<std::string>(chat_template.status());
    if (feature.contains("expected") &&
        feature["expected"].get<std::string>().find(" at 0x") !=
            std::string::npos) {
      // jinja2 printed a generator's memory address: castserve refuses.
      EXPECT_THAT(rendered.status().message(),
                  ::testing::HasSubstr("unsupported construct: printing a "
                                       "generator"));
      continue;
    }
    if (feature.contains("expected")) {
      EXPECT_TRUE(rendered.ok()) << rendered.status();
      if (rendered.ok()) {
        EXPECT_EQ(*rendered, feature["expected"].get<std::string>());
      }
      continue;
    }
    ++errors;
    EXPECT_FALSE(rendered.ok())
        << "jinja2 raised \"" << feature["error"].get<std::string>()
        << "\" but castserve rendered: " << *rendered;
    if (!rendered.ok() && feature["raised"].get<bool>()) {
      EXPECT_EQ(ChatTemplate::RaisedMessage(rendered.status()),
                feature["error"].get<std::string>());
    }
  }
  EXPECT_GE(errors, 5);
}

}  // namespace
}  // namespace castserve::text::jinja
