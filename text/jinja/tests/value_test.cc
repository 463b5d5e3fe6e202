// Python's str/repr of values and json.dumps as tojson calls it; the
// expected texts are what CPython 3 prints.
#include "text/jinja/value.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "text/jinja/bound_args.h"
#include "text/jinja/builtins.h"

namespace castserve::text::jinja {
namespace {

constexpr ValueBounds kBounds{1 << 20, 64};

std::string Str(const Value& value) { return *ToStr(value, kBounds); }
std::string Repr(const Value& value) { return *ToRepr(value, kBounds); }

absl::StatusOr<std::string> Json(const Value& value, const Value& indent,
                                 bool sort_keys,
                                 const ValueBounds& bounds = kBounds) {
  BoundArgs options(4);
  options.Set(1, indent);
  options.Set(3, Value::Bool(sort_keys));
  return ToJson(value, options, bounds);
}

TEST(ValueTest, FloatReprIsPythons) {
  EXPECT_EQ(FloatRepr(0.1), "0.1");
  EXPECT_EQ(FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FloatRepr(1.0), "1.0");
  EXPECT_EQ(FloatRepr(100.0), "100.0");
  EXPECT_EQ(FloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(1.5e16), "1.5e+16");
  EXPECT_EQ(FloatRepr(123456789012345680.0), "1.2345678901234568e+17");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(0.00001), "1e-05");
  EXPECT_EQ(FloatRepr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FloatRepr(-0.0), "-0.0");
  EXPECT_EQ(FloatRepr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FloatRepr(std::nan("")), "nan");
  EXPECT_EQ(FloatRepr(1e308), "1e+308");
}

TEST(ValueTest, StrAndReprArePythons) {
  Dict dict;
  dict.Set("b", Value::List({Value::Int(1), Value::None(), Value::Bool(true)}));
  dict.Set("a", Value::String("it's"));
  Value value = Value::FromDict(dict);
  EXPECT_EQ(Str(value), "{'b': [1, None, True], 'a': \"it's\"}");
  EXPECT_EQ(Repr(Value::String("say \"hi\" it's")), "'say \"hi\" it\\'s'");
  EXPECT_EQ(Repr(Value::String("tab\tnl\n\x01 \xe2\x80\x8b \xc3\xa9")),
            "'tab\\tnl\\n\\x01 \\u200b \xc3\xa9'");
  EXPECT_EQ(Str(Value::List({Value::Int(1)}, true)), "(1,)");
  EXPECT_EQ(Str(Value()), "");
  EXPECT_EQ(Str(Value::Bool(false)), "False");
  // A re-set key keeps its place, as in Python's dict.
  dict.Set("b", Value::Int(2));
  EXPECT_EQ(Str(Value::FromDict(dict)), "{'b': 2, 'a': \"it's\"}");
}

TEST(ValueTest, EqualityAndTruthArePythons) {
  EXPECT_TRUE(Equals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(Equals(Value::Bool(true), Value::Int(1)));
  EXPECT_FALSE(Equals(Value::String("1"), Value::Int(1)));
  EXPECT_TRUE(Equals(Value(), Value::Undefined("other")));
  EXPECT_FALSE(Equals(Value(), Value::None()));
  EXPECT_FALSE(Truthy(Value::String("")));
  EXPECT_FALSE(Truthy(Value::List({})));
  NamespaceOwner namespaces;
  EXPECT_TRUE(Truthy(namespaces.Create(Dict())));
  EXPECT_FALSE(Truthy(Value::Float(0.0)));
}

TEST(ValueTest, ToJsonIsJsonDumps) {
  Dict dict;
  dict.Set("z", Value::String("\xc3\xa9\"\n\x01"));
  dict.Set("a", Value::List({Value::Float(2.0), Value::None()}));
  Value value = Value::FromDict(dict);
  EXPECT_EQ(*Json(value, Value::None(), false),
            "{\"z\": \"\xc3\xa9\\\"\\n\\u0001\", \"a\": [2.0, null]}");
  EXPECT_EQ(*Json(value, Value::Int(1), true),
            "{\n \"a\": [\n  2.0,\n  null\n ],\n \"z\": \"\xc3\xa9\\\"\\n"
            "\\u0001\"\n}");
  EXPECT_FALSE(Json(Value(), Value::None(), false).ok());
}

}  // namespace
}  // namespace castserve::text::jinja
