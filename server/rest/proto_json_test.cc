#include "server/rest/proto_json.h"

#include "gtest/gtest.h"
#include "proto/inference.pb.h"
#include "proto/model_config.pb.h"

namespace castserve {
namespace {

TEST(ProtoJsonTest, Int64AsNumbersAndFieldNamesAsInTheProto) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("m");
  metadata.add_versions("1");
  auto* input = metadata.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(-1);
  input->add_shape(2);
  const nlohmann::json json = ProtoToJson(metadata);
  EXPECT_EQ(json["name"], "m");
  EXPECT_EQ(json["versions"], nlohmann::json::array({"1"}));
  EXPECT_EQ(json["inputs"][0]["shape"], nlohmann::json::array({-1, 2}));
  EXPECT_TRUE(json["inputs"][0]["shape"][0].is_number_integer());
  EXPECT_EQ(json["outputs"], nlohmann::json::array());
  EXPECT_EQ(json["platform"], "");
}

TEST(ProtoJsonTest, EnumsByNameMapsAsObjectsUnsetMessagesLeftOut) {
  inference::ModelConfig config;
  config.set_name("m");
  config.set_max_batch_size(8);
  auto* input = config.add_input();
  input->set_name("ids");
  input->set_data_type(inference::TYPE_INT64);
  input->add_dims(-1);
  (*config.mutable_parameters())["k"].set_string_value("v");
  const nlohmann::json json = ProtoToJson(config);
  EXPECT_EQ(json["max_batch_size"], 8);
  EXPECT_EQ(json["input"][0]["data_type"], "TYPE_INT64");
  EXPECT_EQ(json["input"][0]["dims"], nlohmann::json::array({-1}));
  EXPECT_EQ(json["parameters"]["k"]["string_value"], "v");
  EXPECT_FALSE(json.contains("dynamic_batching"));
}

TEST(ProtoJsonTest, Uint64StatisticsStayExact) {
  inference::ModelStatistics stats;
  stats.set_inference_count(uint64_t{1} << 60);
  stats.mutable_inference_stats()->mutable_success()->set_ns(42);
  const nlohmann::json json = ProtoToJson(stats);
  EXPECT_EQ(json["inference_count"].get<uint64_t>(), uint64_t{1} << 60);
  EXPECT_EQ(json["inference_stats"]["success"]["ns"], 42);
  EXPECT_EQ(json["inference_stats"]["success"]["count"], 0);
}

}  // namespace
}  // namespace castserve
