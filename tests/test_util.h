#pragma once
// Helpers shared by the test suites.
#include <array>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/error.h"
#include "models/parallel.h"

namespace shardcast::testing {

/// The source tree's root, for fixtures and source files: $SHARDCAST_SOURCE_DIR if set; else the
/// tree this binary was built from, if it is still there; else two directories above the test
/// binary (build/tests/ of a tree copied elsewhere, as on the GPU machine).
inline std::string SourceDir() {
  if (const char* env = std::getenv("SHARDCAST_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists(std::string(SHARDCAST_SOURCE_DIR) + "/tests/fixtures")) return SHARDCAST_SOURCE_DIR;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(SHARDCAST_SOURCE_DIR) : exe.parent_path().parent_path().parent_path().string();
}

/// tests/fixtures of SourceDir().
inline std::string FixturesDir() { return SourceDir() + "/tests/fixtures"; }

/// GPT-3 175B as Megatron-LM runs it on 1,024 A100 (Narayanan et al. 2021's 3-D parallel
/// layout): TP8 PP8 DP16, interleaved with 3 virtual stages, micro-batch 1, global batch 1,536,
/// sequence parallel, selective recompute, distributed optimizer, Megatron-Core's defaults.
inline ParallelConfig Gpt3_175bConfig() {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.dp = 16;
  c.vp = 3;
  c.schedule = Schedule::kInterleaved;
  c.micro_batch_size = 1;
  c.global_batch_size = 1536;
  c.sequence_parallel = true;
  c.recompute = Recompute::kSelective;
  c.zero_stage = 1;
  ApplyMegatronCoreDefaults(&c);
  return c;
}

/// This test process's scratch folder, $TMPDIR/shardcast_tests/PID (created): every process its
/// own, so that test processes running at once (ctest -j, two builds' suites on one machine)
/// never write each other's files.
inline std::filesystem::path TestTempDir() {
  auto dir = std::filesystem::temp_directory_path() / "shardcast_tests" / std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

/// Writes `text` to a fresh file in the test temp dir and returns its path.
inline std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto dir = TestTempDir();
  auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

struct RunResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs the shardcast binary with `args` (shell words), capturing stdout and stderr.
inline RunResult RunShardcast(const std::string& args) {
  const auto dir = TestTempDir();
  static int counter = 0;
  std::string err_path = (dir / ("stderr_" + std::to_string(::getpid()) + "_" +
                                 std::to_string(counter++)))
                             .string();
  std::string cmd = std::string(SHARDCAST_BINARY) + " " + args + " 2>" + err_path;
  RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_path);
  return r;
}

/// Whether `shardcast args` exits with code 2 and its standard error holds `fragment`; on failure
/// the message shows the exit code and standard error.
inline ::testing::AssertionResult ExitsTwoWith(const std::string& args, const std::string& fragment) {
  const RunResult r = RunShardcast(args);
  if (r.exit_code == 2 && r.err.find(fragment) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "shardcast " << args << ": exit " << r.exit_code << ", expected 2 with \""
                                       << fragment << "\"; stderr: " << r.err;
}

/// Runs a shell command line (e.g. an mpirun) with stderr merged into `out`; `err` stays empty.
inline RunResult RunCommand(const std::string& cmd) {
  RunResult r;
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// The message of the InputError `f` throws, or "(no error)" when it returns.
template <typename F>
std::string InputErrorOf(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace shardcast::testing
