// castserve-client's `generate` command, the parts that are not I/O: the
// request it sends and what it reads back from each response. Stateless;
// thread-safe.
#ifndef CASTSERVE_CLIENT_GENERATE_IO_H_
#define CASTSERVE_CLIENT_GENERATE_IO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/inference.pb.h"

namespace castserve {

struct GenerateArgs {
  std::string model;
  // Exactly one of the two: text_input BYTES [1] or input_ids INT64 [n].
  std::optional<std::string> text;
  std::optional<std::vector<int64_t>> ids;
  // "KEY=VALUE" each: "true"/"false" become bool parameters, integers
  // int64, other numbers double, anything else (a JSON array of stop
  // strings, say) a string.
  std::vector<std::string> parameters;
};

// INVALID_ARGUMENT naming the problem (both or neither input, a parameter
// without '=').
absl::StatusOr<inference::ModelInferRequest> BuildGenerateRequest(
    const GenerateArgs& args);

// "1,2,3" as ids; INVALID_ARGUMENT naming the bad element.
absl::StatusOr<std::vector<int64_t>> ParseIds(const std::string& text);

// What one generate response says.
struct GeneratedPiece {
  // text_output's element, when the response has it.
  std::optional<std::string> text;
  // output_ids' elements.
  std::vector<int64_t> ids;
  // The finish_reason parameter ("" when absent).
  std::string finish_reason;
};

// INTERNAL when an output's contents do not fit its datatype.
absl::StatusOr<GeneratedPiece> ReadGeneratedPiece(
    const inference::ModelInferResponse& response);

// The piece as the command prints it: its text, else its ids separated by
// spaces (after a space when `continued`).
std::string PieceText(const GeneratedPiece& piece, bool continued);

}  // namespace castserve

#endif  // CASTSERVE_CLIENT_GENERATE_IO_H_
