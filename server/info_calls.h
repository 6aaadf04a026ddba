// StatFile, ListFiles, GetStats and Explain: answered on the worker that receives them.
#ifndef BLOCKREAD_SERVER_INFO_CALLS_H_
#define BLOCKREAD_SERVER_INFO_CALLS_H_

#include "blockread/v1/blockread.pb.h"
#include "server/worker.h"
#include "storage/catalog.h"

namespace blockread::server {

// Posts the first call of each metadata RPC on the worker's queue.
void PostInfoCalls(Worker& worker);

// The statistics of every worker of the server, merged (what GetStats returns).
v1::GetStatsResponse CollectStats(const SharedState& shared);

// A file's FileInfo.
v1::FileInfo DescribeFile(const storage::Catalog& catalog, const storage::FileMap& map);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_INFO_CALLS_H_
