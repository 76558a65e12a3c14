// printf into a std::string of whatever length it takes (%.6f of 1e300 is 300 digits): the
// number formatting of train/'s CSV logs and SVG plots.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace blockscale::train {

inline std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
inline std::string printf_string(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

}  // namespace blockscale::train
