// The `virtual` engine (MadFS): the factory the shim's OpenOverlay calls for
// EngineKind::kVirtual, and the offline tools behind `mapfs overlay`.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "common/status.h"
#include "overlay/engine.h"
#include "overlay/virtual/vfile.h"

namespace mapfs::overlay {

// An engine serving files under o.dir: virtualized files (format.h) through
// their block table and log, every other file as a plain file through the
// kernel. An empty file opened for writing with O_CREAT or O_TRUNC is
// formatted (creation under the engine).
Result<std::unique_ptr<Engine>> NewVirtualEngine(const Options& o);

namespace vrt {

// `mapfs overlay` verbs. Each works on a path outside any engine.
// Copies the content (plain or virtualized) to `out`.
Status CatFile(const std::string& path, FILE* out);
// Converts a plain file into the format in place (a new file renamed over
// it, with its permissions); refuses a file already virtualized.
Status ImportFile(const std::string& path, const FormatOptions& o = {});
// The reverse: a virtualized file becomes a plain file with its content.
Status ExportFile(const std::string& path);
// Checks every structure of a virtualized file: header, shared words, log
// entries and records, table, bitmap (mapped blocks in use and mapped once).
// EUCLEAN with a message naming the first damage; `report` gets notes
// (leaked blocks, counts) for a clean file.
Status CheckFile(const std::string& path, std::string* report);

}  // namespace vrt
}  // namespace mapfs::overlay
