// The embedded default: with no source configured, the server serves a demo device (a regular
// file) holding a handful of demo files, created once under --data-dir.
#ifndef BLOCKREAD_SERVER_DEMO_DATA_H_
#define BLOCKREAD_SERVER_DEMO_DATA_H_

#include <string>

#include "absl/status/status.h"
#include "storage/catalog.h"

namespace blockread::server {

// Makes `data_dir` (created 0700) hold demo-device.img (a 64 MiB regular file used as the device)
// and demo.manifest describing the demo files on it, unless both are already there, then loads the
// manifest into `catalog`. An existing manifest is used only if it is exactly the demo layout on
// the demo image beside it, and the image only if it is a regular file of the demo size; else
// they are written afresh. The files: hello.txt (text, unaligned size), random-4m (contiguous),
// sparse (data islands and holes), fragmented (64 small extents scattered in reverse order) and
// large (16 MiB, larger than the default max_read_bytes). Contents are deterministic.
absl::Status AddDemoData(const std::string& data_dir, storage::Catalog& catalog);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_DEMO_DATA_H_
