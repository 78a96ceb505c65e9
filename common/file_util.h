#pragma once
/// \file file_util.h
/// Atomic output: every file shardcast writes goes to `path.tmp.PID` first and is renamed over
/// `path`, so an interrupted run never leaves a half-written file behind.

#include <string>

namespace shardcast {

/// Writes `contents` to `path` atomically. InputError (exit 2) when the directory is not
/// writable, naming the path, or when `path` is "-" (standard output is not a file here).
void WriteFileAtomic(const std::string& path, const std::string& contents);

}  // namespace shardcast
