#include "storage/manifest.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "blockread/v1/manifest.pb.h"

namespace blockread::storage {
namespace {

using google::protobuf::TextFormat;
using Tree = TextFormat::ParseInfoTree;

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) error_ = absl::StrFormat("%d:%d: %s", line + 1, column + 1, message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// 1-based line of the index-th value of `field_name` in `tree`, or 0 when unknown.
int LineOf(const Tree* tree, const google::protobuf::Descriptor* type,
           const std::string& field_name, int index) {
  if (tree == nullptr) return 0;
  return tree->GetLocation(type->FindFieldByName(field_name), index).line + 1;
}

// nullopt for a value the schema does not define: proto3 enums are open, so the text parser
// accepts any number (`type: 7`), and guessing MAPPED could serve bytes that are not the file's.
std::optional<ExtentType> ToExtentType(v1::ExtentType type) {
  switch (type) {
    case v1::EXTENT_TYPE_UNSPECIFIED:  // the schema's default: MAPPED
    case v1::MAPPED:
      return ExtentType::kMapped;
    case v1::HOLE:
      return ExtentType::kHole;
    case v1::UNWRITTEN:
      return ExtentType::kUnwritten;
    default:
      return std::nullopt;
  }
}

}  // namespace

absl::Status LoadManifest(const std::string& manifest_path, Catalog& catalog) {
  std::ifstream in(manifest_path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read manifest ", manifest_path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return LoadManifestText(text.str(), manifest_path, catalog);
}

absl::Status LoadManifestText(const std::string& text, const std::string& manifest_path,
                              Catalog& catalog) {
  v1::Manifest manifest;
  Tree tree;
  FirstErrorCollector errors;
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &manifest)) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path, ":", errors.error()));
  }
  auto error_at = [&](int line, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path, ":", line, ": ", what));
  };

  // Devices: open them all before touching the catalog.
  const DeviceId first_id = static_cast<DeviceId>(catalog.device_count());
  std::vector<std::unique_ptr<Device>> devices;
  absl::flat_hash_map<std::string, DeviceId> device_ids;
  for (int i = 0; i < manifest.device_size(); ++i) {
    const v1::ManifestDevice& spec = manifest.device(i);
    const int line = LineOf(&tree, v1::Manifest::descriptor(), "device", i);
    if (spec.name().empty()) return error_at(line, "device has no name");
    if (spec.path().empty())
      return error_at(line, absl::StrCat("device '", spec.name(), "' has no path"));
    if (device_ids.contains(spec.name()) || catalog.FindDevice(spec.name())) {
      return error_at(line, absl::StrCat("duplicate device name '", spec.name(), "'"));
    }
    auto device = Device::Open(spec.name(), spec.path());
    if (!device.ok()) {
      return absl::Status(device.status().code(),
                          absl::StrCat(manifest_path, ":", line, ": ", device.status().message()));
    }
    device_ids[spec.name()] = first_id + static_cast<DeviceId>(devices.size());
    devices.push_back(*std::move(device));
  }

  // Files: validate each completely, with the line of what is wrong.
  std::vector<FileMap> maps;
  absl::flat_hash_set<std::string> file_names;
  const std::vector<std::string> existing = catalog.FileNames();
  for (int f = 0; f < manifest.file_size(); ++f) {
    const v1::ManifestFile& spec = manifest.file(f);
    const int file_line = LineOf(&tree, v1::Manifest::descriptor(), "file", f);
    const Tree* file_tree =
        tree.GetTreeForNested(v1::Manifest::descriptor()->FindFieldByName("file"), f);
    if (spec.name().empty()) return error_at(file_line, "file has no name");
    const std::string file_prefix = absl::StrCat("file '", spec.name(), "': ");
    if (!file_names.insert(spec.name()).second ||
        std::binary_search(existing.begin(), existing.end(), spec.name())) {
      return error_at(file_line, absl::StrCat(file_prefix, "duplicate file name"));
    }

    // The file's alignment is the largest logical block size of the devices it uses.
    uint32_t block_size = 512;
    for (const v1::ManifestExtent& e : spec.extent()) {
      if (auto it = device_ids.find(e.device()); it != device_ids.end()) {
        block_size = std::max(block_size, devices[it->second - first_id]->logical_block_size());
      }
    }

    std::vector<Extent> extents;
    uint64_t previous_end = 0;
    for (int x = 0; x < spec.extent_size(); ++x) {
      const v1::ManifestExtent& e = spec.extent(x);
      const int line = LineOf(file_tree, v1::ManifestFile::descriptor(), "extent", x);
      auto problem = [&](absl::string_view what) {
        return error_at(line, absl::StrFormat("%sextent %d at offset %u: %s", file_prefix, x,
                                              e.logical_offset(), what));
      };
      const std::optional<ExtentType> type = ToExtentType(e.type());
      if (!type) {
        return problem(absl::StrFormat("has unknown type %d (MAPPED, HOLE or UNWRITTEN)",
                                       static_cast<int>(e.type())));
      }
      Extent extent{e.logical_offset(), e.length(), *type, kNoDevice, e.physical_offset()};
      if (extent.length == 0) return problem("has zero length");
      if (extent.logical_offset > UINT64_MAX - extent.length ||
          extent.physical_offset > UINT64_MAX - extent.length) {
        return problem("overflows the 64-bit offset space");
      }
      if (x > 0 && extent.logical_offset < extents.back().logical_offset) {
        return problem(absl::StrFormat("is out of order: the extent before it starts at %u",
                                       extents.back().logical_offset));
      }
      if (x > 0 && extent.logical_offset < previous_end) {
        return problem(
            absl::StrFormat("overlaps the extent before it, which ends at %u", previous_end));
      }
      if (extent.logical_offset >= spec.size()) {
        return problem(absl::StrFormat("starts at or beyond the file size %u", spec.size()));
      }
      if (extent.logical_end() > RoundUp(spec.size(), block_size)) {
        return problem(absl::StrFormat("ends beyond the file size %u", spec.size()));
      }
      std::string what;
      if (extent.type == ExtentType::kHole) {
        if (!e.device().empty() || e.physical_offset() != 0) {
          return problem("is a HOLE but names a device or physical offset");
        }
        what = ExtentProblem(extent, 0, block_size);
      } else {
        auto it = device_ids.find(e.device());
        if (it == device_ids.end()) {
          return problem(e.device().empty() ? std::string("names no device")
                                            : absl::StrCat("unknown device '", e.device(), "'"));
        }
        extent.device = it->second;
        const Device& device = *devices[it->second - first_id];
        what = ExtentProblem(extent, device.size(), block_size);
        if (!what.empty()) what = absl::StrCat("on device '", device.name(), "': ", what);
      }
      if (!what.empty()) return problem(what);
      previous_end = extent.logical_end();
      extents.push_back(extent);
    }
    if (spec.size() > previous_end) {
      return error_at(file_line,
                      absl::StrFormat("%ssize %u is beyond the end of the last extent (%u); "
                                      "describe a trailing hole with an explicit HOLE extent",
                                      file_prefix, spec.size(), previous_end));
    }
    auto map = FileMap::Create(spec.name(), spec.size(), block_size, FileSource::kManifest,
                               std::move(extents));
    if (!map.ok()) return error_at(file_line, map.status().message());
    maps.push_back(*std::move(map));
  }

  for (auto& device : devices) {
    auto id = catalog.AddDevice(std::move(device));
    if (!id.ok()) return id.status();
  }
  for (size_t f = 0; f < maps.size(); ++f) {  // maps[f] is manifest.file(f)
    if (absl::Status added = catalog.AddStaticFile(std::move(maps[f])); !added.ok()) return added;
    const v1::ManifestFile& spec = manifest.file(static_cast<int>(f));
    // Cannot fail: the file was just added.
    if (!spec.version().empty()) (void)catalog.DeclareVersion(spec.name(), spec.version());
  }
  return absl::OkStatus();
}

}  // namespace blockread::storage
