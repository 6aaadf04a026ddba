// LD_PRELOAD shim for running engine_bench under valgrind 3.19 (Debian 12), which does not know
// openat2 (syscall 437) and fails it with ENOSYS, so Catalog::ImportFile cannot open the file it
// imports. It interposes glibc's syscall() and serves openat2 with openat(O_NOFOLLOW), refusing
// absolute paths and ".." components as RESOLVE_BENEATH would (symlinks deeper in the path are not
// refused: the benchmark's own files have none). Every other call goes to glibc unchanged.
// Setup only: the read path makes no openat2 call. For the benchmark's callgrind runs
// (tests/bench/run_route_bench.sh), never for a server.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>

#include <cstdarg>
#include <cstring>

namespace {

using SyscallFn = long (*)(long, ...);

bool EscapesBeneath(const char* path) {
  if (path[0] == '/') return true;
  for (const char* p = path; *p != '\0';) {
    const char* end = std::strchr(p, '/');
    const size_t length = end == nullptr ? std::strlen(p) : static_cast<size_t>(end - p);
    if (length == 2 && p[0] == '.' && p[1] == '.') return true;
    if (end == nullptr) break;
    p = end + 1;
  }
  return false;
}

}  // namespace

extern "C" long syscall(long number, ...) {
  va_list args;
  va_start(args, number);
  long a[6];
  for (long& value : a) value = va_arg(args, long);
  va_end(args);
  if (number == SYS_openat2) {
    const int dirfd = static_cast<int>(a[0]);
    const char* path = reinterpret_cast<const char*>(a[1]);
    const auto* how = reinterpret_cast<const open_how*>(a[2]);
    if ((how->resolve & RESOLVE_BENEATH) != 0 && EscapesBeneath(path)) {
      errno = EXDEV;
      return -1;
    }
    return openat(dirfd, path, static_cast<int>(how->flags) | O_NOFOLLOW,
                  static_cast<mode_t>(how->mode));
  }
  static const auto real = reinterpret_cast<SyscallFn>(dlsym(RTLD_NEXT, "syscall"));
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
