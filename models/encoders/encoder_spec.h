// EncoderSpec: everything that tells one BERT-like encoder from another, as
// an architecture file (models/architectures/<model_type>.cc) states it: its
// hyperparameters (read from config.json), its position scheme, its layer
// (BERT's post-norm layer, or the gated rotary layer of ModernBERT and
// NomicBERT with its per-layer attention window and rotary table), the names
// of its tensors, where its keys sit in the checkpoint and which head runs
// after it (none: the encoder's hidden states; a sequence classifier: one
// score per label). EncoderModel (encoder_model.h) builds any such model
// from it.
//
// Also the readers an architecture file calls for the fields every
// BERT-like config has, with transformers' defaults and errors that name the
// key. Pure functions of their arguments: thread-safe.
#ifndef CASTSERVE_MODELS_ENCODERS_ENCODER_SPEC_H_
#define CASTSERVE_MODELS_ENCODERS_ENCODER_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "models/layers/activation.h"
#include "models/loading/hf_config.h"

namespace castserve::models {

// How position ids are made from input_ids.
enum class EncoderPositions {
  kAbsolute,      // 0..seq-1 in every row (BERT).
  kAfterPadding,  // padding_idx + 1 + the count of non-padding tokens up to
                  // and including each one; padding_idx at padding tokens
                  // (RoBERTa, XLM-RoBERTa).
  kRotary,        // No position table: 0..seq-1 rotate queries and keys in
                  // every layer (ModernBERT, NomicBERT).
};

// The layer the stack is made of.
enum class EncoderLayerKind {
  // EncoderLayer: query/key/value with biases, dense + residual +
  // LayerNorm, intermediate dense with the activation, dense + residual +
  // LayerNorm; BERT's names ("attention.self.query", ...).
  kBert,
  // GatedEncoderLayer: one fused qkv projection, rotary positions, an
  // attention window per layer, a gated feed-forward, LayerNorm before each
  // block (pre-norm) or after each residual (post-norm); names as
  // GatedLayerNames says.
  kGated,
};

// The tensor names of a kGated layer, relative to the layer
// ("layers.3." + name). Each layout comes as a checkpoint saves it: the
// attention's projections fused (ModernBERT's Wqkv, the hub's NomicBERT
// attn.Wqkv) or not (transformers 5's NomicBERT q_proj, k_proj, v_proj),
// the feed-forward's gate and up fused (ModernBERT's Wi) or not.
struct GatedLayerNames {
  std::string qkv;            // [3 x hidden, hidden]: the q, k, v rows in turn.
  std::string q, k, v;        // Instead of qkv: [hidden, hidden] each.
  std::string attention_out;  // [hidden, hidden].
  std::string attention_norm;  // Pre-norm: before attention; post-norm:
                               // after its residual.
  std::string mlp_norm;
  // The gated feed-forward out(act(gate(x)) * up(x)): one fused projection
  // [2 x intermediate, hidden] whose first half is the gate, or two.
  std::string mlp_fused;
  std::string mlp_gate, mlp_up;  // Instead of mlp_fused.
  std::string mlp_out;           // [hidden, intermediate].
};

// A rotary table of a kRotary model: it rotates every column of each head.
struct EncoderRope {
  double theta = 10000.0;
};

// Where a model's tensors sit, relative to its key prefix. The embeddings'
// position and token type tables are "" when the model has none (kRotary,
// no token types).
struct EncoderNames {
  std::string word_embeddings = "embeddings.word_embeddings";
  std::string position_embeddings = "embeddings.position_embeddings";
  std::string token_type_embeddings = "embeddings.token_type_embeddings";
  std::string embeddings_norm = "embeddings.LayerNorm";
  std::string layers = "encoder.layer";  // Layer i is "<layers>.<i>".
  std::string final_norm;                // "" for none.
  GatedLayerNames gated;                 // kGated only.
};

// The attention of one kGated layer.
struct EncoderLayerAttention {
  // 0: every token sees every token; else a query sees the keys at most
  // `window` positions before or after it (ModernBERT's local layers:
  // local_attention / 2).
  int64_t window = 0;
  int rope = 0;  // Index into EncoderSpec::ropes.
};

// What runs after the encoder stack.
enum class EncoderHead {
  kNone,  // last_hidden_state and, with pooler weights, pooler_output.
  // BertForSequenceClassification: the pooler (dense + tanh over the first
  // token), then `classifier` (hidden -> labels).
  kPooledClassifier,
  // XLMRobertaForSequenceClassification: the first token through
  // `classifier.dense` (hidden -> hidden), tanh, `classifier.out_proj`
  // (hidden -> labels); the encoder has no pooler.
  kFirstTokenClassifier,
};

struct EncoderSpec {
  std::string model_type;    // "bert", "xlm-roberta".
  std::string class_prefix;  // "Bert", "XLMRoberta": kinds "BertLayer", ...
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  Activation activation = Activation::kGelu;
  EncoderPositions positions = EncoderPositions::kAbsolute;
  int64_t padding_idx = 0;  // kAfterPadding: pad_token_id.
  EncoderLayerKind layer_kind = EncoderLayerKind::kBert;

