#include "casting/formats/state_dict_unpickler.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using ::testing::HasSubstr;
using std::string_literals::operator""s;

// Protocol-2 pickle of {'w': _rebuild_tensor_v2(storage, 1, (2,), (1,),
// False, OrderedDict())} with storage ('storage', FloatStorage, '0', 'cpu',
// 3); one entry, so the dict is filled with SETITEM.
std::string OneTensorPickle() {
  return "\x80\x02}q\x00X\x01\x00\x00\x00w"s +
         "ctorch._utils\n_rebuild_tensor_v2\n(" + "(X\x07\x00\x00\x00storage"s +
         "ctorch\nFloatStorage\n" +
         "X\x01\x00\x00\x00"
         "0"s +
         "X\x03\x00\x00\x00"
         "cpu"s +
         "K\x03tQ" + "K\x01K\x02\x85K\x01\x85\x89" +
         "ccollections\nOrderedDict\n)R" + "tRs.";
}

TEST(StateDictUnpicklerTest, ReadsAOneEntryStateDict) {
  auto tensors = UnpickleStateDict(OneTensorPickle());
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 1u);
  const PickledTensor& t = (*tensors)[0];
  EXPECT_EQ(t.name, "w");
  EXPECT_EQ(t.dtype, DType::kF32);
  EXPECT_EQ(t.storage_key, "0");
  EXPECT_EQ(t.storage_numel, 3);
  EXPECT_EQ(t.storage_offset, 1);
  EXPECT_EQ(t.shape, std::vector<int64_t>{2});
  EXPECT_EQ(t.stride, std::vector<int64_t>{1});
}

TEST(StateDictUnpicklerTest, EveryTruncationIsAnError) {
  const std::string pickle = OneTensorPickle();
  for (size_t keep = 0; keep < pickle.size(); ++keep) {
    EXPECT_FALSE(UnpickleStateDict(pickle.substr(0, keep)).ok()) << keep;
  }
}

TEST(StateDictUnpicklerTest, UnknownGlobalIsNamed) {
  auto result = UnpickleStateDict(
      "\x80\x02"
      "cos\nsystem\n.");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("unsupported global os.system"));
}

TEST(StateDictUnpicklerTest, UnknownOpcodeIsNamedWithItsOffset) {
  auto result = UnpickleStateDict("\x80\x02}\x8f.");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("data.pkl byte 3: unsupported pickle opcode 0x8f"));
}

TEST(StateDictUnpicklerTest, StackUnderflowIsAnError) {
  auto result = UnpickleStateDict("\x80\x02s.");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("stack underflow"));
}

TEST(StateDictUnpicklerTest, DeepNestingIsRefused) {
  std::string pickle = "\x80\x02";
  for (int i = 0; i < 100; ++i) pickle += "]";
  for (int i = 0; i < 99; ++i) pickle += "a";
  pickle += ".";
  auto result = UnpickleStateDict(pickle);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("nesting too deep"));
}

TEST(StateDictUnpicklerTest, ContainerMutatedAfterBeingStoredIsRefused) {
  // a = []; b = [a]; a.append(a) -- would build a cycle.
  auto result = UnpickleStateDict(
      "\x80\x02]q\x00]h\x00"
      "ah\x00h\x00"
      "a."s);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("container mutated after being stored"));
}

TEST(StateDictUnpicklerTest, TopLevelMustBeADictOfTensors) {
  EXPECT_FALSE(UnpickleStateDict("\x80\x02].").ok());
  auto result = UnpickleStateDict("\x80\x02}X\x01\x00\x00\x00kK\x01s."s);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("entry 'k' is not a tensor"));
}

}  // namespace
}  // namespace castserve::casting
