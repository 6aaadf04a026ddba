// Opening served files safely: every open of a file the server serves resolves beneath its served
// root, follows no symlink and never blocks (a FIFO renamed over a served name must not hang a
// worker). A served name can be replaced at any time by whoever can write the served directory;
// none of that may lead the server to another file.
#ifndef BLOCKREAD_STORAGE_OPEN_BENEATH_H_
#define BLOCKREAD_STORAGE_OPEN_BENEATH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace blockread::storage {

// An open O_PATH descriptor of a served root directory, shared by the files beneath it.
class RootDirectory {
 public:
  // Opens `path` (symlinks in it are followed here, once, at setup: the operator named it).
  static absl::StatusOr<std::shared_ptr<RootDirectory>> Open(const std::string& path);
  ~RootDirectory();
  RootDirectory(const RootDirectory&) = delete;
  RootDirectory& operator=(const RootDirectory&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  RootDirectory() = default;
  int fd_ = -1;
  std::string path_;
};

// A file's name beneath a served root.
struct BeneathPath {
  std::shared_ptr<RootDirectory> root;
  std::string relative;  // relative to root, no ".." component, no leading '/'
  // root path + "/" + relative: for messages and logs only, never opened.
  std::string display() const { return root->path() + "/" + relative; }
};

// openat2(root, relative, flags | O_NOFOLLOW | O_NONBLOCK (not with O_PATH) | O_CLOEXEC,
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS). Returns the descriptor (the
// caller owns it). A symlink anywhere on the way, or a path leaving the root, is an error
// (FAILED_PRECONDITION naming the served name); other errors follow errno.
absl::StatusOr<int> OpenBeneath(const BeneathPath& path, int flags);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_OPEN_BENEATH_H_
