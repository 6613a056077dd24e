// Status and StatusOr<T>: the project's error type, with Abseil's (gRPC's) canonical codes.
//
// Functions that can fail return Status or StatusOr<T>; exceptions never cross a room boundary.
// Codes map to HTTP only at the API edge.
//
//   StatusOr<Cluster> c = LoadInventory("nodes.yaml");
//   if (!c.ok()) { std::cerr << c.status().ToString() << "\n"; return 1; }
//   Use(*c);
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <ostream>
#include <variant>

namespace aicloud {

enum class StatusCode {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

class Status;
// For test failure messages and logs: "NOT_FOUND: Job nlp/a not found".
std::ostream& operator<<(std::ostream& os, const Status& status);

// Thread-compatible value type.
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: nodes.csv:12: gpu: not a number" (just "OK" when ok).
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status UnauthenticatedError(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }

// Holds either a T or a non-OK Status.
template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "StatusOr built from an OK status");
  }
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? OkStatus() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace aicloud

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define AICLOUD_RETURN_IF_ERROR(expr)           \
  do {                                          \
    ::aicloud::Status aicloud_status_ = (expr); \
    if (!aicloud_status_.ok()) return aicloud_status_; \
  } while (0)
