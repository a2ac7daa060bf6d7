// One function per CLI verb; each returns the process exit code
// (0 ok, 1 failure, 2 usage error) and prints its own messages.
#pragma once

#include <string>
#include <vector>

namespace mapfs::cli {

int Mkfs(const std::vector<std::string>& args);
int Info(const std::vector<std::string>& args);
int Fsck(const std::vector<std::string>& args);
int Bench(const std::vector<std::string>& args);
int Version(const std::vector<std::string>& args);

}  // namespace mapfs::cli
