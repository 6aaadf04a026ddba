// The two kinds of `blockread load` thread: unary (ReadBlock calls, with hedging and failover)
// and stream (ReadBlocks streams, with failover). Each runs until the run ends and records its
// reads into `stats`.
#ifndef BLOCKREAD_CLIENT_LOAD_THREADS_H_
#define BLOCKREAD_CLIENT_LOAD_THREADS_H_

#include <vector>

#include "blockread/v1/blockread.grpc.pb.h"
#include "client/load.h"
#include "client/load_run.h"

namespace blockread::client::load {

// stubs[s]: this thread's stubs of server s (its channels to it, taken in turn).
void UnaryThread(Run& run, const std::vector<std::vector<v1::BlockRead::Stub*>>& stubs, int thread,
                 ThreadStats& stats);

// stubs[s][l]: the stub of this thread's l-th stream to server s.
void StreamThread(Run& run, const std::vector<std::vector<v1::BlockRead::Stub*>>& stubs, int thread,
                  const LoadSettings& settings, ThreadStats& stats);

}  // namespace blockread::client::load

#endif  // BLOCKREAD_CLIENT_LOAD_THREADS_H_
