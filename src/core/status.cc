#include "stoker/status.h"

namespace stoker {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kCorruptData:
      return "corrupt data";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
    case StatusCode::kPermissionDenied:
      return "permission denied";
    case StatusCode::kInternal:
      return "internal error (a stoker bug)";
  }
  return "unknown";
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace stoker
