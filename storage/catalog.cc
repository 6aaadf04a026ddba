#include "storage/catalog.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {
namespace {

// A FileMapRef that points at a map owned elsewhere and carries no control block, so copies of it
// do no atomic reference counting.
FileMapRef Unowned(const FileMap* map) { return FileMapRef(std::shared_ptr<void>(), map); }

}  // namespace

std::string EchoedName(absl::string_view name) {
  if (name.size() <= kMaxEchoedNameBytes) return std::string(name);
  return absl::StrCat(name.substr(0, kMaxEchoedNameBytes), "... (", name.size(), " bytes)");
}

absl::Status UnknownFileError(absl::string_view name) {
  return absl::NotFoundError(absl::StrCat("unknown file '", EchoedName(name), "'"));
}

absl::Status Catalog::InClientTerms(absl::string_view name, const absl::Status& status) {
  // Import errors name server paths and devices: those go to the log; the client gets the code,
  // the file's name and the incident to quote.
  const uint64_t incident =
      LogIncident(LogLevel::kWarning, absl::StrCat("file ", name, ": ", status.message()));
  return absl::Status(status.code(),
                      absl::StrFormat("file %s changed and cannot be served now (%s)", name,
                                      IncidentNote(incident)));
}

absl::StatusOr<DeviceId> Catalog::AddDevice(std::unique_ptr<Device> device) {
  if (FindDevice(device->name())) {
    return absl::AlreadyExistsError(
        absl::StrCat("device name '", device->name(), "' is used twice"));
  }
  devices_.push_back(std::move(device));
  return static_cast<DeviceId>(devices_.size() - 1);
}

std::optional<DeviceId> Catalog::FindDevice(absl::string_view name) const {
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    if (devices_[id]->name() == name) return id;
  }
  return std::nullopt;
}

absl::Status Catalog::AddEntry(std::string name, std::unique_ptr<FileEntry> entry) {
  if (name.empty()) return absl::InvalidArgumentError("a file name must not be empty");
  auto [it, inserted] = files_.try_emplace(std::move(name), std::move(entry));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("file name '", it->first, "' is used twice"));
  }
  return absl::OkStatus();
}

absl::Status Catalog::AddStaticFile(FileMap map) {
  auto entry = std::make_unique<FileEntry>();
  std::string name = map.name();
  // The entry owns the map through a normal shared_ptr kept in imported_map's place would cost a
  // refcount per Resolve; instead keep ownership here and hand out unowned references.
  auto owned = std::make_shared<const FileMap>(std::move(map));
  entry->static_map = Unowned(owned.get());
  {
    std::unique_lock lock(entry->mu);
    entry->imported_map = std::move(owned);  // keeps the map alive for the catalog's lifetime
  }
  return AddEntry(std::move(name), std::move(entry));
}

absl::Status Catalog::AddWholeDevice(std::string name, std::string path) {
  auto device = Device::Open(name, std::move(path));
  if (!device.ok()) return device.status();
  const uint64_t size = (*device)->size();
  const uint32_t block_size = (*device)->logical_block_size();
  auto id = AddDevice(*std::move(device));
  if (!id.ok()) return id.status();
  std::vector<Extent> extents;
  if (size > 0) extents.push_back(Extent{0, size, ExtentType::kMapped, *id, 0});
  auto map = FileMap::Create(std::move(name), size, block_size, FileSource::kWholeDevice,
                             std::move(extents));
  if (!map.ok()) return map.status();
  return AddStaticFile(*std::move(map));
}

absl::StatusOr<FileMap> Catalog::BuildImportedMap(const std::string& name,
                                                  const BeneathPath& source, bool may_add_devices,
                                                  FileIdentity* identity) {
  const std::string path = source.display();
  auto mapped = MapFileExtents(source);
  if (!mapped.ok()) return mapped.status();
  *identity = mapped->identity;
  const uint64_t size = mapped->identity.size;

  if (!mapped->file_route_reason.empty()) {
    DeviceId id;
    const std::pair<dev_t, ino_t> inode{identity->filesystem_device, identity->inode};
    if (auto it = file_route_devices_.find(inode); it != file_route_devices_.end()) {
      id = it->second;
    } else if (may_add_devices) {
      auto fd = OpenBeneath(source, O_RDONLY | O_DIRECT);
      if (!fd.ok()) return fd.status();
      Device::Options options;
      options.file_route = true;
      options.adopt_fd = *fd;
      auto device = Device::Open(absl::StrCat("file:", name), path, options);
      if (!device.ok()) return device.status();
      struct stat st;
      if (fstat((*device)->fd(), &st) != 0 || st.st_dev != inode.first ||
          st.st_ino != inode.second) {
        return absl::UnavailableError(absl::StrFormat(
            "file %s (%s) was replaced while it was imported; try again", name, path));
      }
      auto added = AddDevice(*std::move(device));
      if (!added.ok()) return added.status();
      id = *added;
      file_route_devices_[inode] = id;
      LogInfo(absl::StrFormat("file %s (%s) is served through the file itself: %s", name, path,
                              mapped->file_route_reason));
    } else {
      return absl::FailedPreconditionError(absl::StrFormat(
          "file %s (%s) changed since import and can no longer be read from the device (%s); "
          "restart the server to serve it through the file",
          name, path, mapped->file_route_reason));
    }
    const uint32_t block_size = devices_[id]->logical_block_size();
    std::vector<Extent> extents;
    if (size > 0) {
      extents.push_back(Extent{0, RoundUp(size, block_size), ExtentType::kMapped, id, 0});
    }
    return FileMap::Create(name, size, block_size, FileSource::kFileRoute, std::move(extents));
  }

  std::optional<DeviceId> disk;
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    if (devices_[id]->kind() == DeviceKind::kBlockDevice &&
        devices_[id]->device_number() == mapped->disk_device) {
      disk = id;
      break;
    }
  }
  if (!disk && may_add_devices) {
    const std::string disk_name = std::filesystem::path(mapped->disk_path).filename();
    auto device = Device::Open(disk_name, mapped->disk_path);
    if (!device.ok()) return device.status();
    auto added = AddDevice(*std::move(device));
    if (!added.ok()) return added.status();
    disk = *added;
  }
  if (!disk) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "file %s (%s) changed since import and now lives on %s, which the server did not open at "
        "startup; restart the server to serve it",
        name, path, mapped->disk_path));
  }
  const Device& device = *devices_[*disk];
  const uint32_t block_size = device.logical_block_size();
  const uint64_t rounded_size = RoundUp(size, block_size);
  std::vector<Extent> extents;
  extents.reserve(mapped->extents.size());
  for (const DeviceExtent& e : mapped->extents) {
    if (e.logical_offset >= rounded_size) break;
    Extent extent{e.logical_offset, std::min(e.length, rounded_size - e.logical_offset),
                  e.unwritten ? ExtentType::kUnwritten : ExtentType::kMapped, *disk,
                  e.physical_offset};
    if (std::string problem = ExtentProblem(extent, device.size(), block_size); !problem.empty()) {
      return absl::InternalError(absl::StrFormat(
          "file %s (%s): FIEMAP extent at file offset %u cannot be served from %s: %s", name, path,
          e.logical_offset, device.path(), problem));
    }
    extents.push_back(extent);
  }
  return FileMap::Create(name, size, block_size, FileSource::kFiemap, std::move(extents));
}

