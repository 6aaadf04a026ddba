#include "storage/open_beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "storage/posix_status.h"

namespace blockread::storage {

absl::StatusOr<std::shared_ptr<RootDirectory>> RootDirectory::Open(const std::string& path) {
  std::shared_ptr<RootDirectory> root(new RootDirectory());
  root->fd_ = open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root->fd_ < 0) return PosixError(errno, absl::StrCat("open directory ", path));
  root->path_ = path;
  return root;
}

RootDirectory::~RootDirectory() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<int> OpenBeneath(const BeneathPath& path, int flags) {
  open_how how = {};
  // openat2 refuses O_PATH with any flag but O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC (an O_PATH
  // open never blocks anyway).
  const int nonblock = (flags & O_PATH) ? 0 : O_NONBLOCK;
  how.flags = static_cast<uint64_t>(flags | O_NOFOLLOW | nonblock | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  // glibc 2.36 has no openat2 wrapper.
  const long fd = syscall(SYS_openat2, path.root->fd(), path.relative.c_str(), &how, sizeof(how));
  if (fd >= 0) return static_cast<int>(fd);
  if (errno == ELOOP || errno == EXDEV) {
    return absl::FailedPreconditionError(
        absl::StrCat(path.display(),
                     " is, or lies behind, a symbolic link or outside its served "
                     "directory; the server does not follow it"));
  }
  return PosixError(errno, absl::StrCat("open ", path.display()));
}

}  // namespace blockread::storage
