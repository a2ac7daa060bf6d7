// `mapfs overlay cat|import|export|fsck PATH`: virtualized files (the
// `virtual` engine, docs/OVERLAY.md) outside the shim.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "overlay/virtual/virtual_engine.h"

namespace mapfs::cli {
namespace {

void OverlayUsage(FILE* f) {
  std::fprintf(f,
               "usage: mapfs overlay cat PATH...   write the content of files (virtualized or plain) to stdout\n"
               "       mapfs overlay import PATH   turn a plain file into a virtualized one, in place\n"
               "       mapfs overlay export PATH   turn a virtualized file back into a plain one, in place\n"
               "       mapfs overlay fsck PATH...  check virtualized files (exit 1 on damage)\n");
}

}  // namespace

int Overlay(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    OverlayUsage(args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string& verb = args[0];
  std::vector<std::string> paths(args.begin() + 1, args.end());
  if (paths.empty() || ((verb == "import" || verb == "export") && paths.size() != 1)) {
    OverlayUsage(stderr);
    return 2;
  }
  int rc = 0;
  for (const std::string& p : paths) {
    Status s;
    std::string report;
    if (verb == "cat") {
      s = overlay::vrt::CatFile(p, stdout);
    } else if (verb == "import") {
      s = overlay::vrt::ImportFile(p);
    } else if (verb == "export") {
      s = overlay::vrt::ExportFile(p);
    } else if (verb == "fsck") {
      s = overlay::vrt::CheckFile(p, &report);
      if (s.ok()) std::printf("%s: %s", p.c_str(), report.c_str());
    } else {
      std::fprintf(stderr, "mapfs overlay: unknown verb '%s'\n", verb.c_str());
      OverlayUsage(stderr);
      return 2;
    }
    if (!s.ok()) {
      std::fprintf(stderr, "mapfs overlay %s: %s: %s (%s)\n", verb.c_str(), p.c_str(), s.message().c_str(),
                   std::strerror(s.code()));
      rc = 1;
    }
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace mapfs::cli
