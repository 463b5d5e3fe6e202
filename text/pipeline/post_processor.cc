#include "text/pipeline/post_processor.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::text {

using Type = PostProcessorSpec::Type;

absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessor::Create(
    const PostProcessorSpec* spec) {
  std::unique_ptr<PostProcessor> processor(new PostProcessor());
  int adders = 0;
  if (spec != nullptr) {
    if (absl::Status status = processor->AddSpec(*spec, &adders);
        !status.ok()) {
      return status;
    }
  }
  for (const Piece& piece : processor->template_) {
    processor->added_tokens_ += static_cast<int64_t>(piece.special_ids.size());
  }
  return processor;
}

absl::Status PostProcessor::AddSpec(const PostProcessorSpec& spec,
                                    int* adders) {
  switch (spec.type) {
    case Type::kByteLevel:
      return absl::OkStatus();
    case Type::kSequence:
      for (const PostProcessorSpec& child : spec.processors) {
        if (absl::Status status = AddSpec(child, adders); !status.ok())
          return status;
      }
      return absl::OkStatus();
    case Type::kBert:
    case Type::kRoberta:
      if (++*adders > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.path, ": a second post-processor adding tokens"));
      }
      template_ = {{{spec.cls.second}, false, 0},
                   {{}, true, 0},
                   {{spec.sep.second}, false, 0}};
      return absl::OkStatus();
    case Type::kTemplate:
      if (++*adders > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.path, ": a second post-processor adding tokens"));
      }
      return AddTemplate(spec);
  }
  return absl::OkStatus();
}

absl::Status PostProcessor::AddTemplate(const PostProcessorSpec& spec) {
  template_.clear();
  bool has_sequence = false;
  for (size_t i = 0; i < spec.single.size(); ++i) {
    const PostProcessorSpec::Piece& piece = spec.single[i];
    const std::string path = absl::StrCat(spec.path, ".single[", i, "]");
    if (!piece.is_special_token) {
      if (piece.id != "A" || has_sequence) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": the single template holds sequence A once"));
      }
      has_sequence = true;
      template_.push_back({{}, true, piece.type_id});
      continue;
    }
    auto it = std::find_if(
        spec.special_tokens.begin(), spec.special_tokens.end(),
        [&](const auto& entry) { return entry.first == piece.id; });
    if (it == spec.special_tokens.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": special token \"", piece.id, "\" is not in special_tokens"));
    }
    template_.push_back({it->second, false, piece.type_id});
  }
  if (!has_sequence) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.path, ".single: no sequence A"));
  }
  return absl::OkStatus();
}

Encoding PostProcessor::Apply(const std::vector<int64_t>& ids,
                              bool add_special_tokens) const {
  Encoding encoding;
  const size_t size = ids.size() + (add_special_tokens ? added_tokens_ : 0);
  encoding.ids.reserve(size);
  encoding.type_ids.reserve(size);
  for (const Piece& piece : template_) {
    if (piece.is_sequence) {
      encoding.ids.insert(encoding.ids.end(), ids.begin(), ids.end());
      encoding.type_ids.insert(encoding.type_ids.end(), ids.size(),
                               piece.type_id);
    } else if (add_special_tokens) {
      encoding.ids.insert(encoding.ids.end(), piece.special_ids.begin(),
                          piece.special_ids.end());
      encoding.type_ids.insert(encoding.type_ids.end(),
                               piece.special_ids.size(), piece.type_id);
    }
  }
  return encoding;
}

}  // namespace castserve::text
