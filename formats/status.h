// The result of every public blockscale call: ok, or an error naming the argument and the rule.
#pragma once

#include <string>
#include <utility>

namespace blockscale {

class Status {
 public:
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  explicit Status(std::string m) : failed_(true), message_(std::move(m)) {}
  bool failed_ = false;
  std::string message_;
};

// Returns early from the enclosing function when `expr` yields an error Status.
#define BS_RETURN_IF_ERROR(expr)          \
  do {                                    \
    ::blockscale::Status bs_status_ = (expr); \
    if (!bs_status_) return bs_status_;   \
  } while (0)

}  // namespace blockscale
