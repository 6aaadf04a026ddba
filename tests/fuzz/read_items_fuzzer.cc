// The per-read handling of a ReadBlocks stream, without gRPC: a ReadBlocksRequest message parsed
// from the input bytes, each ReadItem turned into an engine read as server/read_calls.cc does, and
// all of them run through a real engine (io_uring, registered buffers, small slot pools so reads
// wait for slots) over a real device: a 256 KiB regular file served whole as "dev", and a file
// "m" of mapped, hole and unwritten extents on it whose size ends inside a block.
//
// The stream's own code (ReadBlocksCall) needs a gRPC server to run and is not fuzzed here; nor
// is gRPC's message framing. Checks: every item is answered exactly once; its answer is what the
// request contract promises in that order: INVALID_ARGUMENT (length 0 or over max_read_bytes, or
// an end past 64 bits), NOT_FOUND (no such file), OUT_OF_RANGE (offset past EOF), or the file's
// bytes from offset to min(offset + length, size), byte for byte. Never DATA_LOSS.
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
  char dir[] = "/tmp/blockread-fuzz-read-items-XXXXXX";
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
    std::fprintf(stderr, "read_items fuzzer: no engine: %s\n", engine.status().ToString().c_str());
    std::abort();
  }
  world->engine = *std::move(engine);
}

struct Answer {
  int answers = 0;
  absl::Status status;
  std::string data;
};

bool OnDone(void* context, const ReadResult& result) {
  auto& answer = *static_cast<Answer*>(context);
  ++answer.answers;
  answer.status = result.status;
  if (result.status.ok()) answer.data.assign(result.data, result.length);
  return false;
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

void FuzzOne(const uint8_t* data, size_t size) {
  v1::ReadBlocksRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;  // gRPC fails the stream
  const size_t count = std::min<size_t>(request.reads_size(), kMaxItems);
  std::vector<Answer> answers(count);
  EngineContext& engine = *world->engine;
  for (size_t i = 0; i < count; ++i) {
    const v1::ReadItem& item = request.reads(static_cast<int>(i));
    ReadRequest read;
    read.file = item.file();
    read.offset = item.offset();
    read.length = item.length();
    absl::Status refusal;
    StartOutcome outcome;
    // Busy: every slot of the path (or the device's share) is taken; the server's admission queue
    // retries after a poll.
    while (IsBusy(outcome = engine.StartRead(read, &OnDone, &answers[i], &refusal))) {
      FUZZ_CHECK(engine.reads_in_flight() > 0);
      engine.PollOnce();
    }
    if (outcome == StartOutcome::kCompleted) {
      FUZZ_CHECK(!refusal.ok());
      ++answers[i].answers;
      answers[i].status = refusal;
    }
  }
  while (engine.reads_in_flight() > 0) engine.PollOnce();

  for (size_t i = 0; i < count; ++i) {
    const v1::ReadItem& item = request.reads(static_cast<int>(i));
    const Answer& answer = answers[i];
    FUZZ_CHECK(answer.answers == 1);
    FUZZ_CHECK(answer.status.code() == ExpectedCode(item));
    if (answer.status.ok()) {
      FUZZ_CHECK(answer.data == Expected(item.file(), item.offset(), item.length()));
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
