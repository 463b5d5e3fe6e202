#include "text/pipeline/post_processor.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::text {
namespace {

using Type = PostProcessorSpec::Type;

}  // namespace

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
  return processor;
}

int64_t PostProcessor::Added(const std::vector<Piece>& pieces) {
  int64_t added = 0;
  for (const Piece& piece : pieces) {
    added += static_cast<int64_t>(piece.special_ids.size());
  }
  return added;
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
    case Type::kRoberta: {
      if (++*adders > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.path, ": a second post-processor adding tokens"));
      }
      const int64_t cls = spec.cls.second, sep = spec.sep.second;
      template_ = {{{cls}, -1, 0}, {{}, 0, 0}, {{sep}, -1, 0}};
      if (spec.type == Type::kBert) {
        pair_template_ = {{{cls}, -1, 0},
                          {{}, 0, 0},
                          {{sep}, -1, 0},
                          {{}, 1, 1},
                          {{sep}, -1, 1}};
      } else {
        pair_template_ = {{{cls}, -1, 0},
                          {{}, 0, 0},
                          {{sep, sep}, -1, 0},
                          {{}, 1, 0},
                          {{sep}, -1, 0}};
      }
      return absl::OkStatus();
    }
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
  struct Target {
    const std::vector<PostProcessorSpec::Piece>* pieces;
    const char* key;
    std::vector<Piece>* out;
    int sequences;  // 1: A; 2: A and B.
  };
  pair_template_.clear();
  for (const Target& target :
       {Target{&spec.single, "single", &template_, 1},
        Target{&spec.pair, "pair", &pair_template_, 2}}) {
    if (target.sequences == 2 && target.pieces->empty()) break;  // No pair.
    target.out->clear();
    int seen[2] = {0, 0};
    for (size_t i = 0; i < target.pieces->size(); ++i) {
      const PostProcessorSpec::Piece& piece = (*target.pieces)[i];
      const std::string path =
          absl::StrCat(spec.path, ".", target.key, "[", i, "]");
      if (!piece.is_special_token) {
        const int sequence = piece.id == "A" ? 0 : piece.id == "B" ? 1 : -1;
        if (sequence < 0 || sequence >= target.sequences ||
            seen[sequence]++ > 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": the ", target.key, " template holds ",
              target.sequences == 1 ? "sequence A" : "sequences A and B",
              " once"));
        }
        target.out->push_back({{}, sequence, piece.type_id});
        continue;
      }
      auto it = std::find_if(
          spec.special_tokens.begin(), spec.special_tokens.end(),
          [&](const auto& entry) { return entry.first == piece.id; });
      if (it == spec.special_tokens.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": special token \"", piece.id,
                         "\" is not in special_tokens"));
      }
      target.out->push_back({it->second, -1, piece.type_id});
    }
    if (seen[0] == 0 || (target.sequences == 2 && seen[1] == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(spec.path, ".", target.key,
                                                     ": no sequence ",
                                                     seen[0] == 0 ? "A" : "B"));
    }
  }
  return absl::OkStatus();
}

Encoding PostProcessor::Fill(
    const std::vector<Piece>& pieces,
    const std::vector<const std::vector<int64_t>*>& sequences,
    bool add_special_tokens) {
  Encoding encoding;
  for (const Piece& piece : pieces) {
    const std::vector<int64_t>& ids =
        piece.sequence >= 0 ? *sequences[piece.sequence] : piece.special_ids;
    if (piece.sequence < 0 && !add_special_tokens) continue;
    encoding.ids.insert(encoding.ids.end(), ids.begin(), ids.end());
    encoding.type_ids.insert(encoding.type_ids.end(), ids.size(),
                             piece.type_id);
  }
  return encoding;
}

Encoding PostProcessor::Apply(const std::vector<int64_t>& ids,
                              bool add_special_tokens) const {
  return Fill(template_, {&ids}, add_special_tokens);
}

Encoding PostProcessor::ApplyPair(const std::vector<int64_t>& a,
                                  const std::vector<int64_t>& b,
                                  bool add_special_tokens) const {
  return Fill(pair_template_, {&a, &b}, add_special_tokens);
}

}  // namespace castserve::text
