// Issue 11, "Never stale, by construction", black box: a real blockread-server serves the files of
// a directory (--serve_files) on real ext4 and XFS filesystems on loop devices while the files
// change under it, and every read goes through the client library. What the server returns is
// compared with what the filesystem returns (pread through the filesystem, never the server).
//
// The guarantee under test: a read that starts after a write(), truncate, fallocate/punch,
// clone/dedupe, rename-over or unlink of a served file has returned sees the new content or the
// new status, never the old bytes and never another file's bytes.
//
// Most file contents here are stamped: every aligned 8-byte word says which file it belongs to
// (a tag), where in that file it sits (its word index) and which version wrote it, so a read can
// tell by itself whether it got current, stale or foreign bytes, even while a writer is running.
//
// Cases that only measure (open() wait on a lease break, dedupe through a read-only descriptor)
// print a "never_stale:" line and record a test property; they assert nothing about those numbers.
#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

using client::BlockReadClient;
using testing::FsType;
using testing::ServerProcess;
using testing::TempDir;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kBlock = 4096;
// Every read of this test carries this deadline, so a hung server fails reads instead of
// hanging the test.
constexpr seconds kReadDeadline{5};
// After an append to a file read through itself, how long reads may take to see it (they follow
// its size at each read, so in practice at once).
constexpr milliseconds kAppendSettle{2000};
// How long reads keep running after a rename-over, unlink or replacement. Every read that starts
// after the call returned must see the new file or the new status (storage/name_sync.h).
constexpr milliseconds kAfterRename{1000};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// ---- Stamped contents -------------------------------------------------------------------------

// Tags of the stamped files (one per file a case can tell apart).
constexpr uint8_t kTagVersioned = 0x11;
constexpr uint8_t kTagOld = 0xA1;     // a served file before it is replaced
constexpr uint8_t kTagNew = 0xB2;     // what replaces it
constexpr uint8_t kTagThird = 0xC3;   // any other file written meanwhile
constexpr uint8_t kTagSecret = 0x5E;  // a file outside the served directory
constexpr uint8_t kTagFiller = 0xF1;  // what fills the filesystem
constexpr uint8_t kTagOther = 0x07;   // files that nothing changes
constexpr uint32_t kFillerVersion = 0xF111F111;

