// One function per CLI verb; each returns the process exit code
// (0 ok, 1 failure, 2 usage error) and prints its own messages.
#pragma once

#include <string>
#include <vector>

namespace mapfs::cli {

// Pool verbs (commands.cc).
int Mkfs(const std::vector<std::string>& args);
int Info(const std::vector<std::string>& args);
int Fsck(const std::vector<std::string>& args);
int Trim(const std::vector<std::string>& args);  // punch free pages
int Bench(const std::vector<std::string>& args);  // mapfs bench (bench_command.cc)
int Run(const std::vector<std::string>& args);  // mapfs run (run_command.cc)
int Mount(const std::vector<std::string>& args);   // FUSE (mount_command.cc)
int Umount(const std::vector<std::string>& args);
int Version(const std::vector<std::string>& args);
// mapfs overlay cat|import|export|fsck (overlay_command.cc).
int Overlay(const std::vector<std::string>& args);

// File verbs on a pool, without a kernel mount: each mounts the pool's
// file system for the length of the command (fs_commands.cc,
// fs_io_commands.cc, fs_tree_commands.cc).
int Ls(const std::vector<std::string>& args);
int Stat(const std::vector<std::string>& args);
int Df(const std::vector<std::string>& args);
int Cat(const std::vector<std::string>& args);
int Put(const std::vector<std::string>& args);
int Get(const std::vector<std::string>& args);
int Rm(const std::vector<std::string>& args);
int Mkdir(const std::vector<std::string>& args);
int Mv(const std::vector<std::string>& args);
int Ln(const std::vector<std::string>& args);

}  // namespace mapfs::cli
