#include "common/error.h"

namespace shardcast {

InputError InputError::Field(const std::string& file, const std::string& pointer,
                             const std::string& value, const std::string& expected) {
  std::string where = file.empty() ? std::string("input") : file;
  std::string ptr = pointer.empty() ? std::string("/") : pointer;
  return InputError(where + ": " + ptr + ": got " + value + ", expected " + expected);
}

void Check(bool condition, const std::string& message) {
  if (!condition) throw InternalError("internal error: " + message);
}

}  // namespace shardcast
