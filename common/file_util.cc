#include "common/file_util.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <unistd.h>

#include "common/error.h"

namespace shardcast {
namespace {

// The temporary file being written, for the signal handler (a fixed buffer: the handler may only
// make async-signal-safe calls, so it reads no std::string).
char g_tmp_path[4096];
volatile std::sig_atomic_t g_tmp_active = 0;
std::mutex g_write_mutex;  // one atomic write at a time owns g_tmp_path

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

extern "C" void RemoveTmpAndReraise(int sig) {
  if (g_tmp_active) ::unlink(g_tmp_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

/// While alive: SIGINT, SIGTERM, SIGHUP and SIGQUIT remove the temporary file, then end the
/// process as the signal would have; the handlers in place before are restored afterwards.
class TmpFileGuard {
 public:
  explicit TmpFileGuard(const std::string& tmp) {
    if (tmp.size() < sizeof(g_tmp_path)) {
      std::memcpy(g_tmp_path, tmp.c_str(), tmp.size() + 1);
      g_tmp_active = 1;
    }
    struct sigaction sa {};
    sa.sa_handler = RemoveTmpAndReraise;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < std::size(kCleanupSignals); ++i) sigaction(kCleanupSignals[i], &sa, &old_[i]);
  }
  ~TmpFileGuard() {
    for (std::size_t i = 0; i < std::size(kCleanupSignals); ++i) sigaction(kCleanupSignals[i], &old_[i], nullptr);
    g_tmp_active = 0;
  }
  TmpFileGuard(const TmpFileGuard&) = delete;
  TmpFileGuard& operator=(const TmpFileGuard&) = delete;

 private:
  struct sigaction old_[std::size(kCleanupSignals)] {};
};

}  // namespace

void RefuseOverwritingInput(const std::string& option, const std::string& path, const std::vector<std::string>& inputs) {
  if (path.empty() || path == "-") return;
  std::error_code ec;
  for (const std::string& in : inputs) {
    if (std::filesystem::equivalent(path, in, ec) && !ec) {
      throw InputError("command line: " + option + ": got " + path + ", which is an input of this command (" + in +
                       "), expected another file (writing it would replace what is read)");
    }
  }
}

std::string OutputTarget(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(p, ec); ++hops) {
    if (hops == 40) throw InputError(path + ": a symbolic link loop (or more than 40 links), expected a file to write");
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) throw InputError(path + ": cannot read the symbolic link (" + ec.message() + ")");
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return p.string();
}

std::string FolderWriteError(const std::string& folder) {
  std::string probe = (folder.empty() ? std::string(".") : folder) + "/.shardcast-write-check.XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

void WriteFileAtomic(const std::string& path, const std::string& contents) {
  if (path == "-") {
    throw InputError("-: expected a file name to write; standard output ('-') is taken only by --csv, where the "
                     "CSV replaces the text");
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(path + ": is a folder, expected the path of a file to write");
  }
  // The temporary file is renamed over the target: a symbolic link is followed to its file (the
  // rename would replace the link), and a device, FIFO or socket is refused (it would be replaced
  // by a regular file: /dev/null, /dev/stdout).
  const std::string target = OutputTarget(path);
  if (std::filesystem::is_directory(target, ec)) {
    throw InputError(path + ": leads to a folder (" + target + "), expected the path of a file to write");
  }
  if (std::filesystem::exists(target, ec) && !std::filesystem::is_regular_file(target, ec)) {
    throw InputError(path + ": is not a regular file (a device, FIFO or socket), expected the path of a file to write");
  }
  std::lock_guard<std::mutex> lock(g_write_mutex);
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  TmpFileGuard guard(tmp);
  errno = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      const int err = errno;
      throw InputError(path + ": cannot open for writing (" +
                       (err != 0 ? std::string(std::strerror(err)) : std::string("is the folder writable?")) + ")");
    }
    out << contents;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw InputError(path + ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(path + ": cannot rename temporary file into place");
  }
}

}  // namespace shardcast
