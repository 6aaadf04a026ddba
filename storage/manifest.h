// Manifests: devices and per-file extents for layouts written straight to raw devices. The schema
// is blockread.v1.Manifest (proto/blockread/v1/manifest.proto), written as textproto.
#ifndef BLOCKREAD_STORAGE_MANIFEST_H_
#define BLOCKREAD_STORAGE_MANIFEST_H_

#include <string>

#include "absl/status/status.h"
#include "storage/catalog.h"

namespace blockread::storage {

// Parses and validates the manifest at `manifest_path`, opens its devices and adds its files to
// `catalog`. All or nothing: on any error the catalog is unchanged. Errors are INVALID_ARGUMENT
// (or the device's open error) with a message "<manifest>:<line>: file '<name>': <problem>"
// naming the line of the offending device, file or extent: syntax errors, unknown device,
// duplicate device or file names, zero-length, misaligned, unsorted or overlapping extents,
// extents outside their device or starting beyond the file size, a size beyond the last extent.
// Setup-phase call (see Catalog).
absl::Status LoadManifest(const std::string& manifest_path, Catalog& catalog);

// The same for a manifest's text, which messages name `manifest_path`. The devices it names are
// opened (relative paths from the working directory).
absl::Status LoadManifestText(const std::string& text, const std::string& manifest_path,
                              Catalog& catalog);

}  // namespace blockread::storage

#endif  // BLOCKREAD_STORAGE_MANIFEST_H_
