#include "server/rest/proto_json.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"

namespace castserve {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Element `index` of repeated field `field`, or the singular value when
// `index` is -1.
nlohmann::json FieldValue(const Message& message, const FieldDescriptor* field,
                          int index) {
  const Reflection* reflection = message.GetReflection();
  const bool repeated = index >= 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return repeated ? reflection->GetRepeatedInt32(message, field, index)
                      : reflection->GetInt32(message, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return repeated ? reflection->GetRepeatedInt64(message, field, index)
                      : reflection->GetInt64(message, field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? reflection->GetRepeatedUInt32(message, field, index)
                      : reflection->GetUInt32(message, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? reflection->GetRepeatedUInt64(message, field, index)
                      : reflection->GetUInt64(message, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? reflection->GetRepeatedDouble(message, field, index)
                      : reflection->GetDouble(message, field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return repeated ? reflection->GetRepeatedFloat(message, field, index)
                      : reflection->GetFloat(message, field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? reflection->GetRepeatedBool(message, field, index)
                      : reflection->GetBool(message, field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (repeated ? reflection->GetRepeatedEnum(message, field, index)
                       : reflection->GetEnum(message, field))
          ->name();
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string value =
          repeated ? reflection->GetRepeatedString(message, field, index)
                   : reflection->GetString(message, field);
      if (field->type() == FieldDescriptor::TYPE_BYTES) {
        return absl::Base64Escape(value);
      }
      return value;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(
          repeated ? reflection->GetRepeatedMessage(message, field, index)
                   : reflection->GetMessage(message, field));
  }
  return nullptr;
}

// A map field's entries as one object, keyed by the entries' keys.
nlohmann::json MapValue(const Message& message, const FieldDescriptor* field) {
  const Reflection* reflection = message.GetReflection();
  nlohmann::json object = nlohmann::json::object();
  const FieldDescriptor* key_field = field->message_type()->map_key();
  const FieldDescriptor* value_field = field->message_type()->map_value();
  for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
    const Message& entry = reflection->GetRepeatedMessage(message, field, i);
    nlohmann::json key = FieldValue(entry, key_field, -1);
    object[key.is_string() ? key.get<std::string>() : key.dump()] =
        FieldValue(entry, value_field, -1);
  }
  return object;
}

}  // namespace

nlohmann::json ProtoToJson(const Message& message) {
  nlohmann::json object = nlohmann::json::object();
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  const Reflection* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_map()) {
      object[field->name()] = MapValue(message, field);
    } else if (field->is_repeated()) {
      nlohmann::json array = nlohmann::json::array();
      for (int j = 0; j < reflection->FieldSize(message, field); ++j) {
        array.push_back(FieldValue(message, field, j));
      }
      object[field->name()] = std::move(array);
    } else if (field->has_presence() && !reflection->HasField(message, field)) {
      continue;  // An unset message field or oneof member.
    } else {
      object[field->name()] = FieldValue(message, field, -1);
    }
  }
  return object;
}

}  // namespace castserve