// version (32 bits) | tag (8 bits) | word index in the file (low 24 bits).
uint64_t StampWord(uint32_t version, uint8_t tag, uint64_t word_index) {
  return (uint64_t{version} << 32) | (uint64_t{tag} << 24) | (word_index & 0xFFFFFF);
}
uint32_t WordVersion(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
uint8_t WordTag(uint64_t word) { return static_cast<uint8_t>(word >> 24); }
uint64_t WordIndex(uint64_t word) { return word & 0xFFFFFF; }

// Stamps buffer[0, length) as bytes [file_offset, file_offset + length) of a file (both multiples
// of 8). Allocation-free: a forked writer calls it.
void Stamp(char* buffer, uint64_t file_offset, uint64_t length, uint32_t version, uint8_t tag) {
  for (uint64_t i = 0; i < length / 8; ++i) {
    const uint64_t word = StampWord(version, tag, file_offset / 8 + i);
    memcpy(buffer + 8 * i, &word, 8);
  }
}

std::vector<char> Stamped(uint64_t size, uint32_t version, uint8_t tag) {
  std::vector<char> bytes(size);
  Stamp(bytes.data(), 0, size, version, tag);
  return bytes;
}

uint64_t WordAt(const std::string& data, uint64_t byte) {
  uint64_t word;
  memcpy(&word, data.data() + byte, 8);
  return word;
}

// The tag of `data`, read at `offset` of a stamped file, when every word carries that tag and its
// own index (a whole read of one file); else -1 (foreign, mixed or garbled bytes).
int UniformTag(const std::string& data, uint64_t offset) {
  if (data.empty() || data.size() % 8 != 0 || offset % 8 != 0) return -1;
  const uint8_t tag = WordTag(WordAt(data, 0));
  for (uint64_t i = 0; i < data.size(); i += 8) {
    const uint64_t word = WordAt(data, i);
    if (WordTag(word) != tag || WordIndex(word) != ((offset + i) / 8 & 0xFFFFFF)) return -1;
  }
  return tag;
}

// Whether `data` holds any word of a file tagged `tag` (in its place or not).
bool HoldsTag(const std::string& data, uint8_t tag) {
  for (uint64_t i = 0; i + 8 <= data.size(); i += 8) {
    if (WordTag(WordAt(data, i)) == tag) return true;
  }
  return false;
}

bool IsFillerBlock(const char* block) {
  uint64_t word;
  memcpy(&word, block, 8);
  return WordTag(word) == kTagFiller && WordVersion(word) == kFillerVersion;
}

// ---- Files and filesystems --------------------------------------------------------------------

void WriteFile(const std::string& path, const std::vector<char>& bytes) {
  ASSERT_TRUE(testing::WriteAt(path, 0, bytes, /*sync=*/true).ok()) << path;
}

std::string FileBytes(const std::string& path, uint64_t offset, uint64_t length) {
  auto bytes = testing::ReadFileRange(path, offset, length);
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "<unreadable>";
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// Writes filler stamps into a new file at `path` until the filesystem is full, then syncs it, so
// every block the filesystem had free (blocks freed by the case before it included) now holds the
// filler on the device. Returns the bytes written, or an error.
absl::StatusOr<uint64_t> FillFilesystem(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  std::vector<char> chunk(kMiB);
  uint64_t written = 0;
  for (uint64_t length = kMiB; length >= kBlock;) {
    Stamp(chunk.data(), written, length, kFillerVersion, kTagFiller);
    const ssize_t n = pwrite(fd, chunk.data(), length, static_cast<off_t>(written));
    if (n > 0) {
      written += static_cast<uint64_t>(n) / kBlock * kBlock;
      if (static_cast<uint64_t>(n) % kBlock != 0) break;
      continue;
    }
    if (n < 0 && errno != ENOSPC) {
      close(fd);
      return absl::InternalError(absl::StrCat("filling ", path, ": ", strerror(errno)));
    }
    length /= 2;  // full for this size: the last few blocks in smaller writes
  }
  const bool synced = fsync(fd) == 0;
  const int sync_errno = errno;
  close(fd);
  if (!synced) {
    return absl::InternalError(absl::StrCat("fsync ", path, ": ", strerror(sync_errno)));
  }
  return written;
}

// ---- Processes, shared memory, reader threads ---------------------------------------------------

// An object of type T in shared anonymous memory, so a forked child and the test both see it.
template <typename T>
class SharedObject {
 public:
  SharedObject() {
    void* memory =
        mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) abort();
    object_ = new (memory) T();
  }
  ~SharedObject() {
    object_->~T();
    munmap(object_, sizeof(T));
  }
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  T* operator->() { return object_; }
  T& operator*() { return *object_; }

 private:
  T* object_;
};

// A forked child running `body` (allocation-free system calls only: the test process has gRPC
// threads) and exiting with its result. Killed when this object dies and when the test process
// dies, whatever happens to the test.
class ChildProcess {
 public:
  explicit ChildProcess(const std::function<int()>& body) {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(111);
      _exit(body());
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  bool started() const { return pid_ > 0; }

  // Waits up to `timeout` for the child to exit, then kills it. Returns its exit code, or -1 if it
  // was killed (also by us, at the timeout).
  int Wait(milliseconds timeout) {
    if (pid_ <= 0) return -1;
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
};

// Threads that each call `read_once(thread index, their own client)` until stopped; stopped and
// joined at the latest when this object dies (also on a failed assertion).
class ReaderThreads {
 public:
  using ReadOnce = std::function<void(int, BlockReadClient&)>;
  ReaderThreads(const std::string& target, int count, ReadOnce read_once)
      : read_once_(std::move(read_once)) {
    for (int t = 0; t < count; ++t) {
      threads_.emplace_back([this, target, t] {
        auto client = BlockReadClient::Connect(target);
        while (!stop_.load(std::memory_order_relaxed)) read_once_(t, *client);
      });
    }
  }
  ~ReaderThreads() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

 private:
  ReadOnce read_once_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

absl::StatusOr<v1::ReadBlockResponse> ReadWithDeadline(BlockReadClient& client,
                                                       const std::string& name, uint64_t offset,
                                                       uint64_t length) {
  client::ReadCallOptions call;
  call.deadline = std::chrono::system_clock::now() + kReadDeadline;
  return client.Read(name, offset, length, call);
}

// A few of the many problems a concurrent case can find, for its failure message.
class Examples {
 public:
  void Add(const std::string& example) {
    std::lock_guard lock(mu_);
    if (examples_.size() < 8) examples_.push_back(example);
  }
  std::string Text() {
    std::lock_guard lock(mu_);
    return examples_.empty() ? "" : "\n  e.g. " + absl::StrJoin(examples_, "\n  e.g. ");
  }

 private:
  std::mutex mu_;
  std::vector<std::string> examples_;
};

// Status codes seen, by name, printable.
class CodeCounts {
 public:
  void Add(absl::StatusCode code) {
    std::lock_guard lock(mu_);
    ++counts_[absl::StatusCodeToString(code)];
  }
  std::string Text() {
    std::lock_guard lock(mu_);
    std::vector<std::string> parts;
    for (const auto& [name, count] : counts_) parts.push_back(absl::StrCat(name, " x", count));
    return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
  }
  int count(absl::StatusCode code) {
    std::lock_guard lock(mu_);
    auto it = counts_.find(absl::StatusCodeToString(code));
    return it == counts_.end() ? 0 : it->second;
  }
  int total() {
    std::lock_guard lock(mu_);
    int sum = 0;
    for (const auto& [name, n] : counts_) sum += n;
    return sum;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> counts_;
};

// A random read range inside [0, size): single 4 KiB blocks (the simple path), 512-byte-aligned
// ranges up to 64 KiB and 4 KiB-aligned ones up to 1 MiB (the generic path).
std::pair<uint64_t, uint64_t> RandomRange(std::mt19937_64& rng, uint64_t size) {
  switch (rng() % 10) {
    case 0:
    case 1:
    case 2:
    case 3:
      return {rng() % (size / kBlock) * kBlock, kBlock};
    case 4:
    case 5:
    case 6: {
      const uint64_t length = (1 + rng() % 128) * 512;
      return {rng() % ((size - length) / 512 + 1) * 512, length};
    }
    default: {
      const uint64_t length = (1 + rng() % 256) * kBlock;
      return {rng() % ((size - length) / kBlock + 1) * kBlock, length};
    }
  }
}

// ---- The fixture ----------------------------------------------------------------------------

// A fresh filesystem on a loop device per test, with the served directory `served/` and a sibling
// `outside/` that is not served; a server started on `served/` once the case has written its files.
class NeverStaleBase : public ::testing::Test {
 protected:
  virtual FsType fs_type() const = 0;

  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    const FsType type = fs_type();
    // XFS cannot be made smaller than 300 MiB; ext4 with inline data, for the tiny-file case.
    auto fs = testing::MakeLoopFilesystem(type, dir_.path(),
                                          type == FsType::kXfs ? 320 * kMiB : 160 * kMiB,
                                          type == FsType::kExt4 ? "-O inline_data" : "");
    ASSERT_TRUE(fs.ok()) << fs.status();
    fs_ = *std::move(fs);
    served_ = fs_->root() + "/served";
    outside_ = fs_->root() + "/outside";
    ASSERT_EQ(mkdir(served_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
  }

  void TearDown() override {
    client_.reset();  // no connection left open for the server's graceful shutdown to wait on
    if (server_ != nullptr) {
      // Bounded: a server stuck on a FIFO must not hang the test (it is killed after that).
      EXPECT_EQ(server_->Stop(/*timeout_s=*/20), 0) << "server log:\n" << server_->Log();
      server_.reset();
    }
  }

  void StartServer() {
    auto server =
        ServerProcess::Start({"--serve_files=" + served_, "--idle_spin_us=20", "--metrics_listen="},
                             dir_.path() + "/server.log");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = BlockReadClient::Connect(server_->target());
  }

  // The server log's lines about incidents (errors it told a client to look up), a few.
  std::string Incidents() const {
    if (server_ == nullptr) return "";
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(server_->Log(), '\n')) {
      if (absl::StrContains(line, "incident") && lines.size() < 4) lines.emplace_back(line);
    }
    return lines.empty() ? "" : "\n  server log: " + absl::StrJoin(lines, "\n  server log: ");
  }

  std::string Served(const std::string& name) const { return served_ + "/" + name; }
  std::string Outside(const std::string& name) const { return outside_ + "/" + name; }
  const char* fs_name() const { return testing::FsTypeName(fs_type()); }

  struct Comparison {
    bool match = true;
    bool wrong_bytes = false;  // served OK, with bytes (or a length) the filesystem does not have
    std::string what;          // when it does not match
  };

  // Reads [offset, offset + length) of served file `name` through the server and compares with
  // what the filesystem says for `path`: OUT_OF_RANGE when offset is past its end, else pread's
  // bytes (short at EOF).
  Comparison CompareRead(const std::string& name, const std::string& path, uint64_t offset,
                         uint64_t length) {
    const int64_t size = FileSize(path);
    auto served = ReadWithDeadline(*client_, name, offset, length);
    const std::string where = absl::StrCat(name, " @", offset, "+", length, " (size ", size, ")");
    if (size >= 0 && offset > static_cast<uint64_t>(size)) {
      if (served.status().code() == absl::StatusCode::kOutOfRange) return {};
      return {false, served.ok(),
              absl::StrCat(where, ": past the end, want OUT_OF_RANGE, got ",
                           served.ok() ? absl::StrCat(served->data().size(), " bytes")
                                       : served.status().ToString())};
    }
    if (!served.ok()) return {false, false, absl::StrCat(where, ": ", served.status().ToString())};
    const std::string expected = FileBytes(path, offset, length);
    if (served->data() == expected) return {};
    uint64_t wrong_blocks = 0, filler_blocks = 0;
    std::string first_difference;
    const std::string& got = served->data();
    for (uint64_t b = 0; b < std::max(got.size(), expected.size()); b += kBlock) {
      const std::string a = b < got.size() ? got.substr(b, kBlock) : "";
      const std::string e = b < expected.size() ? expected.substr(b, kBlock) : "";
      if (a == e) continue;
      if (++wrong_blocks == 1) {
        uint64_t at = 0;
        while (at < a.size() && at < e.size() && a[at] == e[at]) ++at;
        first_difference =
            absl::StrCat("; the first at file offset ", offset + b + at, ", where ",
                         std::count(a.begin() + static_cast<ptrdiff_t>(at), a.end(), '\0'),
                         " of the ", a.size() - at, " bytes served to the block's end are zero");
      }
      if (a.size() >= 8 && IsFillerBlock(a.data())) ++filler_blocks;
    }
    // How the server reads the file now (it may have changed since the read).
    auto info = client_->Stat(name);
    return {false, true,
            absl::StrCat(where, ": ", got.size(), " bytes served, ", expected.size(),
                         " in the filesystem; ", wrong_blocks, " blocks differ, ", filler_blocks,
                         " of them the filler's", first_difference, "; read now through ",
                         info.ok() ? v1::FileSource_Name(info->source()) : "?")};
  }

  // CompareRead over the whole file in 1 MiB reads, plus reads at and past its end; the reads
  // that differ.
  std::vector<Comparison> CompareWholeFile(const std::string& name, const std::string& path) {
    const int64_t size = FileSize(path);
    if (size < 0) return {{false, false, absl::StrCat("cannot stat ", path)}};
    const uint64_t end = static_cast<uint64_t>(size);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (uint64_t off = 0; off < end; off += kMiB) ranges.push_back({off, kMiB});
    ranges.push_back({end / kBlock * kBlock, kBlock});  // the last block, short
    ranges.push_back({end > 100 ? end - 100 : 0, kBlock});
    ranges.push_back({end, 10});     // at EOF: empty, OK
    ranges.push_back({end + 1, 1});  // past EOF: OUT_OF_RANGE
    ranges.push_back({end + kMiB, kBlock});
    std::vector<Comparison> differences;
    for (const auto& [offset, length] : ranges) {
      Comparison c = CompareRead(name, path, offset, length);
      if (!c.match) differences.push_back(std::move(c));
    }
    return differences;
  }

  static std::string Describe(const std::vector<Comparison>& differences) {
    std::vector<std::string> lines;
    for (const Comparison& c : differences) {
      if (lines.size() < 6) lines.push_back(c.what);
    }
    return absl::StrCat(differences.size(), " reads differ from the filesystem:\n  ",
                        absl::StrJoin(lines, "\n  "));
  }

  // Every read of the file, now, equals the filesystem.
  void ExpectServedMatchesFilesystem(const std::string& name, const std::string& path,
                                     const std::string& when) {
    const std::vector<Comparison> differences = CompareWholeFile(name, path);
    EXPECT_TRUE(differences.empty())
        << fs_name() << ", " << when << ": " << Describe(differences) << Incidents();
  }

  // Reads of the file never return bytes the filesystem does not have; within `settle` they all
  // succeed and equal it (errors until then are tolerated).
  void ExpectServedSettlesToFilesystem(const std::string& name, const std::string& path,
                                       const std::string& when, milliseconds settle) {
    const auto deadline = Clock::now() + settle;
    for (;;) {
      const std::vector<Comparison> differences = CompareWholeFile(name, path);
      std::vector<Comparison> wrong;
      for (const Comparison& c : differences) {
        if (c.wrong_bytes) wrong.push_back(c);
      }
      EXPECT_TRUE(wrong.empty()) << fs_name() << ", " << when
                                 << ": wrong bytes: " << Describe(wrong);
      if (differences.empty() || !wrong.empty()) return;
      if (Clock::now() > deadline) {
        ADD_FAILURE() << fs_name() << ", " << when << ", still after " << settle.count()
                      << " ms: " << Describe(differences) << Incidents();
        return;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  TempDir dir_;
  // Declared before the server, so the server is gone before the filesystem is unmounted.
  std::unique_ptr<testing::LoopFilesystem> fs_;
  std::string served_, outside_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<BlockReadClient> client_;
};

class NeverStaleTest : public NeverStaleBase, public ::testing::WithParamInterface<FsType> {
 protected:
  FsType fs_type() const override { return GetParam(); }
};

class NeverStaleXfsTest : public NeverStaleBase {
 protected:
  FsType fs_type() const override { return FsType::kXfs; }
};

class NeverStaleExt4Test : public NeverStaleBase {
 protected:
  FsType fs_type() const override { return FsType::kExt4; }
};

// ---- 1. Versioned blocks under a writer -------------------------------------------------------

enum class WriteMode { kBuffered, kDirect, kLarge };
const char* WriteModeName(WriteMode mode) {
  switch (mode) {
    case WriteMode::kBuffered:
      return "buffered";
    case WriteMode::kDirect:
      return "direct";
    case WriteMode::kLarge:
      return "large";
  }
  return "?";
}

constexpr uint64_t kVersionedFileBytes = 16 * kMiB;
constexpr uint64_t kVersionedBlocks = kVersionedFileBytes / kBlock;
constexpr seconds kVersionedRun{3};

// Shared between the writer process and the readers.
struct VersionBoard {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::atomic<int> failed_errno{0};
  // The version every 4 KiB block holds at least: set after the write() that stamped it returned.
  std::atomic<uint32_t> committed[kVersionedBlocks];
};

struct VersionCheck {
  uint64_t stale = 0;    // words of this file, in place, older than noted
  uint64_t foreign = 0;  // words of another file, or out of place
  std::string first;     // the first problem, described
};

// Checks every word of `data`, read at `offset` (8-byte aligned) of the versioned file: this
// file's word, in its place, of at least the version noted for its block before the read
// (noted[i] for block offset / kBlock + i).
VersionCheck CheckVersions(const std::string& data, uint64_t offset, const uint32_t* noted) {
  VersionCheck check;
  const uint64_t first_block = offset / kBlock;
  for (uint64_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t word = WordAt(data, i);
    const uint64_t at = offset + i;
    const uint32_t want = noted[at / kBlock - first_block];
    if (WordTag(word) != kTagVersioned || WordIndex(word) != (at / 8 & 0xFFFFFF)) {
      if (check.foreign++ == 0 && check.first.empty()) {
        check.first = absl::StrCat("foreign word at byte ", at, ": ", absl::Hex(word));
      }
    } else if (WordVersion(word) < want) {
      if (check.stale++ == 0 && check.first.empty()) {
        check.first = absl::StrCat("block ", at / kBlock, " holds version ", WordVersion(word),
                                   ", committed before the read: ", want);
      }
    }
  }
  return check;
}

// The checker itself (no root needed): it must see stale and foreign words, or the versioned
// cases below could pass by checking nothing.
TEST(VersionCheckTest, FlagsStaleAndForeignWords) {
  constexpr uint64_t kOffset = 3 * kBlock + 512;
  constexpr uint64_t kLength = 3 * kBlock;
  const uint32_t noted[4] = {7, 7, 9, 7};
  std::vector<char> bytes(kLength);
  Stamp(bytes.data(), kOffset, kLength, 9, kTagVersioned);
  std::string data(bytes.begin(), bytes.end());
  VersionCheck check = CheckVersions(data, kOffset, noted);
  EXPECT_EQ(check.stale + check.foreign, 0u) << check.first;

  // Block 5 (noted 9) holds version 8 in one sector: stale.
  Stamp(data.data() + (5 * kBlock - kOffset), 5 * kBlock, 512, 8, kTagVersioned);
  check = CheckVersions(data, kOffset, noted);
  EXPECT_EQ(check.stale, 64u);
  EXPECT_EQ(check.foreign, 0u);
  EXPECT_NE(check.first.find("holds version 8, committed before the read: 9"), std::string::npos)
      << check.first;

  // Another file's words (the filler), and this file's words out of place: foreign.
  Stamp(data.data(), 0, 512, kFillerVersion, kTagFiller);
  Stamp(data.data() + 512, 0, 512, 9, kTagVersioned);
  check = CheckVersions(data, kOffset, noted);
  EXPECT_EQ(check.foreign, 128u);
  EXPECT_EQ(check.stale, 64u);
}

struct WriterPlan {
  const char* path;
  WriteMode mode;
  bool keep_open;  // one descriptor for the whole run, or open-write-close per write()
  uint64_t chunk;  // bytes per write()
  int pause_us;    // after each write(), as a real writer pauses between bursts
};

// The writer process: rewrites the file in place, chunk after chunk, every chunk stamped with the
// next version, and publishes each version once its write() has returned. No fsync. Returns 0 or
// (having recorded it) the errno that stopped it.
int RunWriter(const WriterPlan& plan, VersionBoard* board, char* buffer) {
  const int flags = O_WRONLY | O_CLOEXEC | (plan.mode == WriteMode::kDirect ? O_DIRECT : 0);
  const auto fail = [&](int error) {
    board->failed_errno = error;
    return 1;
  };
  int fd = plan.keep_open ? open(plan.path, flags) : -1;
  if (plan.keep_open && fd < 0) return fail(errno);
  uint32_t version = 1;
  uint64_t offset = 0;
  while (!board->stop.load(std::memory_order_relaxed)) {
    ++version;
    Stamp(buffer, offset, plan.chunk, version, kTagVersioned);
    if (!plan.keep_open && (fd = open(plan.path, flags)) < 0) return fail(errno);
    for (uint64_t done = 0; done < plan.chunk;) {
      const ssize_t n = pwrite(fd, buffer + done, plan.chunk - done, offset + done);
      if (n <= 0) return fail(n < 0 ? errno : EIO);
      done += static_cast<uint64_t>(n);
    }
    for (uint64_t b = offset / kBlock; b < (offset + plan.chunk) / kBlock; ++b) {
      board->committed[b].store(version, std::memory_order_release);
    }
    if (!plan.keep_open) close(fd);
    board->writes.fetch_add(1, std::memory_order_relaxed);
    offset = (offset + plan.chunk) % kVersionedFileBytes;
    if (plan.pause_us > 0) usleep(plan.pause_us);
  }
  if (plan.keep_open) close(fd);
  return 0;
}

void PrintTo(WriteMode mode, std::ostream* os) { *os << WriteModeName(mode); }

class VersionedBlocksTest
    : public NeverStaleBase,
      public ::testing::WithParamInterface<std::tuple<FsType, WriteMode, bool>> {
 protected:
  FsType fs_type() const override { return std::get<0>(GetParam()); }
};

// A writer process rewrites the served file's blocks in place with increasing versions; readers
// note each block's committed version before every read and check that every word returned
// carries at least that version (and is this file's word, in its place). Target: 0 wrong reads.
TEST_P(VersionedBlocksTest, EveryReadSeesAtLeastTheCommittedVersion) {
  const WriteMode mode = std::get<1>(GetParam());
  const bool keep_open = std::get<2>(GetParam());
  const std::string path = Served("versioned");
  WriteFile(path, Stamped(kVersionedFileBytes, 1, kTagVersioned));
  StartServer();

  SharedObject<VersionBoard> board;
  for (auto& v : board->committed) v.store(1);
  WriterPlan plan{path.c_str(), mode, keep_open, 16 * kKiB, 0};
  if (mode == WriteMode::kLarge) {
    plan.chunk = 8 * kMiB;  // two write() calls per pass over the file, buffered
    // Long enough between writes for reads to land after one write() returned and before the
    // next one starts (the ext4 window of the issue lies there).
    plan.pause_us = 20000;
  }
  char* buffer = static_cast<char*>(aligned_alloc(kBlock, plan.chunk));
  ASSERT_NE(buffer, nullptr);
  std::unique_ptr<char, decltype(&free)> buffer_owner(buffer, &free);

  std::atomic<uint64_t> reads{0}, wrong_reads{0}, stale_words{0}, foreign_words{0}, errors{0};
  Examples examples;
  CodeCounts error_codes;
  // Two reader threads, each with its own channel, on a 2-CPU machine that also runs the writer
  // and the server's workers.
  ReaderThreads readers(server_->target(), 2, [&](int t, BlockReadClient& client) {
    thread_local std::mt19937_64 rng(1234 + t);
    const auto [offset, length] = RandomRange(rng, kVersionedFileBytes);
    const uint64_t first_block = offset / kBlock;
    const uint64_t last_block = (offset + length - 1) / kBlock;
    uint32_t noted[256 + 2];
    for (uint64_t b = first_block; b <= last_block; ++b) {
      noted[b - first_block] = board->committed[b].load(std::memory_order_acquire);
    }
    auto read = ReadWithDeadline(client, "versioned", offset, length);
    ++reads;
    if (!read.ok()) {
      ++errors;
      error_codes.Add(read.status().code());
      examples.Add(absl::StrCat("@", offset, "+", length, ": ", read.status().ToString()));
      return;
    }
    const std::string& data = read->data();
    if (data.size() != length) {
      ++wrong_reads;
      examples.Add(absl::StrCat("@", offset, "+", length, ": ", data.size(), " bytes"));
      return;
    }
    const VersionCheck check = CheckVersions(data, offset, noted);
    const uint64_t stale = check.stale, foreign = check.foreign;
    const std::string& first = check.first;
    if (stale + foreign > 0) {
      ++wrong_reads;
      stale_words += stale;
      foreign_words += foreign;
      examples.Add(absl::StrCat("@", offset, "+", length, ": ", first, " (", stale, " stale and ",
                                foreign, " foreign words)"));
    }
  });

  ChildProcess writer([&] { return RunWriter(plan, &*board, buffer); });
  ASSERT_TRUE(writer.started());
  std::this_thread::sleep_for(kVersionedRun);
  readers.Stop();
  board->stop = true;
  // A writer's open() may wait for a lease break; a server that never releases it must not hang
  // the test.
  const int writer_exit = writer.Wait(seconds(15));

  const std::string variant = absl::StrCat(fs_name(), ", ", WriteModeName(mode), " writes, ",
                                           keep_open ? "kept open" : "open-write-close");
  printf(
      "never_stale: versioned blocks (%s): %lu reads, %lu wrong (%lu stale words, %lu foreign "
      "words), %lu errors [%s]; %lu writes of %lu KiB\n",
      variant.c_str(), reads.load(), wrong_reads.load(), stale_words.load(), foreign_words.load(),
      errors.load(), error_codes.Text().c_str(), board->writes.load(), plan.chunk / kKiB);
  RecordProperty("reads", static_cast<int>(reads.load()));
  RecordProperty("wrong_reads", static_cast<int>(wrong_reads.load()));
  RecordProperty("writes", static_cast<int>(board->writes.load()));
  EXPECT_EQ(writer_exit, 0) << "the writer failed (errno " << board->failed_errno.load()
                            << ") or did not stop within 15 s";
  EXPECT_EQ(wrong_reads.load(), 0u)
      << variant << ": reads returned blocks older than the version committed before they "
      << "started, or another file's bytes" << examples.Text();
  EXPECT_EQ(errors.load(), 0u) << variant << ": reads failed" << examples.Text() << Incidents();
  EXPECT_GT(reads.load(), 50u) << "the readers hardly ran";
  EXPECT_GT(board->writes.load(), 2u) << "the writer hardly ran";
  // At rest, the whole file as the filesystem has it.
  ExpectServedMatchesFilesystem("versioned", path, "after the writer stopped");
}

INSTANTIATE_TEST_SUITE_P(Writers, VersionedBlocksTest,
                         ::testing::Combine(::testing::Values(FsType::kExt4, FsType::kXfs),
                                            ::testing::Values(WriteMode::kBuffered,
                                                              WriteMode::kDirect,
                                                              WriteMode::kLarge),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return absl::StrCat(testing::FsTypeName(std::get<0>(info.param)), "_",
                                               WriteModeName(std::get<1>(info.param)), "_",
                                               std::get<2>(info.param) ? "kept_open" : "reopened");
                         });

// ---- 2. truncate, extend, punch ---------------------------------------------------------------

// After each change returns, every read equals the filesystem: the new bytes, zeros in holes,
// short reads at the new end and OUT_OF_RANGE past it.
TEST_P(NeverStaleTest, TruncateExtendAndPunchAreSeenAtOnce) {
  const std::string path = Served("shape");
  WriteFile(path, testing::RandomBytes(2 * kMiB, 21));
  StartServer();
  ExpectServedMatchesFilesystem("shape", path, "as imported");

  ASSERT_EQ(truncate(path.c_str(), 5000), 0);
  ExpectServedMatchesFilesystem("shape", path, "after truncate to 5000 bytes");
  EXPECT_EQ(CompareRead("shape", path, 8192, kBlock).what, "") << "old data past the new end";

  ASSERT_EQ(truncate(path.c_str(), 3 * kMiB), 0);
  ExpectServedMatchesFilesystem("shape", path, "after extending to 3 MiB (a hole)");

  ASSERT_TRUE(testing::WriteAt(path, kMiB, testing::RandomBytes(512 * kKiB, 22), false).ok());
  ExpectServedMatchesFilesystem("shape", path, "after writing into the extension (no fsync)");

  ASSERT_TRUE(testing::WriteAt(path, 3 * kMiB + 100, testing::RandomBytes(70000, 23), false).ok());
  ExpectServedMatchesFilesystem("shape", path, "after extending by a write past the end");

  {
    const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kMiB + 64 * kKiB, 256 * kKiB), 0);
    close(fd);
  }
  ExpectServedMatchesFilesystem("shape", path, "after punching a hole");
  // The punched blocks are free: another file takes them. The hole still reads as zeros.
  WriteFile(Outside("reuser"), Stamped(32 * kMiB, 1, kTagThird));
  ExpectServedMatchesFilesystem("shape", path, "after another file reused the punched blocks");

  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  ExpectServedMatchesFilesystem("shape", path, "after truncate to 0");
}

// ---- 3. XFS: dedupe and reflink over a served file ----------------------------------------------

// Dedupe (through a read-write descriptor, xfs_io's default) and clone-over remap a served file's
// blocks and free the old ones; filling the filesystem then reuses them. Reads must keep equaling
// the filesystem, never the filler. Dedupe through a read-only descriptor (xfs_io -r) breaks no
// lease: that documented hole is reported, not asserted.
TEST_F(NeverStaleXfsTest, DedupeAndReflinkThenFillTheFilesystem) {
  constexpr uint64_t kSize = 8 * kMiB;
  WriteFile(Served("deduped"), testing::RandomBytes(kSize, 31));
  WriteFile(Outside("dedupe_source"), testing::RandomBytes(kSize, 31));  // same bytes
  WriteFile(Served("cloned_over"), testing::RandomBytes(kSize, 32));
  WriteFile(Outside("clone_source"), testing::RandomBytes(kSize, 33));
  WriteFile(Served("deduped_readonly"), testing::RandomBytes(kSize, 34));
  WriteFile(Outside("dedupe_readonly_source"), testing::RandomBytes(kSize, 34));
  StartServer();
  for (const char* name : {"deduped", "cloned_over", "deduped_readonly"}) {
    ExpectServedMatchesFilesystem(name, Served(name), "as imported");
  }

  auto dedupe = testing::RunCommand(absl::StrCat("xfs_io -c 'dedupe ", Outside("dedupe_source"),
                                                 " 0 0 ", kSize, "' ", Served("deduped")));
  ASSERT_TRUE(dedupe.ok()) << dedupe.status();
  ASSERT_NE(dedupe->find(absl::StrCat("deduped ", kSize, "/", kSize)), std::string::npos)
      << *dedupe;
  ExpectServedMatchesFilesystem("deduped", Served("deduped"), "after dedupe");

  auto clone = testing::RunCommand(
      absl::StrCat("cp --reflink=always ", Outside("clone_source"), " ", Served("cloned_over")));
  ASSERT_TRUE(clone.ok()) << clone.status();
  ExpectServedMatchesFilesystem("cloned_over", Served("cloned_over"), "after cp --reflink=always");

  auto readonly_dedupe =
      testing::RunCommand(absl::StrCat("xfs_io -r -c 'dedupe ", Outside("dedupe_readonly_source"),
                                       " 0 0 ", kSize, "' ", Served("deduped_readonly")));
  ASSERT_TRUE(readonly_dedupe.ok()) << readonly_dedupe.status();
  ASSERT_NE(readonly_dedupe->find(absl::StrCat("deduped ", kSize, "/", kSize)), std::string::npos)
      << *readonly_dedupe;

  auto filled = FillFilesystem(Outside("filler"));
  ASSERT_TRUE(filled.ok()) << filled.status();
  printf("never_stale: xfs filled with %lu MiB of filler\n", *filled / kMiB);
  ExpectServedMatchesFilesystem("deduped", Served("deduped"), "after dedupe and a full fill");
  ExpectServedMatchesFilesystem("cloned_over", Served("cloned_over"),
                                "after cp --reflink=always and a full fill");

  // The documented hole: count, print, record.
  uint64_t wrong = 0, filler = 0, failed_reads = 0;
  for (uint64_t off = 0; off < kSize; off += kMiB) {
    auto served = ReadWithDeadline(*client_, "deduped_readonly", off, kMiB);
    if (!served.ok()) {
      ++failed_reads;
      continue;
    }
    const std::string expected = FileBytes(Served("deduped_readonly"), off, kMiB);
    const std::string& got = served->data();
    if (got.size() != expected.size()) {
      wrong += kMiB / kBlock;
      continue;
    }
    for (uint64_t b = 0; b < got.size(); b += kBlock) {
      if (got.compare(b, kBlock, expected, b, kBlock) == 0) continue;
      ++wrong;
      if (IsFillerBlock(got.data() + b)) ++filler;
    }
  }
  printf(
      "never_stale: REPORT (not asserted) xfs dedupe through a read-only descriptor "
      "(xfs_io -r), then a full fill: %lu of %lu blocks wrong, %lu of them the filler's; %lu of "
      "%lu reads failed. A read-only descriptor breaks no lease: this is the documented "
      "hole.\n",
      wrong, kSize / kBlock, filler, failed_reads, kSize / kMiB);
  RecordProperty("dedupe_readonly_wrong_blocks", static_cast<int>(wrong));
  RecordProperty("dedupe_readonly_filler_blocks", static_cast<int>(filler));
}

// ---- 4. rename-over while reads run -------------------------------------------------------------

struct TimedRead {
  int64_t start_ns;
  absl::StatusCode code;
  int tag;  // UniformTag of the bytes; -1: not one file's words in place
  bool secret = false;
};

// Reader threads that log every read of `name` (random ranges inside `size`) with its start time.
class ReadLog {
 public:
  ReadLog(const std::string& target, const std::string& name, uint64_t size, int threads)
      : logs_(threads),
        readers_(target, threads, [this, name, size](int t, BlockReadClient& client) {
          thread_local std::mt19937_64 rng(77 + t);
          auto [offset, length] = RandomRange(rng, size);
          TimedRead read{NowNs(), absl::StatusCode::kOk, -1};
          auto response = ReadWithDeadline(client, name, offset, length);
          read.code = response.status().code();
          if (response.ok()) {
            read.tag = UniformTag(response->data(), offset);
            read.secret = HoldsTag(response->data(), kTagSecret);
          }
          logs_[t].push_back(read);
        }) {}
  std::vector<TimedRead> Finish() {
    readers_.Stop();
    std::vector<TimedRead> all;
    for (const auto& log : logs_) all.insert(all.end(), log.begin(), log.end());
    return all;
  }

 private:
  std::vector<std::vector<TimedRead>> logs_;  // one per thread, written only by it
  ReaderThreads readers_;
};

// Another regular file (same filesystem, same directory) renamed over a served name while reads
// run: every read started after rename() returned gets the new file's bytes: never the old
// file's, never a third file's, and no error.
TEST_P(NeverStaleTest, RenameOverWhileReadsRun) {
  constexpr uint64_t kSize = 4 * kMiB;
  WriteFile(Served("renamed_over"), Stamped(kSize, 1, kTagOld));
  StartServer();
  WriteFile(Served(".incoming"), Stamped(kSize, 1, kTagNew));

  ReadLog log(server_->target(), "renamed_over", kSize, 3);
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(rename(Served(".incoming").c_str(), Served("renamed_over").c_str()), 0);
  const int64_t renamed_ns = NowNs();
  const auto renamed = Clock::now();
  // The old file's blocks, if the server let them go, are free now: a third file takes them.
  WriteFile(Outside("third"), Stamped(48 * kMiB, 1, kTagThird));
  std::this_thread::sleep_until(renamed + kAfterRename);
  const std::vector<TimedRead> reads = log.Finish();

  uint64_t before = 0, after = 0, new_after = 0, old_after = 0, third_after = 0, third_before = 0,
           errors_after = 0;
  CodeCounts codes_after;
  for (const TimedRead& r : reads) {
    const bool ok = r.code == absl::StatusCode::kOk;
    if (r.start_ns < renamed_ns) {
      ++before;
      if (ok && r.tag != kTagOld && r.tag != kTagNew) ++third_before;
      continue;
    }
    ++after;
    codes_after.Add(r.code);
    if (!ok) {
      ++errors_after;
    } else if (r.tag == kTagNew) {
      ++new_after;
    } else if (r.tag == kTagOld) {
      ++old_after;
    } else {
      ++third_after;
    }
  }
  printf(
      "never_stale: rename-over (%s): %lu reads before rename(), %lu after: %lu new file, "
      "%lu old file's bytes, %lu another file's bytes, answered [%s]; reads before rename() "
      "with a third file's bytes: %lu\n",
      fs_name(), before, after, new_after, old_after, third_after, codes_after.Text().c_str(),
      third_before);
  RecordProperty("old_bytes_after_rename", static_cast<int>(old_after));
  EXPECT_GT(before, 0u);
  EXPECT_GT(new_after, 0u) << "no reads ran after the rename";
  EXPECT_EQ(old_after, 0u) << "reads started after rename() returned got the old file's bytes";
  EXPECT_EQ(third_after, 0u) << "reads started after rename() returned got a third file's bytes";
  EXPECT_EQ(errors_after, 0u) << "reads started after rename() returned failed: "
                              << codes_after.Text();
  ExpectServedMatchesFilesystem("renamed_over", Served("renamed_over"), "after the rename");
}

// ---- 5. unlink, then fill -----------------------------------------------------------------------

// An unlinked served name answers NOT_FOUND from the first read after unlink() returned: never
// the old file's bytes, and never the filler's once its blocks are reused by another file.
TEST_P(NeverStaleTest, UnlinkThenFillNeverServesTheFiller) {
  constexpr uint64_t kSize = 8 * kMiB;
  WriteFile(Served("unlinked"), Stamped(kSize, 1, kTagOld));
  WriteFile(Served("kept"), Stamped(kMiB, 1, kTagOther));
  StartServer();
  ExpectServedMatchesFilesystem("unlinked", Served("unlinked"), "as imported");

  ASSERT_EQ(unlink(Served("unlinked").c_str()), 0);
  CodeCounts codes;
  uint64_t old_bytes = 0, wrong = 0;
  auto check_all = [&](const std::string& when) {
    for (uint64_t off = 0; off < kSize; off += kMiB / 4) {
      for (uint64_t length : {kBlock, kMiB / 4}) {
        auto read = ReadWithDeadline(*client_, "unlinked", off, length);
        codes.Add(read.status().code());
        if (!read.ok()) continue;
        if (UniformTag(read->data(), off) == kTagOld && read->data().size() == length) {
          ++old_bytes;
          ADD_FAILURE() << fs_name() << ", " << when << ": unlinked @" << off << "+" << length
                        << " returned the removed file's bytes";
        } else {
          ++wrong;
          ADD_FAILURE() << fs_name() << ", " << when << ": unlinked @" << off << "+" << length
                        << " returned bytes that are not the old file's"
                        << (HoldsTag(read->data(), kTagFiller) ? " (the filler's)" : "");
        }
      }
    }
  };
  check_all("just after unlink");
  auto filled = FillFilesystem(Outside("filler"));
  ASSERT_TRUE(filled.ok()) << filled.status();
  check_all("after unlink and a full fill");
  printf(
      "never_stale: unlink then fill (%s, %lu MiB of filler): reads answered [%s]; %lu with "
      "the old bytes, %lu wrong\n",
      fs_name(), *filled / kMiB, codes.Text().c_str(), old_bytes, wrong);
  EXPECT_EQ(old_bytes, 0u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(codes.count(absl::StatusCode::kNotFound), codes.total()) << codes.Text();
  ExpectServedMatchesFilesystem("kept", Served("kept"), "the other file, after the fill");
}

// ---- 6. Hostile renames ---------------------------------------------------------------------

// A symlink to a secret file outside the served directory, renamed over a served name: not one
// byte of the secret is ever served, and every read started after rename() returned fails.
TEST_P(NeverStaleTest, SymlinkRenamedOverAServedNameNeverServesItsTarget) {
  constexpr uint64_t kSize = kMiB;
  WriteFile(Outside("secret"), Stamped(kSize, 1, kTagSecret));
  WriteFile(Served("linked_over"), Stamped(kSize, 1, kTagOld));
  StartServer();
  ExpectServedMatchesFilesystem("linked_over", Served("linked_over"), "as imported");

  ASSERT_EQ(symlink(Outside("secret").c_str(), Served(".link").c_str()), 0);
  ReadLog log(server_->target(), "linked_over", kSize, 2);
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_EQ(rename(Served(".link").c_str(), Served("linked_over").c_str()), 0);
  const int64_t renamed_ns = NowNs();
  std::this_thread::sleep_for(kAfterRename);
  std::vector<TimedRead> reads = log.Finish();
  // And a last sweep over the whole range, whole-megabyte reads.
  auto whole = ReadWithDeadline(*client_, "linked_over", 0, kSize);
  reads.push_back({NowNs(), whole.status().code(), whole.ok() ? UniformTag(whole->data(), 0) : -1,
                   whole.ok() && HoldsTag(whole->data(), kTagSecret)});

  uint64_t secret = 0, after = 0, old_after = 0, ok_after = 0, other = 0;
  CodeCounts codes_after;
  for (const TimedRead& r : reads) {
    if (r.secret) ++secret;
    if (r.start_ns < renamed_ns) continue;
    ++after;
    codes_after.Add(r.code);
    if (r.code != absl::StatusCode::kOk) continue;
    ++ok_after;
    if (r.tag == kTagOld) ++old_after;
    if (r.tag != kTagOld && !r.secret) ++other;
  }
  printf(
      "never_stale: symlink to an outside file renamed over a served name (%s): %lu reads "
      "after rename(), answered [%s]; %lu with the old file's bytes, %lu with the secret's\n",
      fs_name(), after, codes_after.Text().c_str(), old_after, secret);
  EXPECT_EQ(secret, 0u) << "the symlink's target (outside the served directory) was served";
  EXPECT_EQ(other, 0u) << "reads returned bytes of neither file";
  EXPECT_EQ(ok_after, 0u) << "reads started after the symlink replaced the name succeeded";
  EXPECT_GT(after, 0u);
}

// A FIFO renamed over a served name: reads of it fail from the first one after rename()
// returned, within the deadline (no hang), and reads of the other served files keep succeeding,
// each within 5 s, with the right bytes.
TEST_P(NeverStaleTest, FifoRenamedOverAServedNameHangsNothing) {
  constexpr uint64_t kSize = kMiB;
  WriteFile(Served("fifo_over"), Stamped(kSize, 1, kTagOld));
  for (int i = 0; i < 3; ++i)
    WriteFile(Served(absl::StrCat("other", i)), Stamped(kSize, 1, kTagOther));
  StartServer();
  ASSERT_EQ(mkfifo(Served(".fifo").c_str(), 0600), 0);

  std::atomic<uint64_t> other_reads{0}, other_bad{0}, other_slow{0};
  Examples other_examples;
  ReaderThreads others(server_->target(), 2, [&](int t, BlockReadClient& client) {
    thread_local std::mt19937_64 rng(500 + t);
    const std::string name = absl::StrCat("other", rng() % 3);
    const auto [offset, length] = RandomRange(rng, kSize);
    const auto start = Clock::now();
    auto read = ReadWithDeadline(client, name, offset, length);
    const auto took = Clock::now() - start;
    ++other_reads;
    if (took >= kReadDeadline) ++other_slow;
    if (!read.ok() || read->data().size() != length ||
        UniformTag(read->data(), offset) != kTagOther) {
      ++other_bad;
      other_examples.Add(absl::StrCat(name, " @", offset, "+", length, ": ",
                                      read.ok() ? "wrong bytes" : read.status().ToString(),
                                      " after ", std::chrono::duration<double>(took).count(),
                                      " s"));
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_EQ(rename(Served(".fifo").c_str(), Served("fifo_over").c_str()), 0);
  const auto renamed = Clock::now();

  CodeCounts codes;
  uint64_t hung = 0, ok_after = 0, wrong_bytes = 0, reads = 0;
  double slowest = 0;
  while (Clock::now() - renamed < kAfterRename) {
    const auto start = Clock::now();
    auto read = ReadWithDeadline(*client_, "fifo_over", 0, kBlock);
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    slowest = std::max(slowest, took);
    ++reads;
    codes.Add(read.status().code());
    if (read.status().code() == absl::StatusCode::kDeadlineExceeded || took >= 5.0) ++hung;
    if (read.ok()) ++ok_after;
    if (read.ok() && UniformTag(read->data(), 0) != kTagOld) ++wrong_bytes;
    if (hung > 0) break;  // one hang proves it; do not wait out more deadlines
    std::this_thread::sleep_for(milliseconds(20));
  }
  // Keep the other readers going a little longer after the FIFO has been looked at.
  std::this_thread::sleep_for(milliseconds(500));
  others.Stop();
  printf(
      "never_stale: FIFO renamed over a served name (%s): %lu reads of it answered [%s], "
      "slowest %.3f s; other files: %lu reads, %lu failed or wrong, %lu slower than 5 s\n",
      fs_name(), reads, codes.Text().c_str(), slowest, other_reads.load(), other_bad.load(),
      other_slow.load());
  EXPECT_EQ(hung, 0u) << "a read of the name now holding a FIFO hung (deadline "
                      << kReadDeadline.count() << " s)";
  EXPECT_EQ(ok_after, 0u) << "the name holding a FIFO still read OK after rename() returned";
  EXPECT_EQ(wrong_bytes, 0u);
  EXPECT_EQ(other_bad.load(), 0u) << "reads of other files failed" << other_examples.Text();
  EXPECT_EQ(other_slow.load(), 0u);
  EXPECT_GT(other_reads.load(), 10u) << "reads of other files did not flow";
  // Unblock anything still opening the FIFO for reading, so the server can stop.
  const int unblock = open(Served("fifo_over").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (unblock >= 0) close(unblock);
}

// ---- 7. The file-route inode case (ext4 inline data) ------------------------------------------

// A tiny inline-data file (served through the file itself), appended to, then replaced by rename:
// reads follow the append, and every read after rename() returned gets the new file's content.
TEST_F(NeverStaleExt4Test, InlineFileAppendedThenReplacedByRename) {
  const std::vector<char> tiny = testing::RandomBytes(60, 71);
  WriteFile(Served("tiny"), tiny);
  // A regular file beside it, so the server has the filesystem's device open from the start (as
  // any real served directory would) and the tiny file could move to it.
  WriteFile(Served("regular"), Stamped(kMiB, 1, kTagOther));
  StartServer();
  auto info = client_->Stat("tiny");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->source(), v1::FILE_ROUTE) << "expected the inline file on the file route";
  ExpectServedMatchesFilesystem("tiny", Served("tiny"), "as imported");

  // After an append: never wrong bytes; the new content within 2 s.
  ASSERT_TRUE(testing::WriteAt(Served("tiny"), 60, testing::RandomBytes(40, 72), false).ok());
  ExpectServedSettlesToFilesystem("tiny", Served("tiny"), "after appending 40 bytes",
                                  kAppendSettle);

  // Replaced by rename: the new content from the first read on.
  const auto replace_and_watch = [&](const std::vector<char>& replacement,
                                     const std::string& what) {
    const std::string old_bytes = FileBytes(Served("tiny"), 0, kMiB);
    const std::string new_bytes(replacement.begin(), replacement.end());
    WriteFile(Served(".tiny.new"), replacement);
    ASSERT_EQ(rename(Served(".tiny.new").c_str(), Served("tiny").c_str()), 0);
    const auto renamed = Clock::now();
    uint64_t new_reads = 0, old_reads = 0, other = 0, reads = 0;
    CodeCounts codes;
    while (Clock::now() - renamed < kAfterRename / 2) {
      auto read = ReadWithDeadline(*client_, "tiny", 0, 16 * kKiB);
      ++reads;
      codes.Add(read.status().code());
      if (read.ok() && read->data() == new_bytes) {
        ++new_reads;
      } else if (read.ok() && read->data() == old_bytes) {
        ++old_reads;
      } else if (read.ok()) {
        ++other;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    printf("never_stale: tiny file replaced by rename with %s (ext4): %lu reads answered [%s]\n",
           what.c_str(), reads, codes.Text().c_str());
    EXPECT_EQ(new_reads, reads) << what << ": reads after rename() returned did not all get the "
                                << "replacement's content; answers: " << codes.Text()
                                << Incidents();
    EXPECT_EQ(old_reads, 0u) << what << ": the old content was served after rename() returned";
    EXPECT_EQ(other, 0u) << what << ": bytes of neither file";
    ExpectServedMatchesFilesystem("tiny", Served("tiny"), what + ", after the rename");
  };
  replace_and_watch(testing::RandomBytes(80, 74), "another inline file");

  // The replacement grows out of inline data, then is replaced by a file with extents. The
  // oracle here is what was written, not a read through the filesystem: on this machine's kernel
  // (6.18) ext4's page cache sometimes answers zeros for the last page of a file that has just
  // left inline data, for as long as we looked (50 ms and more), while the device, O_DIRECT
  // through the file and the server have the written bytes (seen in about 1 run in 10; the
  // server was right each time). Once, under the test command's load, the filesystem held other
  // bytes for as long as we looked, and the server served those: serving what the filesystem
  // holds is all the server may do, so that passes; bytes of neither fail. How often the
  // filesystem's own read disagreed is printed.
  const std::vector<char> inline_part = testing::RandomBytes(80, 74);
  const std::vector<char> appended = testing::RandomBytes(9000, 75);
  ASSERT_TRUE(testing::WriteAt(Served("tiny"), 80, appended, false).ok());
  std::string written(inline_part.begin(), inline_part.end());
  written.append(appended.begin(), appended.end());
  {
    const auto deadline = Clock::now() + kAppendSettle;
    uint64_t reads = 0, wrong = 0, filesystem_disagreed = 0, as_filesystem = 0;
    bool settled = false;
    CodeCounts codes;
    while (!settled && Clock::now() < deadline) {
      auto read = ReadWithDeadline(*client_, "tiny", 0, kMiB);
      ++reads;
      codes.Add(read.status().code());
      const std::string filesystem = FileBytes(Served("tiny"), 0, kMiB);
      if (filesystem != written) ++filesystem_disagreed;
      if (!read.ok()) continue;
      if (read->data() == written) {
        settled = true;
      } else if (read->data() == filesystem) {
        // The kernel itself holds other bytes than were written (the quirk above, seen once also
        // on the device): the server serves what the filesystem has, which is all it may do.
        // Settled once that has lasted a while.
        settled = ++as_filesystem >= 1000;
      } else if (read->data().size() == written.size()) {
        ++wrong;  // bytes of neither (a shorter read may be the append in flight)
      }
    }
    printf(
        "never_stale: inline file appended out of inline data (ext4): %lu reads answered [%s], "
        "%lu with bytes of neither the write nor the filesystem, %lu with the filesystem's where "
        "it disagreed with the write; the filesystem's own read disagreed with what was written "
        "%lu times\n",
        reads, codes.Text().c_str(), wrong, as_filesystem, filesystem_disagreed);
    EXPECT_EQ(wrong, 0u) << "after appending 9000 bytes: bytes that were never written, and "
                            "that the filesystem does not hold either";
    EXPECT_TRUE(settled) << "after appending 9000 bytes: the written bytes not served within "
                         << kAppendSettle.count() << " ms: " << codes.Text() << Incidents();
  }
  replace_and_watch(testing::RandomBytes(3000, 76), "a 3000-byte file");
}

// ---- 8. How long a writer's open() waits -------------------------------------------------------

struct OpenTimes {
  std::atomic<int> done{0};
  std::atomic<int> failed_errno{0};
  int64_t ns[50];
};

// Measures (prints, asserts nothing about the numbers) how long open(O_WRONLY) of a served file
// takes while reads of it run: with leases, each open waits for the server to give its lease up.
// The readers' bytes must stay right (nothing is written).
TEST_P(NeverStaleTest, WriterOpenWaitWhileReadsRun) {
  constexpr uint64_t kSize = 8 * kMiB;
  const std::string path = Served("opened");
  WriteFile(path, Stamped(kSize, 1, kTagOld));
  StartServer();
  std::atomic<uint64_t> reads{0}, bad{0};
  ReaderThreads readers(server_->target(), 2, [&](int t, BlockReadClient& client) {
    thread_local std::mt19937_64 rng(900 + t);
    const auto [offset, length] = RandomRange(rng, kSize);
    auto read = ReadWithDeadline(client, "opened", offset, length);
    ++reads;
    if (!read.ok() || read->data().size() != length ||
        UniformTag(read->data(), offset) != kTagOld) {
      ++bad;
    }
  });
  std::this_thread::sleep_for(milliseconds(200));

  SharedObject<OpenTimes> times;
  // In a child: an open() the server never lets through must not hang the test.
  ChildProcess opener([&] {
    for (int i = 0; i < 50; ++i) {
      timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
      clock_gettime(CLOCK_MONOTONIC, &b);
      if (fd < 0) {
        times->failed_errno = errno;
        return 1;
      }
      close(fd);
      times->ns[i] = (b.tv_sec - a.tv_sec) * 1'000'000'000LL + (b.tv_nsec - a.tv_nsec);
      times->done.fetch_add(1);
      usleep(20'000);  // let the server take its lease back
    }
    return 0;
  });
  const int exit_code = opener.Wait(seconds(30));
  readers.Stop();

  const int done = times->done.load();
  std::vector<int64_t> ns(times->ns, times->ns + done);
  std::sort(ns.begin(), ns.end());
  const auto percentile = [&](double p) {
    return ns.empty() ? -1.0 : ns[std::min<size_t>(ns.size() - 1, ns.size() * p)] / 1000.0;
  };
  printf(
      "never_stale: MEASURE open(O_WRONLY) of a served file while reads run (%s): %d opens, "
      "p50 %.1f us, p99 %.1f us, max %.1f us; %lu reads, %lu wrong or failed\n",
      fs_name(), done, percentile(0.5), percentile(0.99), percentile(1.0), reads.load(),
      bad.load());
  RecordProperty("open_wait_p50_us", static_cast<int>(percentile(0.5)));
  RecordProperty("open_wait_p99_us", static_cast<int>(percentile(0.99)));
  EXPECT_EQ(exit_code, 0) << "opens failed (errno " << times->failed_errno.load()
                          << ") or took over 30 s in all; " << done << " done";
  EXPECT_EQ(bad.load(), 0u) << "reads of an unchanged file failed or were wrong";
}

INSTANTIATE_TEST_SUITE_P(Filesystems, NeverStaleTest,
                         ::testing::Values(FsType::kExt4, FsType::kXfs),
                         [](const auto& info) { return testing::FsTypeName(info.param); });

}  // namespace
}  // namespace blockread
