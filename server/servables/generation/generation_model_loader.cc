#include "server/servables/generation/generation_model_loader.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/memory/tracking_allocator.h"
#include "models/generation/generation.h"
#include "models/generation/incremental_decoder.h"
#include "models/loading/model_loader.h"
#include "platform/file_system.h"
#include "server/lifecycle/model_config_loader.h"
#include "server/servables/generation/chat_prompt.h"
#include "server/servables/generation/generation_served_model.h"
#include "server/servables/generation/scheduler_generation_engine.h"
#include "text/tokenizer.h"

namespace castserve {
namespace {

// The folder's tokenizer, or null when it has none.
absl::StatusOr<std::shared_ptr<const text::Tokenizer>> OptionalTokenizer(
    const std::string& folder) {
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer =
      models::CatchExceptions([&] { return text::LoadTokenizer(folder); });
  if (absl::IsNotFound(tokenizer.status())) {
    return std::shared_ptr<const text::Tokenizer>();
  }
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat("the tokenizer of ", folder,
                     " does not load: ", tokenizer.status().message()));
  }
  return std::shared_ptr<const text::Tokenizer>(*std::move(tokenizer));
}

models::SchedulerOptions SchedulerOptionsOf(
    const inference::GenerationConfig& configured) {
  const inference::GenerationConfig generation =
      WithGenerationDefaults(configured);
  models::SchedulerOptions options;
  options.pool_bytes = generation.kv_cache_bytes();
  options.block_tokens = generation.kv_block_tokens();
  options.max_running = generation.max_sequences();
  options.max_waiting = generation.max_waiting();
  options.prefix_caching = !generation.disable_prefix_caching();
  return options;
}

}  // namespace

absl::StatusOr<std::shared_ptr<ServedModel>> LoadGenerationModel(
    const std::string& folder, const inference::ModelConfig& config,
    std::unique_ptr<models::Model> model,
    std::unique_ptr<TrackedModelId> tracked_id,
    std::shared_ptr<const models::Cancellation> cancellation) {
  const models::IncrementalDecoder* decoder = model->incremental_decoder();
  if (decoder == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name(), "': generation is for decoder models (",
        absl::StrJoin(models::GenerativeArchitectures(), ", "),
        "); architecture '", model->architecture(), "' does not generate"));
  }
  absl::StatusOr<std::shared_ptr<const text::Tokenizer>> tokenizer =
      OptionalTokenizer(folder);
  if (!tokenizer.ok()) return tokenizer.status();
  absl::StatusOr<std::vector<int64_t>> eos = models::ReadEosTokenIds(folder);
  if (!eos.ok()) return eos.status();
  absl::StatusOr<std::unique_ptr<ChatPrompt>> chat =
      ChatPrompt::Load(platform::FileSystem::Default(), folder);
  if (!chat.ok()) return chat.status();
  GenerationModelParts parts;
  parts.config = config;
  parts.vocab_size = decoder->vocab_size();
  parts.max_positions = decoder->max_positions();
  parts.eos_token_ids = *std::move(eos);
  parts.tokenizer = *std::move(tokenizer);
  parts.chat = *std::move(chat);
  parts.tracked_id = std::move(tracked_id);
  parts.cancellation = std::move(cancellation);
  parts.model = std::shared_ptr<models::Model>(std::move(model));
  absl::StatusOr<std::unique_ptr<GenerationEngine>> engine;
  {
    // The step thread's allocations (the pool's blocks, each step's
    // transients) count for the model, as its forwards' do.
    std::optional<casting::ScopedModelTag> tag;
    if (parts.tracked_id) tag.emplace(parts.tracked_id->id());
    engine = CreateSchedulerEngine(*parts.model,
                                   SchedulerOptionsOf(config.generation()));
  }
  if (!engine.ok()) {
    return absl::Status(
        engine.status().code(),
        absl::StrCat("generation: ", engine.status().message()));
  }
  parts.engine = *std::move(engine);
  absl::StatusOr<std::unique_ptr<GenerationServedModel>> served =
      GenerationServedModel::Create(std::move(parts));
  if (!served.ok()) return served.status();
  return std::shared_ptr<ServedModel>(*std::move(served));
}

}  // namespace castserve
