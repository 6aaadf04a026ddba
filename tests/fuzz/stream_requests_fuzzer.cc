// A ReadBlocks stream's request handling at the server's accept point, without gRPC's transport: a
// ReadBlocksRequest message parsed from the input bytes, each ReadItem turned into an engine read
// as server/read_calls.cc does, all of them run through a real engine (io_uring, registered
// buffers, small slot pools so reads wait for slots) over a real device, and every answer gathered
// and cut into response messages by the server's own ResultBatch (server/result_batch.h) under a
// message size limit that varies with the input, results of 1 KiB or more sent from their kept
// slot as the zero-copy path does. The device: a 256 KiB regular file served whole as "dev", and a
// file "m" of mapped, hole and unwritten extents on it whose size ends inside a block.
//
// Checks: every message parses as a ReadBlocksResponse and is no larger than the limit unless it
// holds a single result; every item is answered exactly once, in a message; its answer is what the
// request contract promises, in that order: INVALID_ARGUMENT (length 0 or over max_read_bytes, or
// an end past 64 bits), NOT_FOUND (no such file), OUT_OF_RANGE (offset past EOF), or the file's
// bytes from offset to min(offset + length, size), byte for byte. Never DATA_LOSS. Every kept slot
// is given back (the engine would run out of slots otherwise).
#include <google/protobuf/stubs/logging.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "blockread/v1/blockread.pb.h"
#include "server/result_batch.h"
#include "storage/catalog.h"
#include "storage/read_path.h"
#include "tests/fuzz/fuzz_check.h"

