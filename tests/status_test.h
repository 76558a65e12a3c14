// blockscale::Status in GoogleTest terms, for every test: an assertion that prints the error's
// message, and the check that an error names what was wrong.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "formats/status.h"

// Fails the test when `expr` yields an error Status, showing the message; ASSERT_OK also returns.
#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    const ::blockscale::Status bs_ok_ = (expr);                                \
    ASSERT_TRUE(bs_ok_.is_ok()) << #expr << ": " << bs_ok_.message();          \
  } while (0)
#define EXPECT_OK(expr)                                                        \
  do {                                                                         \
    const ::blockscale::Status bs_ok_ = (expr);                                \
    EXPECT_TRUE(bs_ok_.is_ok()) << #expr << ": " << bs_ok_.message();          \
  } while (0)

namespace blockscale_test {

// True when s is an error whose message contains `word`.
inline bool mentions(const blockscale::Status& s, const std::string& word) {
  return !s.is_ok() && s.message().find(word) != std::string::npos;
}

// s must be an error whose message contains `needle`.
inline void expect_error(const blockscale::Status& s, const std::string& needle) {
  ASSERT_FALSE(s.is_ok()) << "expected an error naming " << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

}  // namespace blockscale_test
