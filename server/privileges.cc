#include "server/privileges.h"

#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "storage/log.h"
#include "storage/posix_status.h"

namespace blockread::server {
namespace {

constexpr char kWatcherThreadName[] = "blockread-watch";
constexpr uint64_t kLeaseOnly = uint64_t{1} << CAP_LEASE;

// Sets the calling thread's permitted and effective capabilities to `mask` (inheritable: none).
int SetOwnCapabilities(uint64_t mask) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; ++i) {
    data[i].permitted = data[i].effective = static_cast<uint32_t>(mask >> (32 * i));
  }
  return static_cast<int>(syscall(SYS_capset, &header, data));
}

struct ThreadCredentials {
  std::string name;
  std::string uid_line, gid_line, groups_line;
  uint64_t permitted = 0, effective = 0, ambient = 0;
};

std::vector<ThreadCredentials> ReadThreadCredentials() {
  std::vector<ThreadCredentials> threads;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::ifstream status(task.path() / "status");
    ThreadCredentials thread;
    for (std::string line; std::getline(status, line);) {
      auto [key, value] = std::pair<std::string, std::string>(absl::StrSplit(line, ':'));
      value = std::string(absl::StripAsciiWhitespace(value));
      uint64_t mask = 0;
      if (key == "Name") thread.name = value;
      if (key == "Uid") thread.uid_line = value;
      if (key == "Gid") thread.gid_line = value;
      if (key == "Groups") thread.groups_line = value;
      if (key == "CapPrm" && absl::SimpleHexAtoi(value, &mask)) thread.permitted = mask;
      if (key == "CapEff" && absl::SimpleHexAtoi(value, &mask)) thread.effective = mask;
      if (key == "CapAmb" && absl::SimpleHexAtoi(value, &mask)) thread.ambient = mask;
    }
    threads.push_back(std::move(thread));
  }
  return threads;
}

// Checks what the kernel says every thread now holds.
absl::Status VerifyEveryThread(uid_t uid, gid_t gid, bool watcher_keeps_lease) {
  const std::string uids = absl::StrCat(uid, "\t", uid, "\t", uid, "\t", uid);
  const std::string gids = absl::StrCat(gid, "\t", gid, "\t", gid, "\t", gid);
  for (const ThreadCredentials& thread : ReadThreadCredentials()) {
    const bool watcher = watcher_keeps_lease && thread.name == kWatcherThreadName;
    const uint64_t allowed = watcher ? kLeaseOnly : 0;
    if (thread.uid_line != uids || thread.gid_line != gids || thread.permitted != allowed ||
        thread.effective != allowed || thread.ambient != 0) {
      return absl::InternalError(
          absl::StrCat("--user: thread ", thread.name, " did not drop its privileges (Uid ",
                       thread.uid_line, ", Gid ", thread.gid_line, ", CapPrm ",
                       absl::Hex(thread.permitted), ", CapEff ", absl::Hex(thread.effective), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DropPrivileges(const std::string& user, storage::Catalog& catalog) {
  errno = 0;
  const passwd* entry = getpwnam(user.c_str());
  if (entry == nullptr) {
    return errno == 0 ? absl::InvalidArgumentError(absl::StrCat("--user: no user named ", user))
                      : storage::PosixError(errno, absl::StrCat("--user: looking up ", user));
  }
  const uid_t uid = entry->pw_uid;
  const gid_t gid = entry->pw_gid;

  // The watcher keeps its permitted set through the uid change; every other thread loses all.
  int watcher_error = 0;
  const bool has_watcher = catalog.RunOnWatcherThread([&] {
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) watcher_error = errno;
  });
  if (watcher_error != 0) return storage::PosixError(watcher_error, "--user: PR_SET_KEEPCAPS");

  // glibc applies each of these to every thread of the process (its setxid broadcast).
  if (initgroups(entry->pw_name, gid) != 0 || setresgid(gid, gid, gid) != 0 ||
      setresuid(uid, uid, uid) != 0) {
    const int error = errno;
    return storage::PosixError(
        error, absl::StrCat("--user=", user,
                            ": cannot switch (the server must start as root, or with "
                            "CAP_SETUID and CAP_SETGID)"));
  }
  if (has_watcher) {
    catalog.RunOnWatcherThread([&] {
      if (SetOwnCapabilities(kLeaseOnly) != 0 || prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) {
        watcher_error = errno;
      }
    });
    if (watcher_error != 0) {
      return storage::PosixError(watcher_error, "--user: keeping CAP_LEASE on the file watcher");
    }
  }
  if (absl::Status verified = VerifyEveryThread(uid, gid, has_watcher); !verified.ok()) {
    return verified;
  }
  storage::LogInfo(absl::StrCat(
      "running as ", user, " (uid ", uid, ", gid ", gid, "); ",
      has_watcher ? "capabilities: CAP_LEASE on the file watcher only" : "no capabilities"));
  return absl::OkStatus();
}

}  // namespace blockread::server