absl::Status Catalog::ImportFile(std::string name, std::string path) {
  auto source = BeneathParent(path);
  if (!source.ok()) return source.status();
  return ImportBeneath(std::move(name), *std::move(source));
}

absl::Status Catalog::ImportBeneath(std::string name, BeneathPath source) {
  if (files_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("file name '", name, "' is used twice"));
  }
  auto entry = std::make_unique<FileEntry>();
  FileIdentity identity;
  auto map = BuildImportedMap(name, source, /*may_add_devices=*/true, &identity);
  if (!map.ok()) return map.status();
  entry->source = std::move(source);
  {
    std::unique_lock lock(entry->mu);
    entry->imported_map = std::make_shared<const FileMap>(*std::move(map));
    entry->identity = identity;
  }
  return AddEntry(std::move(name), std::move(entry));
}

absl::StatusOr<size_t> Catalog::ImportTree(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path root(path);
  const fs::file_status status = fs::status(root, error);
  if (error) return PosixError(error, absl::StrCat("cannot serve ", path));
  if (fs::is_regular_file(status)) {
    absl::Status added = ImportFile(root.filename().string(), path);
    if (!added.ok()) return added;
    return 1;
  }
  if (!fs::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve ", path, ": not a regular file or directory"));
  }
  std::vector<fs::path> found;
  for (auto it = fs::recursive_directory_iterator(root, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file() && !it->is_symlink()) found.push_back(it->path());
  }
  if (error) return PosixError(error, absl::StrCat("walking ", path));
  if (found.empty()) return absl::NotFoundError(absl::StrCat(path, " holds no regular files"));
  std::sort(found.begin(), found.end());
  auto directory = RootDirectory::Open(path);
  if (!directory.ok()) return directory.status();
  for (const fs::path& file : found) {
    std::string relative = file.lexically_relative(root).generic_string();
    absl::Status added = ImportBeneath(relative, BeneathPath{*directory, relative});
    if (!added.ok()) return added;
  }
  return found.size();
}

absl::StatusOr<FileMapRef> Catalog::Resolve(absl::string_view name) {
  auto it = files_.find(name);
  if (it == files_.end()) return UnknownFileError(name);
  FileEntry& entry = *it->second;
  if (entry.static_map) return entry.static_map;

  auto current = StatFileIdentity(entry.source);
  if (!current.ok()) {
    if (absl::IsNotFound(current.status())) {
      return absl::NotFoundError(
          absl::StrFormat("file %s was removed since it was imported", EchoedName(name)));
    }
    return InClientTerms(name, current.status());
  }
  {
    std::shared_lock lock(entry.mu);
    if (entry.identity == *current) return entry.imported_map;
  }
  return Reimport(name, entry, *current);
}

absl::StatusOr<FileMapRef> Catalog::Reimport(absl::string_view name, FileEntry& entry,
                                             const FileIdentity& current) {
  std::unique_lock lock(entry.mu);
  if (entry.identity == current) return entry.imported_map;  // another thread re-imported it
  const bool replaced = entry.identity.inode != current.inode ||
                        entry.identity.filesystem_device != current.filesystem_device;
  if (replaced && entry.imported_map->source() == FileSource::kFileRoute) {
    // The file-route device's descriptor still refers to the old inode.
    return absl::FailedPreconditionError(absl::StrFormat(
        "file %s was replaced since it was imported and is served through the file itself; "
        "restart the server to serve the new file",
        name));
  }
  FileIdentity identity;
  auto map =
      BuildImportedMap(std::string(name), entry.source, /*may_add_devices=*/false, &identity);
  if (!map.ok()) return InClientTerms(name, map.status());
  entry.imported_map = std::make_shared<const FileMap>(*std::move(map));
  entry.identity = identity;
  LogInfo(absl::StrFormat("file %s: %s changed since import; re-imported (%d extents)", name,
                          entry.source.display(), entry.imported_map->extents().size()));
  return entry.imported_map;
}

std::vector<std::string> Catalog::FileNames() const {
  std::vector<std::string> names;
  names.reserve(files_.size());
  for (const auto& [name, entry] : files_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace blockread::storage
