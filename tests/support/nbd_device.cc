#include "tests/support/nbd_device.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace blockread::testing {

std::string NbdDevicesUnavailableReason() {
  if (std::string why = LoopDevicesUnavailableReason(); !why.empty()) return why;
  if (access("/dev/fuse", R_OK | W_OK) != 0) return "/dev/fuse is not available";
  if (!RunCommand("command -v nbdkit && command -v nbdfuse && command -v fusermount3").ok()) {
    return "nbdkit, nbdfuse or fusermount3 is not installed (tests/run.sh installs nbdkit, "
           "libnbd-bin and fuse3)";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<NbdDevice>> NbdDevice::Create(const std::string& work_dir,
                                                             const Options& options) {
  std::unique_ptr<NbdDevice> device(new NbdDevice());
  static int counter = 0;
  const std::string base = absl::StrCat(work_dir, "/nbd", counter++);
  device->mount_point_ = base + ".mnt";
  device->control_socket_ = base + ".ctl";
  if (mkdir(device->mount_point_.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("mkdir ", device->mount_point_, ": ", strerror(errno)));
  }
  const std::string file = device->mount_point_ + "/disk";
  // Filters apply outermost first: pause, then delay, then errors, then the file.
  std::vector<std::string> args = {"nbdfuse", file, "--command",
                                   "nbdkit",  "-s", "--exit-with-parent"};
  if (options.pausable) args.push_back("--filter=pause");
  if (options.read_delay_ms > 0) args.push_back("--filter=delay");
  if (!options.error_trigger_file.empty()) args.push_back("--filter=error");
  args.push_back("file");
  args.push_back(options.image);
  if (options.pausable) args.push_back("pause-control=" + device->control_socket_);
  if (options.read_delay_ms > 0)
    args.push_back(absl::StrCat("rdelay=", options.read_delay_ms, "ms"));
  if (!options.error_trigger_file.empty()) {
    args.push_back("error=EIO");
    args.push_back(absl::StrCat("error-pread-rate=", options.error_rate));
    args.push_back("error-pread-file=" + options.error_trigger_file);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // Dies with the test process, even one that aborts (a sanitizer report) before its
    // destructors run, and keeps nothing of ctest's output pipe open (ctest would wait for it).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int log = open((base + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    execvp(argv[0], argv.data());
    _exit(127);
  }
  device->nbdfuse_pid_ = pid;
  // nbdfuse stays in the foreground; the file appears once the NBD connection is up.
  for (int i = 0; i < 500; ++i) {
    struct stat st;
    if (stat(file.c_str(), &st) == 0 && st.st_size > 0 &&
        (!options.pausable || access(device->control_socket_.c_str(), F_OK) == 0)) {
      auto loop = LoopDevice::Create(file, static_cast<uint64_t>(st.st_size));
      if (!loop.ok()) return loop.status();
      device->loop_ = *std::move(loop);
      return device;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      device->nbdfuse_pid_ = -1;
      return absl::InternalError(
          absl::StrCat("nbdfuse exited (status ", status, ") before ", file, " appeared"));
    }
    usleep(10'000);
  }
  return absl::DeadlineExceededError(absl::StrCat(file, " did not appear within 5 s"));
}

NbdDevice::~NbdDevice() {
  if (paused_) (void)Resume();
  if (loop_ != nullptr) {
    // Autoclear detaches the loop device once its last user closes it, asynchronously; the FUSE
    // file cannot be unmounted while it is still attached.
    const std::string backing =
        "/sys/block/" + loop_->path().substr(loop_->path().rfind('/') + 1) + "/loop/backing_file";
    loop_.reset();
    // Vanished: its users may hold it for a while yet, and nothing below needs it gone.
    for (int i = 0; !vanished_ && i < 500 && access(backing.c_str(), F_OK) == 0; ++i) {
      usleep(10'000);
    }
  }
  if (nbdfuse_pid_ > 0) {
    (void)RunCommand("fusermount3 -u " + mount_point_ + " 2>/dev/null");
    for (int i = 0; i < 500; ++i) {
      int status;
      if (waitpid(nbdfuse_pid_, &status, WNOHANG) == nbdfuse_pid_) {
        nbdfuse_pid_ = -1;
        break;
      }
      usleep(10'000);
    }
    if (nbdfuse_pid_ > 0) {
      kill(nbdfuse_pid_, SIGKILL);
      waitpid(nbdfuse_pid_, nullptr, 0);
      (void)RunCommand("fusermount3 -uz " + mount_point_ + " 2>/dev/null");
    }
  }
  rmdir(mount_point_.c_str());
}

void NbdDevice::Vanish() {
  if (nbdfuse_pid_ > 0) {
    kill(nbdfuse_pid_, SIGKILL);
    waitpid(nbdfuse_pid_, nullptr, 0);
    nbdfuse_pid_ = -1;
  }
  (void)RunCommand("fusermount3 -uz " + mount_point_ + " 2>/dev/null");
  paused_ = false;  // nothing left to resume
  vanished_ = true;
}

absl::Status NbdDevice::Control(char command) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  strncpy(address.sun_path, control_socket_.c_str(), sizeof(address.sun_path) - 1);
  char reply = 0;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  write(fd, &command, 1) == 1 && read(fd, &reply, 1) == 1;
  close(fd);
  // The filter answers with the command in upper case once it is in force.
  if (!ok || reply != command - 'a' + 'A') {
    return absl::InternalError(absl::StrCat("pause control '", std::string(1, command), "' on ",
                                            control_socket_, " failed"));
  }
  return absl::OkStatus();
}

absl::Status NbdDevice::Pause() {
  absl::Status status = Control('p');
  if (status.ok()) paused_ = true;
  return status;
}

absl::Status NbdDevice::Resume() {
  absl::Status status = Control('r');
  if (status.ok()) paused_ = false;
  return status;
}

}  // namespace blockread::testing
