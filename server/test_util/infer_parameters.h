// One inference::InferParameter of each kind, for tests of the parameters a
// request carries.
#ifndef CASTSERVE_SERVER_TEST_UTIL_INFER_PARAMETERS_H_
#define CASTSERVE_SERVER_TEST_UTIL_INFER_PARAMETERS_H_

#include <cstdint>
#include <string>

#include "proto/inference.pb.h"

namespace castserve::test_util {

inline inference::InferParameter Int(int64_t v) {
  inference::InferParameter p;
  p.set_int64_param(v);
  return p;
}
inline inference::InferParameter Uint(uint64_t v) {
  inference::InferParameter p;
  p.set_uint64_param(v);
  return p;
}
inline inference::InferParameter Double(double v) {
  inference::InferParameter p;
  p.set_double_param(v);
  return p;
}
inline inference::InferParameter String(const std::string& v) {
  inference::InferParameter p;
  p.set_string_param(v);
  return p;
}
inline inference::InferParameter Bool(bool v) {
  inference::InferParameter p;
  p.set_bool_param(v);
  return p;
}

}  // namespace castserve::test_util

#endif  // CASTSERVE_SERVER_TEST_UTIL_INFER_PARAMETERS_H_
