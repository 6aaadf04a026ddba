// The label names of proto/wire/labels.h are the blockread.v1 enum value names, lowercased and
// without the "FALLBACK_" prefix, for every value the proto defines: a value added to the proto
// without its label fails here (and the count check in server/proto_conversions.h fails the build).
#include "proto/wire/labels.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "blockread/v1/blockread.pb.h"
#include "gtest/gtest.h"

namespace blockread::wire {
namespace {

TEST(LabelsTest, PathLabelsAreTheProtoNames) {
  const google::protobuf::EnumDescriptor* paths = v1::ReadPath_descriptor();
  ASSERT_EQ(static_cast<size_t>(paths->value_count()), kPathLabels.size());
  for (int i = 0; i < paths->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* value = paths->value(i);
    EXPECT_EQ(PathLabel(value->number()), absl::AsciiStrToLower(value->name()));
  }
  EXPECT_STREQ(PathLabel(v1::SIMPLE), "simple");
  EXPECT_STREQ(PathLabel(v1::GENERIC), "generic");
}

TEST(LabelsTest, FallbackLabelsAreTheProtoNames) {
  const google::protobuf::EnumDescriptor* reasons = v1::FallbackReason_descriptor();
  ASSERT_EQ(static_cast<size_t>(reasons->value_count()), kFallbackLabels.size());
  for (int i = 0; i < reasons->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* value = reasons->value(i);
    EXPECT_EQ(FallbackLabel(value->number()),
              absl::AsciiStrToLower(absl::StripPrefix(value->name(), "FALLBACK_")));
  }
  EXPECT_STREQ(FallbackLabel(v1::FALLBACK_NONE), "none");
  EXPECT_STREQ(FallbackLabel(v1::FALLBACK_NOT_MAPPED), "not_mapped");
}

TEST(LabelsTest, ValuesFromANewerServerAreUnknown) {
  EXPECT_STREQ(PathLabel(-1), kUnknownLabel);
  EXPECT_STREQ(PathLabel(static_cast<int>(kPathLabels.size())), kUnknownLabel);
  EXPECT_STREQ(FallbackLabel(static_cast<int>(kFallbackLabels.size())), kUnknownLabel);
}

}  // namespace
}  // namespace blockread::wire