  // The tensor names, and other names the same model may be saved under
  // (NomicBERT: transformers 5's and the hub's). The model reads the first
  // whose embeddings norm the checkpoint holds.
  EncoderNames names;
  std::vector<EncoderNames> other_names;

  // kGated only.
  bool norm_first = false;  // Pre-norm (ModernBERT); else post-norm.
  // Pre-norm: layer 0 has no attention norm (its input is the embeddings'
  // norm already), as ModernBERT's.
  bool first_layer_attention_norm = true;
  bool attention_bias = true;
  bool mlp_bias = true;
  std::vector<EncoderRope> ropes;
  std::vector<EncoderLayerAttention> layer_attention;  // Per layer.

  // Where the encoder's keys may sit ("" for a bare model, "bert." or
  // "roberta." inside a model with a head), tried in order.
  std::vector<std::string> key_prefixes = {""};
  // Checkpoint keys starting so belong to heads the served model does not
  // run (a masked-LM head beside the encoder); any other key no module
  // reads is refused at load, naming it.
  std::vector<std::string> unserved_key_prefixes;
  EncoderHead head = EncoderHead::kNone;
  // A classifier's label names in label order (config.json's id2label).
  std::vector<std::string> labels;

  // The longest input: the position table, less the positions padding
  // takes before the first token (kAfterPadding).
  int64_t max_sequence_length() const;
};

// Reads vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size (required), max_position_embeddings and type_vocab_size
// (optional, the spec's defaults), each range-checked (HfConfig::GetSize);
// layer_norm_eps, hidden_act. InvalidArgument naming the key for a
// position_embedding_type other than "absolute", is_decoder or
// add_cross_attention set (an encoder serves neither), a hidden size not
// divisible by the head count.
absl::Status ReadEncoderBasics(const HfConfig& config, EncoderSpec& spec);

// InvalidArgument naming what is wrong in a spec an architecture file made
// (a kGated spec without names, a rope index out of range, an odd rotary
// dimension, ...): the loader's last check before building.
absl::Status ValidateEncoderSpec(const EncoderSpec& spec);

// rope_theta of a rope_parameters object as transformers 5 writes it
// (`fallback` when absent); InvalidArgument naming rope_type for any type
// but "default" (scaled rotary tables are not implemented for encoders).
absl::StatusOr<double> ReadDefaultRopeTheta(const HfConfig& rope,
                                            double fallback);

// True when config.json's "architectures" names
// "<class_prefix>ForSequenceClassification": the folder is a cross-encoder
// whose classifier must run. InvalidArgument when "architectures" is not a
// list of strings.
absl::StatusOr<bool> IsSequenceClassifier(const HfConfig& config,
                                          absl::string_view class_prefix);

// A classifier's labels: id2label ({"0": "LABEL_0", ...}, every id from 0
// to n-1 once) or, without it, num_labels (default 2) named "LABEL_<i>" as
// transformers names them; a problem_type other than transformers' three
// is refused. InvalidArgument naming the key.
absl::StatusOr<std::vector<std::string>> ReadClassifierLabels(
    const HfConfig& config);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_ENCODER_SPEC_H_
