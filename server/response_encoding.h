// The read responses' wire format written by hand around data that is sent without a copy.
//
// In the protobuf encoding a `bytes` field is its tag, its length as a varint, then the bytes, and
// parsers accept a message's fields in any order. So a response whose data stays in an engine
// buffer is sent as: the message's other fields, then the header (tag and length) of its data
// field, both written here, then the buffer itself as a separate slice. Every generated client, in
// any language, parses that as the message it always was. A repeated submessage
// (ReadBlocksResponse.results) is a length-delimited field in the same way, whose length counts
// the data that follows.
//
// The other fields of a successful read are few and fixed, so they are encoded here straight
// from a ReadFields, as protobuf itself would: building a ReadResult message to serialize it cost
// about a thousand instructions per read (allocating its timing submessage among them), a tenth
// of the server's cost of a streamed 4K read. Failed reads, rare and carrying text, go through
// protobuf (AppendSubmessage).
//
// Field numbers come from the generated code (k...FieldNumber), so they follow the .proto.
#ifndef BLOCKREAD_SERVER_RESPONSE_ENCODING_H_
#define BLOCKREAD_SERVER_RESPONSE_ENCODING_H_

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>

#include "blockread/v1/blockread.pb.h"

namespace blockread::server {

// What a successful read's response says besides its data (ReadBlockResponse, and a
// ReadBlocksResponse result), in the proto's terms.
struct ReadFields {
  uint64_t tag = 0;  // ReadResult only
  v1::ReadPath path = v1::READ_PATH_UNSPECIFIED;
  v1::FallbackReason fallback = v1::FALLBACK_NONE;
  uint64_t queue_ns = 0, device_ns = 0, total_ns = 0;  // ServerTiming (always present)
  bool has_crc32c = false;
  uint32_t crc32c = 0;
};

// Appends a ReadBlockResponse with `fields`, up to and including the header of its data field for
// `data_length` bytes that the caller sends right after.
void AppendReadBlockResponseHeader(const ReadFields& fields, uint64_t data_length,
                                   std::string* out);

// Appends a ReadBlocksResponse `results` entry with `fields`, up to and including the header of
// its data field for `data_length` bytes that the caller sends right after (the entry's length
// counts them).
void AppendReadResultHeader(const ReadFields& fields, uint64_t data_length, std::string* out);

// Bytes of the tag and length of length-delimited field `field` carrying `length` bytes.
size_t LengthDelimitedHeaderSize(int field, uint64_t length);

// Appends `message`, complete, as length-delimited field `field` of an enclosing message.
void AppendSubmessage(int field, const google::protobuf::MessageLite& message, std::string* out);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_RESPONSE_ENCODING_H_
