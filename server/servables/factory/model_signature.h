// The model's signature in its config: the inputs and outputs filled in from
// the architecture's, or the configured ones checked against it, and the
// optional `text` input.
#ifndef CASTSERVE_SERVER_SERVABLES_FACTORY_MODEL_SIGNATURE_H_
#define CASTSERVE_SERVER_SERVABLES_FACTORY_MODEL_SIGNATURE_H_

#include <vector>

#include "absl/status/status.h"
#include "models/model.h"
#include "proto/model_config.pb.h"
#include "server/servables/text_input.h"

namespace castserve {

// Fills `config`'s empty inputs / outputs from the signature (dims without
// the batch dimension when max_batch_size > 0), or checks the ones given:
// every name must be in the signature with its data type and rank, a fixed
// dimension must match (a variable one may be fixed by the config), and every
// required input must be listed. INVALID_ARGUMENT naming the tensor.
absl::Status ApplySignature(const std::vector<models::TensorSpec>& inputs,
                            const std::vector<models::TensorSpec>& outputs,
                            inference::ModelConfig* config);

// The `text` input in `config` (text_input.h): added as an optional
// TYPE_STRING input with dims [1] ([-1, 1] without batching) when `text` is
// available and the config does not list it; a listed one must have that
// type and those dims and needs an available `text`. INVALID_ARGUMENT
// otherwise. The same for a cross-encoder's `query` and `document` when
// text.pairs().
absl::Status ApplyTextSignature(const TextInput& text,
                                inference::ModelConfig* config);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_FACTORY_MODEL_SIGNATURE_H_
