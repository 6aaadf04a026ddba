#include "server/result_batch.h"

#include "server/response_encoding.h"

namespace blockread::server {

void ResultBatch::AddCopied(const ReadFields& fields, const void* data, uint64_t length) {
  const size_t before = bytes_.size();
  AppendReadResultHeader(fields, length, &bytes_);
  bytes_.append(static_cast<const char*>(data), length);
  results_.push_back(Result{bytes_.size(), false, HeldSlot()});
  size_ += bytes_.size() - before;
}

void ResultBatch::AddHeld(const ReadFields& fields, const HeldSlot& slot) {
  const size_t before = bytes_.size();
  AppendReadResultHeader(fields, slot.length, &bytes_);
  results_.push_back(Result{bytes_.size(), true, slot});
  size_ += bytes_.size() - before + slot.length;
}

void ResultBatch::AddMessage(const v1::ReadResult& result) {
  const size_t before = bytes_.size();
  AppendSubmessage(v1::ReadBlocksResponse::kResultsFieldNumber, result, &bytes_);
  results_.push_back(Result{bytes_.size(), false, HeldSlot()});
  size_ += bytes_.size() - before;
}

ResultBatch::Message ResultBatch::Next(uint64_t limit) const {
  Message message;
  size_t header_begin = 0;
  for (; message.count < results_.size(); ++message.count) {
    const Result& result = results_[message.count];
    const uint64_t bytes = result.end - header_begin + (result.held ? result.slot.length : 0);
    if (message.count > 0 && message.size + bytes > limit) break;
    message.size += bytes;
    header_begin = result.end;
  }
  message.bytes_end = header_begin;
  return message;
}

void ResultBatch::Consume(const Message& message) {
  results_.erase(results_.begin(), results_.begin() + static_cast<ptrdiff_t>(message.count));
  bytes_.erase(0, message.bytes_end);
  for (Result& result : results_) result.end -= message.bytes_end;
  size_ -= message.size;
}

}  // namespace blockread::server
