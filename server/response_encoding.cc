#include "server/response_encoding.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <type_traits>

namespace blockread::server {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

uint32_t LengthDelimitedTag(int field) {
  return WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}

// Appends `message`, whose ByteSizeLong() was just computed as `size`.
void AppendSerialized(const google::protobuf::MessageLite& message, size_t size, std::string* out) {
  const size_t at = out->size();
  out->resize(at + size);
  message.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out->data() + at));
}

// Appends the tag and length of length-delimited field `field` carrying `length` bytes.
void AppendLengthDelimitedHeader(int field, uint64_t length, std::string* out) {
  uint8_t header[2 * 10];  // two varints of at most 10 bytes
  uint8_t* end = CodedOutputStream::WriteVarint32ToArray(LengthDelimitedTag(field), header);
  end = CodedOutputStream::WriteVarint64ToArray(length, end);
  out->append(reinterpret_cast<const char*>(header), static_cast<size_t>(end - header));
}

// Bounds of what Encode writes before the data: tags of one byte, varints of at most 10 bytes,
// the timing submessage at most 1 + 1 + 3 * 11 bytes.
constexpr size_t kMaxFieldsBytes = 11 + 11 + 11 + 2 + 33 + 5;

uint8_t* WriteVarintField(int field, uint64_t value, uint8_t* at) {
  at = CodedOutputStream::WriteVarint32ToArray(
      WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_VARINT), at);
  return CodedOutputStream::WriteVarint64ToArray(value, at);
}

// `fields` as `Message` (ReadBlockResponse or ReadResult) serializes them, data left out: proto3
// leaves zero scalars out, the timing submessage is always set.
template <typename Message>
size_t EncodeFields(const ReadFields& fields, uint8_t* begin) {
  uint8_t* at = begin;
  if constexpr (std::is_same_v<Message, v1::ReadResult>) {
    if (fields.tag != 0) at = WriteVarintField(Message::kTagFieldNumber, fields.tag, at);
  }
  if (fields.path != 0) {
    at = WriteVarintField(Message::kPathFieldNumber, static_cast<uint64_t>(fields.path), at);
  }
  if (fields.fallback != 0) {
    at =
        WriteVarintField(Message::kFallbackFieldNumber, static_cast<uint64_t>(fields.fallback), at);
  }
  uint8_t timing[33];
  uint8_t* timing_end = timing;
  if (fields.queue_ns != 0) {
    timing_end =
        WriteVarintField(v1::ServerTiming::kQueueNsFieldNumber, fields.queue_ns, timing_end);
  }
  if (fields.device_ns != 0) {
    timing_end =
        WriteVarintField(v1::ServerTiming::kDeviceNsFieldNumber, fields.device_ns, timing_end);
  }
  if (fields.total_ns != 0) {
    timing_end =
        WriteVarintField(v1::ServerTiming::kTotalNsFieldNumber, fields.total_ns, timing_end);
  }
  at = CodedOutputStream::WriteVarint32ToArray(LengthDelimitedTag(Message::kTimingFieldNumber), at);
  at = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(timing_end - timing), at);
  at = std::copy(timing, timing_end, at);
  if (fields.has_crc32c) {
    at = CodedOutputStream::WriteVarint32ToArray(
        WireFormatLite::MakeTag(Message::kCrc32CFieldNumber, WireFormatLite::WIRETYPE_FIXED32), at);
    at = CodedOutputStream::WriteLittleEndian32ToArray(fields.crc32c, at);
  }
  return static_cast<size_t>(at - begin);
}

void AppendBytes(const uint8_t* begin, size_t size, std::string* out) {
  out->append(reinterpret_cast<const char*>(begin), size);
}

}  // namespace

void AppendReadBlockResponseHeader(const ReadFields& fields, uint64_t data_length,
                                   std::string* out) {
  uint8_t encoded[kMaxFieldsBytes];
  AppendBytes(encoded, EncodeFields<v1::ReadBlockResponse>(fields, encoded), out);
  AppendLengthDelimitedHeader(v1::ReadBlockResponse::kDataFieldNumber, data_length, out);
}

void AppendReadResultHeader(const ReadFields& fields, uint64_t data_length, std::string* out) {
  uint8_t encoded[kMaxFieldsBytes];
  const size_t size = EncodeFields<v1::ReadResult>(fields, encoded);
  const int data_field = v1::ReadResult::kDataFieldNumber;
  AppendLengthDelimitedHeader(
      v1::ReadBlocksResponse::kResultsFieldNumber,
      size + LengthDelimitedHeaderSize(data_field, data_length) + data_length, out);
  AppendBytes(encoded, size, out);
  AppendLengthDelimitedHeader(data_field, data_length, out);
}

size_t LengthDelimitedHeaderSize(int field, uint64_t length) {
  return CodedOutputStream::VarintSize32(LengthDelimitedTag(field)) +
         CodedOutputStream::VarintSize64(length);
}

void AppendSubmessage(int field, const google::protobuf::MessageLite& message, std::string* out) {
  const size_t size = message.ByteSizeLong();
  AppendLengthDelimitedHeader(field, size, out);
  AppendSerialized(message, size, out);
}

}  // namespace blockread::server
