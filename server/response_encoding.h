// The read responses' wire format written by hand around data that is sent without a copy.
//
// In the protobuf encoding a `bytes` field is its tag, its length as a varint, then the bytes, and
// parsers accept a message's fields in any order. So a response whose data stays in an engine
// buffer is sent as: the message's other fields serialized by protobuf, then the header (tag and
// length) of its data field written here, then the buffer itself as a separate slice. Every
// generated client, in any language, parses that as the message it always was. A repeated
// submessage (ReadBlocksResponse.results) is a length-delimited field in the same way, whose
// length counts the data that follows.
//
// Field numbers come from the generated code (k...FieldNumber), so they follow the .proto.
#ifndef BLOCKREAD_SERVER_RESPONSE_ENCODING_H_
#define BLOCKREAD_SERVER_RESPONSE_ENCODING_H_

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>

namespace blockread::server {

// Bytes of the tag and length of length-delimited field `field` carrying `length` bytes.
size_t LengthDelimitedHeaderSize(int field, uint64_t length);

// Appends `message` serialized, then the header of its length-delimited field `data_field` for
// `data_length` bytes that the caller sends right after. REQUIRES: `message` leaves `data_field`
// empty (a second occurrence of a bytes field would replace the first).
void AppendMessageWithData(const google::protobuf::MessageLite& message, int data_field,
                           uint64_t data_length, std::string* out);

// The same as field `field` of an enclosing message: its header (the length counts the data
// that follows), then AppendMessageWithData.
void AppendSubmessageWithData(int field, const google::protobuf::MessageLite& message,
                              int data_field, uint64_t data_length, std::string* out);

// Appends `message`, complete, as length-delimited field `field` of an enclosing message.
void AppendSubmessage(int field, const google::protobuf::MessageLite& message, std::string* out);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_RESPONSE_ENCODING_H_
