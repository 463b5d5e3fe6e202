// The model folder's tokenizer as the model's `text` input.
#ifndef CASTSERVE_SERVER_SERVABLES_FACTORY_TEXT_INPUT_LOADER_H_
#define CASTSERVE_SERVER_SERVABLES_FACTORY_TEXT_INPUT_LOADER_H_

#include <memory>
#include <string>

#include "models/model.h"
#include "server/servables/text_input.h"

namespace castserve {

// The text input of `model` (loaded from `folder`: its tokenizer, truncating
// at model.max_sequence_length()), or an unavailable one that says why: a
// model serves its token inputs whatever its tokenizer. A tokenizer that is
// there but does not load is logged with `model_name`.
std::shared_ptr<const TextInput> TextInputFor(const std::string& folder,
                                              const models::Model& model,
                                              const std::string& model_name);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_FACTORY_TEXT_INPUT_LOADER_H_
