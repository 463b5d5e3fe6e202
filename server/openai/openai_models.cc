// GET /v1/models and /v1/models/{id}.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/openai/openai_calls.h"
#include "server/openai/openai_errors.h"
#include "server/openai/openai_tensors.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

json ModelObject(const inference::ModelConfig& config, int64_t created) {
  return {{"id", config.name()},
          {"object", "model"},
          {"created", created},
          {"owned_by", "castserve"}};
}

}  // namespace

void ServeModels(InferenceCore* core, CallContext call, const std::string& id,
                 HttpReply reply) {
  // When the answer was made: castserve keeps no creation time of a model.
  const int64_t created = absl::ToUnixSeconds(absl::Now());
  if (!id.empty()) {
    return WithModelConfig(
        core, call, id,
        [created, reply = std::move(reply)](
            absl::StatusOr<inference::ModelConfig> config) {
          if (!config.ok()) return reply(ErrorResponse(config.status()));
          if (KindOf(*config) == ModelKind::kOther) {
            return reply(ErrorResponse(absl::NotFoundError(absl::StrCat(
                "model '", config->name(), "' is a ", KindName(*config),
                " model, which no OpenAI endpoint serves"))));
          }
          reply(JsonAnswer(ModelObject(*config, created)));
        });
  }
  auto configs = std::make_shared<std::vector<inference::ModelConfig>>();
  core->ReadyModelConfigs(
      std::move(call), configs.get(),
      [configs, created, reply = std::move(reply)](absl::Status status) {
        if (!status.ok()) return reply(ErrorResponse(status));
        json data = json::array();
        for (const inference::ModelConfig& config : *configs) {
          if (KindOf(config) == ModelKind::kOther) continue;
          data.push_back(ModelObject(config, created));
        }
        reply(JsonAnswer({{"object", "list"}, {"data", std::move(data)}}));
      });
}

}  // namespace castserve::openai
