// Status and Result<T>: how every fallible core function reports failure.
//
// Exceptions never cross the core's API. A failing call returns a non-OK Status whose message
// names what failed (file, stream, sample, frame) and why. Bad input is an expected outcome with
// its own codes; StatusCode::kInternal marks a broken invariant, i.e. a bug in stoker.
//
// Thread-safety: values, freely copied between threads.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace stoker {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller asked for something impossible (index out of range, bad size)
  kNotFound,           // a file or stream that should exist does not
  kCorruptData,        // the bytes are not what their format promises (truncated, corrupted)
  kUnsupported,        // valid input that stoker cannot handle (unknown codec, no timestamps)
  kIoError,            // the operating system refused a read
  kInternal,           // a stoker bug: an invariant did not hold
  kResourceExhausted,  // the system refused memory or threads (a limit, or too much asked)
  kPermissionDenied,   // a store refused the credentials (wrong secret, expired URL, no access)
};

/// Human-readable name of a code, e.g. "corrupt data".
const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  /// An OK status.
  Status() = default;
  /// REQUIRES: code != kOk.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// Returns a copy whose message is "<context>: <message>", for adding where the failure
  /// happened (the file, the sample) as an error travels up.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

/// Either a value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design, as absl::StatusOr
  /// REQUIRES: !status.ok().
  Result(Status status) : state_(std::move(status)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(state_); }
  /// The error; an OK status when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(state_); }

  /// REQUIRES: ok().
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }

  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> state_;
};

}  // namespace stoker

#define STOKER_CONCAT_INNER_(a, b) a##b
#define STOKER_CONCAT_(a, b) STOKER_CONCAT_INNER_(a, b)

/// Returns the Status of `expr` from the enclosing function when it is not OK.
#define STOKER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::stoker::Status stoker_status_ = (expr);        \
    if (!stoker_status_.ok()) return stoker_status_; \
  } while (0)

/// Evaluates `rexpr` (a Result<T>); on error returns its Status, else moves the value into `lhs`.
#define STOKER_ASSIGN_OR_RETURN(lhs, rexpr) \
  STOKER_ASSIGN_OR_RETURN_IMPL_(STOKER_CONCAT_(stoker_result_, __LINE__), lhs, rexpr)
#define STOKER_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                  \
  if (!result.ok()) return result.status();               \
  lhs = std::move(result).value()
