// The catalog's devices: adding them at setup, and checking them while serving (CheckDevices).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/catalog_internal.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::storage {

absl::StatusOr<DeviceId> Catalog::AddDevice(std::unique_ptr<Device> device) {
  if (FindDevice(device->name())) {
    return absl::AlreadyExistsError(
        absl::StrCat("device name '", device->name(), "' is used twice"));
  }
  auto state = std::make_unique<DeviceState>();
  struct stat st {};
  if (fstat(device->fd(), &st) == 0) {
    state->opened_dev = st.st_dev;
    state->opened_ino = st.st_ino;
    state->opened_rdev = st.st_rdev;
  }
  if (device->kind() == DeviceKind::kBlockDevice) {
    state->identity = IdentifyDisk(device->fd(), device->device_number(), device->size(),
                                   device->logical_block_size());
  }
  // The lease thread may be at a break (a file imported earlier), reading devices_: no device
  // moves under it. (Workers read devices_ only once they are sealed.)
  std::lock_guard lock(lease_mu_);
  epoch_domains_.push_back(
      device->kind() == DeviceKind::kBlockDevice
          ? static_cast<uint8_t>(1 + block_devices_++ % (ReadEpochs::kDomains - 1))
          : 0);
  devices_.push_back(std::move(device));
  device_states_.push_back(std::move(state));
  return static_cast<DeviceId>(devices_.size() - 1);
}

namespace {

// Why `reopened` is not the disk that was opened as `was`; empty if it is. A disk whose identity
// could not be had then or now is taken on its size and block size alone.
std::string OtherDiskReason(const Device& reopened, const DeviceIdentity& was,
                            DeviceIdentity* now) {
  if (reopened.kind() != DeviceKind::kBlockDevice) return "";
  *now = IdentifyDisk(reopened.fd(), reopened.device_number(), reopened.size(),
                      reopened.logical_block_size());
  if (was.empty() || now->empty() || *now == was) return "";
  return absl::StrFormat("it is back as another disk (%s, not %s): its files are not on it",
                         now->value, was.value);
}

}  // namespace

void Catalog::CheckDevices() {
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    const Device& device = *devices_[id];
    if (device.kind() == DeviceKind::kFileRoute) continue;  // the watcher's business
    DeviceState& state = *device_states_[id];
    const bool up = state.up.load(std::memory_order_relaxed);
    struct stat now {};
    const bool present = stat(device.path().c_str(), &now) == 0;
    const bool same = present && (S_ISBLK(now.st_mode) ? now.st_rdev == state.opened_rdev
                                                       : now.st_dev == state.opened_dev &&
                                                             now.st_ino == state.opened_ino);
    if (present && same && up) continue;
    std::string why;
    DeviceIdentity identity;
    if (present) {
      auto reopened = Device::Open(device.name(), device.path());
      if (!reopened.ok()) {
        why = std::string(reopened.status().message());
      } else if ((*reopened)->size() != device.size() ||
                 (*reopened)->logical_block_size() != device.logical_block_size()) {
        why = absl::StrFormat("it is back with %u bytes in blocks of %u, not %u in blocks of %u",
                              (*reopened)->size(), (*reopened)->logical_block_size(), device.size(),
                              device.logical_block_size());
      } else if (std::string other = OtherDiskReason(**reopened, state.identity, &identity);
                 !other.empty()) {
        why = std::move(other);
      } else if (dup3((*reopened)->fd(), device.fd(), O_CLOEXEC) < 0) {
        why = PosixErrorMessage(errno, "dup3");
      } else {
        state.opened_dev = now.st_dev;
        state.opened_ino = now.st_ino;
        state.opened_rdev = now.st_rdev;
        if (state.identity.empty()) state.identity = std::move(identity);
        const uint64_t event = device_events_.load(std::memory_order_relaxed) + 1;
        state.reopened_at.store(event, std::memory_order_release);
        state.up.store(true, std::memory_order_release);
        device_events_.store(event, std::memory_order_release);
        LogInfo(absl::StrFormat("device %s (%s) %s: reopened, serving its files again",
                                device.name(), device.path(),
                                up ? "names another device now" : "is back"));
        continue;
      }
    } else {
      why = "its path is gone";
    }
    if (!up) {
      // Still down: said so when it went, and again when the reason changes (its path is back,
      // but as another disk).
      if (why != state.down_reason) {
        LogWarning(
            absl::StrFormat("device %s (%s) is still down: %s", device.name(), device.path(), why));
        state.down_reason = std::move(why);
      }
      continue;
    }
    // Down, and let go: a detached loop device or a pulled disk is released only once no one
    // holds it open, and whatever comes back at its path, under the same device number or not,
    // is checked before it is served again (above). The workers re-register the placeholder
    // (their rings hold the file too); reads of a down device are refused before any I/O.
    state.up.store(false, std::memory_order_release);
    PointAtNothing(device.fd());
    const uint64_t event = device_events_.load(std::memory_order_relaxed) + 1;
    state.reopened_at.store(event, std::memory_order_release);
    device_events_.store(event, std::memory_order_release);
    LogWarning(absl::StrFormat(
        "device %s (%s) is down (%s): reads of its files answer UNAVAILABLE; it is reopened "
        "when its path is back as the same disk",
        device.name(), device.path(), why));
    state.down_reason = std::move(why);
  }
}

std::optional<DeviceId> Catalog::FindDevice(absl::string_view name) const {
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    if (devices_[id]->name() == name) return id;
  }
  return std::nullopt;
}

absl::StatusOr<DeviceId> Catalog::DiskFor(const FiemapResult& mapped) {
  for (DeviceId id = 0; id < devices_.size(); ++id) {
    if (devices_[id]->kind() == DeviceKind::kBlockDevice &&
        devices_[id]->device_number() == mapped.disk_device) {
      return id;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("it lives on ", mapped.disk_path, ", which the server did not open at startup"));
}

}  // namespace blockread::storage