namespace blockread::storage {
namespace {

constexpr uint64_t kDeviceBytes = 256 << 10;
constexpr uint64_t kBlock = 4096;  // extents of "m" are multiples of it (and of the device's)
constexpr uint64_t kFileSize = 17 * kBlock + 1000;
constexpr size_t kMaxItems = 64;  // per input: time goes to I/O

// Device byte i; distinct for every offset's low bits, so misplaced bytes show.
char DeviceByte(uint64_t i) { return static_cast<char>((i * 2654435761u) >> 13); }

// "m": device offset of each file block (-1 hole, -2 unwritten), then a partial block.
const int64_t kFileBlocks[] = {3, 4, 5, -1, -1, 60, -2, -2, 7, 8, 9, 10, 11, 12, -1, 30, 31, 32};

struct World {
  std::filesystem::path scratch;
  Catalog catalog;
  std::unique_ptr<EngineContext> engine;
  EngineConfig config;
};
World* world = nullptr;

// The expected bytes of [offset, offset + length) of `file` (already validated and in range).
std::string Expected(const std::string& file, uint64_t offset, uint64_t length) {
  const uint64_t size = file == "dev" ? kDeviceBytes : kFileSize;
  const uint64_t end = offset + std::min(length, size - offset);
  std::string bytes;
  for (uint64_t i = offset; i < end; ++i) {
    if (file == "dev") {
      bytes.push_back(DeviceByte(i));
    } else {
      const int64_t block = kFileBlocks[i / kBlock];
      bytes.push_back(block < 0 ? '\0' : DeviceByte(block * kBlock + i % kBlock));
    }
  }
  return bytes;
}

void MakeWorld() {
  world = new World;
  char dir[] = "/tmp/blockread-fuzz-stream-requests-XXXXXX";
  FUZZ_CHECK(mkdtemp(dir) != nullptr);
  world->scratch = dir;
  std::atexit([] {
    world->engine.reset();  // waits for reads in flight before the files go
    std::filesystem::remove_all(world->scratch);
  });
  const std::string device_path = world->scratch / "dev.img";
  {
    std::ofstream out(device_path, std::ios::binary);
    for (uint64_t i = 0; i < kDeviceBytes; ++i) out.put(DeviceByte(i));
    FUZZ_CHECK(out.good());
  }
  FUZZ_CHECK(world->catalog.AddWholeDevice("dev", device_path).ok());
  const DeviceId dev = 0;
  const uint32_t block_size = world->catalog.device(dev).logical_block_size();
  FUZZ_CHECK(kBlock % block_size == 0);
  std::vector<Extent> extents;
  for (size_t b = 0; b < std::size(kFileBlocks); ++b) {
    const int64_t block = kFileBlocks[b];
    if (block == -1) continue;  // a gap reads as a hole
    const bool unwritten = block == -2;
    // Contiguous runs stay separate extents: reads that span them take the generic path. The
    // last one ends at the file's block-rounded size.
    extents.push_back(Extent{b * kBlock,
                             std::min(kBlock, RoundUp(kFileSize, block_size) - b * kBlock),
                             unwritten ? ExtentType::kUnwritten : ExtentType::kMapped, dev,
                             unwritten ? 0 : static_cast<uint64_t>(block) * kBlock});
  }
  auto map = FileMap::Create("m", kFileSize, block_size, FileSource::kManifest, std::move(extents));
  FUZZ_CHECK(map.ok());
  FUZZ_CHECK(world->catalog.AddStaticFile(*std::move(map)).ok());

  world->config.simple_max_bytes = 4096;
  world->config.max_read_bytes = 64 << 10;
  world->config.max_io_bytes = 16 << 10;  // so generic reads split
  world->config.simple_slots = 4;
  world->config.generic_slots = 2;
  world->config.ring_entries = 16;
  auto engine = EngineContext::Create(world->catalog, world->config);
  if (!engine.ok()) {
    std::fprintf(stderr, "stream_requests fuzzer: no engine: %s\n",
                 engine.status().ToString().c_str());
    std::abort();
  }
  world->engine = *std::move(engine);
}

absl::StatusCode ExpectedCode(const v1::ReadItem& item) {
  const uint64_t length = item.length();
  if (length == 0 || length > world->config.max_read_bytes || item.offset() > UINT64_MAX - length) {
    return absl::StatusCode::kInvalidArgument;
  }
  if (item.file() != "dev" && item.file() != "m") return absl::StatusCode::kNotFound;
  const uint64_t size = item.file() == "dev" ? kDeviceBytes : kFileSize;
  if (item.offset() > size) return absl::StatusCode::kOutOfRange;
  return absl::StatusCode::kOk;
}

// Results of 1 KiB or more keep their slot, and their data goes into the message from it, as
// server/read_calls.h's kMinZeroCopyBytes has it.
constexpr uint64_t kMinZeroCopyBytes = 1024;

// One input's stream: the results gathered, the messages cut from them, what each item got.
struct Stream {
  server::ResultBatch batch;
  uint64_t message_limit = 0;
  std::vector<int> answers;  // by item index, from the parsed messages
  std::vector<v1::ReadResult> results;
};

// Tags carry the item's index in their low bits (the server echoes whatever tag the client sent;
// duplicates would make answers ambiguous here, not wrong there).
constexpr uint64_t kIndexBits = 6;
static_assert(kMaxItems <= (1u << kIndexBits));

struct PendingRead {
  Stream* stream = nullptr;
  uint64_t tag = 0;
};

void AddError(Stream& stream, uint64_t tag, const absl::Status& status) {
  v1::ReadResult out;
  out.set_tag(tag);
  out.set_code(static_cast<int>(status.code()));
  out.set_error_message(std::string(status.message()));
  stream.batch.AddMessage(out);
}

bool OnDone(void* context, const ReadResult& result) {
  const auto& read = *static_cast<PendingRead*>(context);
  if (!result.status.ok()) {
    AddError(*read.stream, read.tag, result.status);
    return false;
  }
  server::ReadFields fields;
  fields.tag = read.tag;
  fields.path = result.path == ReadPathKind::kSimple ? v1::SIMPLE : v1::GENERIC;
  fields.device_ns = result.device_ns;
  if (result.length >= kMinZeroCopyBytes) {
    read.stream->batch.AddHeld(fields, server::HeldSlotOf(result));
    return true;
  }
  read.stream->batch.AddCopied(fields, result.data, result.length);
  return false;
}

// Cuts the next message from the batch as ReadBlocksCall::MaybeWrite does (headers from the
// batch's bytes, held data from the slots in between), gives the slots back, parses it.
void WriteOneMessage(Stream& stream) {
  const server::ResultBatch::Message next = stream.batch.Next(stream.message_limit);
  FUZZ_CHECK(next.count > 0);
  std::string message;
  size_t piece_begin = 0;
  for (size_t i = 0; i < next.count; ++i) {
    const server::ResultBatch::Result& result = stream.batch.result(i);
    if (!result.held) continue;
    message.append(stream.batch.bytes(), piece_begin, result.end - piece_begin);
    message.append(result.slot.data, result.slot.length);
    world->engine->Release(result.slot.handle);  // as gRPC letting go of the slice
    piece_begin = result.end;
  }
  message.append(stream.batch.bytes(), piece_begin, next.bytes_end - piece_begin);
  FUZZ_CHECK(message.size() == next.size);
  FUZZ_CHECK(next.count == 1 || next.size <= stream.message_limit);
  stream.batch.Consume(next);

  v1::ReadBlocksResponse response;
  FUZZ_CHECK(response.ParseFromString(message));
  FUZZ_CHECK(static_cast<size_t>(response.results_size()) == next.count);
  for (v1::ReadResult& result : *response.mutable_results()) {
    const size_t index = result.tag() & ((1u << kIndexBits) - 1);
    FUZZ_CHECK(index < stream.answers.size());
    ++stream.answers[index];
    stream.results[index] = std::move(result);
  }
}

void FuzzOne(const uint8_t* data, size_t size) {
  v1::ReadBlocksRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;  // gRPC fails the stream
  const size_t count = std::min<size_t>(request.reads_size(), kMaxItems);
  Stream stream;
  // From 512 bytes (most results alone) to 128 KiB (many together).
  stream.message_limit = 512 << (size % 9);
  stream.answers.assign(count, 0);
  stream.results.resize(count);
  std::vector<PendingRead> pending(count);
  EngineContext& engine = *world->engine;
  const auto turn = [&] {
    engine.PollOnce();
    // As the stream's flush after each worker turn, and its backpressure: write while more than a
    // message's worth waits.
    if (!stream.batch.empty()) WriteOneMessage(stream);
    while (stream.batch.size() > stream.message_limit) WriteOneMessage(stream);
  };
  for (size_t i = 0; i < count; ++i) {
    const v1::ReadItem& item = request.reads(static_cast<int>(i));
    pending[i] = PendingRead{&stream, (item.tag() & ~uint64_t{(1u << kIndexBits) - 1}) | i};
    ReadRequest read;
    read.file = item.file();
    read.offset = item.offset();
    read.length = item.length();
    absl::Status refusal;
    StartOutcome outcome;
    // Busy: every slot of the path is taken; the server's admission queue retries after a turn.
    while (IsBusy(outcome = engine.StartRead(read, &OnDone, &pending[i], &refusal))) {
      FUZZ_CHECK(engine.reads_in_flight() > 0 || !stream.batch.empty());
      turn();
    }
    if (outcome == StartOutcome::kCompleted) {
      FUZZ_CHECK(!refusal.ok());
      AddError(stream, pending[i].tag, refusal);
    }
  }
  while (engine.reads_in_flight() > 0 || !stream.batch.empty()) turn();

  for (size_t i = 0; i < count; ++i) {
    const v1::ReadItem& item = request.reads(static_cast<int>(i));
    const v1::ReadResult& result = stream.results[i];
    FUZZ_CHECK(stream.answers[i] == 1);
    FUZZ_CHECK(result.tag() == pending[i].tag);
    FUZZ_CHECK(result.code() == static_cast<int>(ExpectedCode(item)));
    if (result.code() == 0) {
      FUZZ_CHECK(result.data() == Expected(item.file(), item.offset(), item.length()));
    } else {
      FUZZ_CHECK(!result.error_message().empty());
    }
  }
}

}  // namespace
}  // namespace blockread::storage

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // rejected inputs are the norm: no log line each
  blockread::storage::MakeWorld();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blockread::storage::FuzzOne(data, size);
  return 0;
}
