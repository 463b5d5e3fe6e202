// Protobuf messages as the JSON that KServe v2 REST and Triton's clients
// read: field names as the .proto spells them (snake_case), 64-bit integers
// as JSON numbers (protobuf's own JSON mapping writes them as strings, which
// Triton's clients and perf_analyzer do not read), every scalar and
// repeated field written even when it holds its default, a message field
// only when set, enums by name, maps as objects, bytes in base64.
// Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_REST_PROTO_JSON_H_
#define CASTSERVE_SERVER_REST_PROTO_JSON_H_

#include <google/protobuf/message.h>

#include <nlohmann/json.hpp>

namespace castserve {

nlohmann::json ProtoToJson(const google::protobuf::Message& message);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_REST_PROTO_JSON_H_
