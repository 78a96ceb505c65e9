#pragma once
/// \file file_util.h
/// Atomic output: every file shardcast writes goes to `path.tmp.PID` first and is renamed over
/// `path`, so an interrupted run never leaves a half-written file behind. While the temporary
/// file is being written, SIGINT, SIGTERM, SIGHUP and SIGQUIT remove it before the process ends;
/// only SIGKILL (or a power loss) can leave `path.tmp.PID` behind, never a partial `path`.

#include <string>
#include <vector>

namespace shardcast {

/// Writes `contents` to `path` atomically (a symbolic link: to its file, OutputTarget). InputError
/// (exit 2) naming the path when the directory is not writable, when `path` is a folder or a
/// device, FIFO or socket, or when it is "-" (standard output is not a file here). The command line checks output paths first (cli/options.h OutputFile).
void WriteFileAtomic(const std::string& path, const std::string& contents);

/// The file an output `path` writes: `path` itself, or, for a symbolic link, the file it points to
/// (followed link by link, a relative target from the link's folder, the target possibly not yet
/// existing). InputError naming `path` for a loop or more than 40 links.
std::string OutputTarget(const std::string& path);

/// An empty string when a new file can be created in `folder` (tried with a temporary file that
/// is removed at once), else the system's reason ("Permission denied", "Read-only file system").
std::string FolderWriteError(const std::string& folder);

/// InputError (exit 2) when the output `path` of `option` is one of the existing `inputs` (the
/// same file, by device and inode): writing it would replace what the command reads. "-" and
/// an empty path (standard output, or no output) pass.
void RefuseOverwritingInput(const std::string& option, const std::string& path, const std::vector<std::string>& inputs);

}  // namespace shardcast
