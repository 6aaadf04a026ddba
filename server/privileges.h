// Least privilege: after the server has opened its devices, files and ports, it can run as an
// ordinary user with (almost) no capabilities.
#ifndef BLOCKREAD_SERVER_PRIVILEGES_H_
#define BLOCKREAD_SERVER_PRIVILEGES_H_

#include <string>

#include "absl/status/status.h"
#include "storage/catalog.h"

namespace blockread::server {

// Switches the whole process to `user` (its uid, primary gid and supplementary groups) and
// leaves no thread any capability, except CAP_LEASE on `catalog`'s watcher thread, which retakes
// leases on served files after writers close them (files the user need not own). Then reads
// every thread's /proc status and fails unless each shows exactly that: a thread that kept more
// is an error, not a warning.
//
// Call from one thread after every descriptor and port the server needs is open and its threads
// have started. Capabilities are per thread; this relies on glibc applying the uid, gid and group
// changes to every thread (the kernel clears the capabilities of each thread whose ids all leave
// 0) and on the watcher alone setting PR_SET_KEEPCAPS first, then trimming its own set.
absl::Status DropPrivileges(const std::string& user, storage::Catalog& catalog);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_PRIVILEGES_H_
