#include "common/file_util.h"

#include <filesystem>

#include <cstdio>
#include <fstream>

#include <unistd.h>

#include "common/error.h"

namespace shardcast {

void WriteFileAtomic(const std::string& path, const std::string& contents) {
  if (path == "-") {
    throw InputError("-: expected a file name to write; standard output ('-') is taken only by --csv, where the "
                     "CSV replaces the text");
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(path + ": is a folder, expected the path of a file to write");
  }
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path + ": cannot open for writing (is the directory writable?)");
    out << contents;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw InputError(path + ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(path + ": cannot rename temporary file into place");
  }
}

}  // namespace shardcast
