// The hand-written responses of successful reads: what the server sends must parse, with the
// generated code, into exactly the message protobuf itself would have sent, and be no longer.
#include "server/response_encoding.h"

#include <string>
#include <type_traits>
#include <vector>

#include "blockread/v1/blockread.pb.h"
#include "gtest/gtest.h"
#include "server/result_batch.h"

namespace blockread::server {
namespace {

// Lengths around the varint size steps (1, 2, 3 bytes) and a max_read_bytes read.
const std::vector<uint64_t> kLengths = {0, 1, 127, 128, 4096, 16383, 16384, 131072, 1 << 20};

std::string Bytes(uint64_t length, char seed) {
  std::string data(length, '\0');
  for (uint64_t i = 0; i < length; ++i) data[i] = static_cast<char>(seed + i * 7);
  return data;
}

// Fields at the edges of their encodings: zero (left out), one-byte and multi-byte varints, the
// largest values, a present CRC of 0.
std::vector<ReadFields> FieldVariants() {
  std::vector<ReadFields> variants;
  variants.push_back(ReadFields{});
  ReadFields fields;
  fields.tag = 1;
  fields.path = v1::SIMPLE;
  fields.device_ns = 45678;
  variants.push_back(fields);
  fields.tag = ~uint64_t{0};
  fields.path = v1::GENERIC;
  fields.fallback = v1::FALLBACK_UNALIGNED;
  fields.queue_ns = 123;
  fields.total_ns = uint64_t{1} << 40;
  fields.has_crc32c = true;
  fields.crc32c = 0;
  variants.push_back(fields);
  fields.queue_ns = fields.device_ns = fields.total_ns = ~uint64_t{0};
  fields.crc32c = 0xdeadbeef;
  fields.tag = 127;
  variants.push_back(fields);
  return variants;
}

// What protobuf itself builds from `fields` and `data`.
template <typename Message>
Message Built(const ReadFields& fields, const std::string& data) {
  Message message;
  if constexpr (std::is_same_v<Message, v1::ReadResult>) message.set_tag(fields.tag);
  message.set_path(fields.path);
  message.set_fallback(fields.fallback);
  v1::ServerTiming* timing = message.mutable_timing();
  timing->set_queue_ns(fields.queue_ns);
  timing->set_device_ns(fields.device_ns);
  timing->set_total_ns(fields.total_ns);
  if (fields.has_crc32c) message.set_crc32c(fields.crc32c);
  message.set_data(data);
  return message;
}

TEST(ResponseEncodingTest, ReadBlockResponseIsWhatProtobufWouldHaveWritten) {
  for (const ReadFields& fields : FieldVariants()) {
    for (const uint64_t length : kLengths) {
      const std::string data = Bytes(length, 'a');
      std::string wire;
      AppendReadBlockResponseHeader(fields, length, &wire);
      wire += data;  // what the data slice carries

      const auto expected = Built<v1::ReadBlockResponse>(fields, data);
      v1::ReadBlockResponse parsed;
      ASSERT_TRUE(parsed.ParseFromString(wire)) << length;
      EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString()) << length;
      EXPECT_EQ(parsed.has_crc32c(), fields.has_crc32c);
      EXPECT_EQ(wire.size(),
                expected.ByteSizeLong() + (length == 0 ? LengthDelimitedHeaderSize(1, 0) : 0))
          << "only an empty data field costs more than protobuf's own encoding";
    }
  }
}

TEST(ResponseEncodingTest, ReadBlocksResponseMixesLentCopiedAndFailedResults) {
  v1::ReadBlocksResponse expected;
  std::string wire;
  uint64_t n = 0;
  for (const ReadFields& fields : FieldVariants()) {
    for (const uint64_t length : kLengths) {
      ++n;
      const std::string data = Bytes(length, static_cast<char>(n));
      // Header, then the data: from a slot (a slice of its own) or copied behind the header,
      // the same bytes on the wire.
      AppendReadResultHeader(fields, length, &wire);
      wire += data;
      *expected.add_results() = Built<v1::ReadResult>(fields, data);

      // A failed read between them.
      v1::ReadResult failed;
      failed.set_tag(1000 + n);
      failed.set_code(11);
      failed.set_error_message("offset 5 is beyond the end of file x (4 bytes)");
      AppendSubmessage(v1::ReadBlocksResponse::kResultsFieldNumber, failed, &wire);
      *expected.add_results() = failed;
    }
  }
  v1::ReadBlocksResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(parsed.results_size(), 2 * static_cast<int>(n));
}

// The stream's batching: messages cut oldest first at the limit (a result larger than it goes
// alone), each the concatenation of its results with held data in place, parsing to exactly
// those results; what is left keeps its order.
TEST(ResultBatchTest, MessagesAreCutOldestFirstAtTheLimitAndParseToTheirResults) {
  const std::string held_data = Bytes(5000, 'h');
  ResultBatch batch;
  std::vector<v1::ReadResult> expected;
  for (uint64_t tag = 0; tag < 6; ++tag) {
    ReadFields fields;
    fields.tag = tag;
    fields.path = v1::SIMPLE;
    fields.device_ns = 45678;
    if (tag % 3 == 1) {  // held: the data stays in its "slot"
      batch.AddHeld(
          fields, HeldSlot{{}, storage::ReadPathKind::kSimple, held_data.data(), held_data.size()});
      expected.push_back(Built<v1::ReadResult>(fields, held_data));
    } else if (tag % 3 == 2) {
      v1::ReadResult failed;
      failed.set_tag(tag);
      failed.set_code(5);
      failed.set_error_message("file 'x' not found");
      batch.AddMessage(failed);
      expected.push_back(failed);
    } else {
      const std::string data = Bytes(100 + tag, 'c');
      batch.AddCopied(fields, data.data(), data.size());
      expected.push_back(Built<v1::ReadResult>(fields, data));
    }
  }
  size_t total = 0;
  for (const v1::ReadResult& r : expected) {
    v1::ReadBlocksResponse one;
    *one.add_results() = r;
    total += one.ByteSizeLong();
  }
  EXPECT_EQ(batch.size(), total);

  std::vector<size_t> counts;
  size_t next_tag = 0;
  while (!batch.empty()) {
    const ResultBatch::Message next = batch.Next(1000);
    std::string message;
    size_t piece_begin = 0;
    for (size_t i = 0; i < next.count; ++i) {
      const ResultBatch::Result& result = batch.result(i);
      if (!result.held) continue;
      message.append(batch.bytes(), piece_begin, result.end - piece_begin);
      message.append(result.slot.data, result.slot.length);
      piece_begin = result.end;
    }
    message.append(batch.bytes(), piece_begin, next.bytes_end - piece_begin);
    EXPECT_EQ(message.size(), next.size);
    EXPECT_TRUE(next.count == 1 || next.size <= 1000) << next.size;
    batch.Consume(next);
    v1::ReadBlocksResponse response;
    ASSERT_TRUE(response.ParseFromString(message));
    ASSERT_EQ(static_cast<size_t>(response.results_size()), next.count);
    for (const v1::ReadResult& result : response.results()) {
      ASSERT_LT(next_tag, expected.size());
      EXPECT_EQ(result.SerializeAsString(), expected[next_tag++].SerializeAsString());
    }
    counts.push_back(next.count);
  }
  EXPECT_EQ(next_tag, expected.size());
  // 0 and the error fit together; each held 5000-byte result goes alone, past the limit.
  EXPECT_EQ(counts, (std::vector<size_t>{1, 1, 2, 1, 1}));
  EXPECT_EQ(batch.size(), 0u);
}

TEST(ResultBatchTest, ClearGivesBackEveryHeldSlot) {
  ResultBatch batch;
  const std::string data = Bytes(2000, 'z');
  const ReadFields fields;
  batch.AddCopied(fields, data.data(), 10);
  batch.AddHeld(fields, HeldSlot{{}, storage::ReadPathKind::kGeneric, data.data(), data.size()});
  batch.AddHeld(fields, HeldSlot{{}, storage::ReadPathKind::kSimple, data.data(), 1500});
  std::vector<uint64_t> given_back;
  batch.Clear([&](const HeldSlot& slot) { given_back.push_back(slot.length); });
  EXPECT_EQ(given_back, (std::vector<uint64_t>{2000, 1500}));
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(batch.size(), 0u);
}

}  // namespace
}  // namespace blockread::server
