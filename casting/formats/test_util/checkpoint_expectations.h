#ifndef CASTSERVE_CASTING_TEST_UTIL_CHECKPOINT_EXPECTATIONS_H_
#define CASTSERVE_CASTING_TEST_UTIL_CHECKPOINT_EXPECTATIONS_H_

#include <string>

#include "casting/formats/checkpoint.h"

namespace castserve::casting::test_util {

// Checks (with gtest EXPECTs) every tensor listed for `fixture_name` in
// casting/formats/testdata/ckpt_expected.txt (written by
// tools/gen_checkpoint_fixtures.py): it exists in `checkpoint` with that
// dtype and shape, and its bytes, copied out with Checkpoint::CopyTo, decode
// to the listed values (floats compared after rounding to the dtype; fp8,
// U16 and the like compared as raw little-endian codes). Returns the number of
// tensors checked.
int ExpectTensorsMatchFixture(const Checkpoint& checkpoint,
                              const std::string& fixture_name);

}  // namespace castserve::casting::test_util

#endif  // CASTSERVE_CASTING_TEST_UTIL_CHECKPOINT_EXPECTATIONS_H_
