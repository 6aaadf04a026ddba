// The manifest loader over fuzzed textproto, with real devices: three regular files, 1 MiB,
// 64 KiB and 12 KiB, in a scratch directory that is the working directory. Inputs that name any
// other device path are skipped, so the fuzzer never opens what it finds on the machine (a FIFO
// would block, a device node could be anything). Checks: a failed load names the manifest and
// leaves the catalog empty (all or nothing); a load that succeeds serves only maps the engine can
// read: every extent inside its device and aligned to the file's block size, which is the largest
// of its devices', no size beyond the last extent.
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "blockread/v1/manifest.pb.h"
#include "storage/manifest.h"
#include "tests/fuzz/fuzz_check.h"

namespace blockread::storage {
namespace {

constexpr char kSource[] = "fuzz.textproto";
const std::pair<const char*, uint64_t> kDevices[] = {
    {"d0.img", 1 << 20}, {"d1.img", 64 << 10}, {"d2.img", 12 << 10}};

std::filesystem::path scratch;

void MakeDevices() {
  char dir[] = "/tmp/blockread-fuzz-manifest-XXXXXX";
  FUZZ_CHECK(mkdtemp(dir) != nullptr);
  scratch = dir;
  for (const auto& [name, bytes] : kDevices) {
    std::ofstream out(scratch / name, std::ios::binary);
    out << std::string(bytes, '\x5a');
    FUZZ_CHECK(out.good());
  }
  std::filesystem::current_path(scratch);
  std::atexit([] { std::filesystem::remove_all(scratch); });
}

bool OnlyOurDevices(const std::string& text) {
  v1::Manifest manifest;
  google::protobuf::TextFormat::Parser parser;
  if (!parser.ParseFromString(text, &manifest)) return true;  // a syntax error opens nothing
  for (const v1::ManifestDevice& device : manifest.device()) {
    if (std::none_of(std::begin(kDevices), std::end(kDevices),
                     [&](const auto& d) { return device.path() == d.first; })) {
      return false;
    }
  }
  return true;
}

void CheckServable(Catalog& catalog) {
  for (const std::string& name : catalog.FileNames()) {
    absl::StatusOr<FileMapRef> map = catalog.Resolve(name);
    FUZZ_CHECK(map.ok());
    const FileMap& m = **map;
    FUZZ_CHECK(m.source() == FileSource::kManifest);
    uint32_t largest_block = 512;
    uint64_t end = 0;
    for (const Extent& e : m.extents()) {
      if (e.type != ExtentType::kHole) {
        FUZZ_CHECK(e.device < catalog.device_count());
        const Device& device = catalog.device(e.device);
        largest_block = std::max(largest_block, device.logical_block_size());
        FUZZ_CHECK(e.physical_offset % m.block_size() == 0);
        FUZZ_CHECK(e.physical_offset <= device.size() &&
                   e.length <= device.size() - e.physical_offset);
      }
      FUZZ_CHECK(e.logical_offset % m.block_size() == 0 && e.length % m.block_size() == 0);
      end = e.logical_end();
    }
    FUZZ_CHECK(m.block_size() == largest_block);
    FUZZ_CHECK(m.size() <= end);
  }
}

void FuzzOne(const std::string& text) {
  if (!OnlyOurDevices(text)) return;
  Catalog catalog;
  const absl::Status loaded = LoadManifestText(text, kSource, catalog);
  if (!loaded.ok()) {
    FUZZ_CHECK(absl::StartsWith(loaded.message(), absl::StrCat(kSource, ":")));
    FUZZ_CHECK(catalog.device_count() == 0 && catalog.file_count() == 0);
    return;
  }
  CheckServable(catalog);
}

}  // namespace
}  // namespace blockread::storage

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // rejected inputs are the norm: no log line each
  blockread::storage::MakeDevices();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blockread::storage::FuzzOne(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
