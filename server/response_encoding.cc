#include "server/response_encoding.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

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

}  // namespace

size_t LengthDelimitedHeaderSize(int field, uint64_t length) {
  return CodedOutputStream::VarintSize32(LengthDelimitedTag(field)) +
         CodedOutputStream::VarintSize64(length);
}

void AppendMessageWithData(const google::protobuf::MessageLite& message, int data_field,
                           uint64_t data_length, std::string* out) {
  AppendSerialized(message, message.ByteSizeLong(), out);
  AppendLengthDelimitedHeader(data_field, data_length, out);
}

void AppendSubmessageWithData(int field, const google::protobuf::MessageLite& message,
                              int data_field, uint64_t data_length, std::string* out) {
  const size_t size = message.ByteSizeLong();
  AppendLengthDelimitedHeader(
      field, size + LengthDelimitedHeaderSize(data_field, data_length) + data_length, out);
  AppendSerialized(message, size, out);
  AppendLengthDelimitedHeader(data_field, data_length, out);
}

void AppendSubmessage(int field, const google::protobuf::MessageLite& message, std::string* out) {
  const size_t size = message.ByteSizeLong();
  AppendLengthDelimitedHeader(field, size, out);
  AppendSerialized(message, size, out);
}

}  // namespace blockread::server
