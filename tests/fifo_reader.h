// Runs a file reader on a FIFO, for the tests that inputs which are not regular files are refused
// without blocking: a FIFO opened for reading without O_NONBLOCK waits in open() for a writer.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>

namespace blockscale_test {

// Makes a FIFO at `path`, runs read(path) (returning a Status) on another thread and returns the
// status' message, or "hung in open()" when it has not returned within 5 s; such a reader is then
// released by opening the FIFO for writing, so the test fails instead of hanging.
template <typename Read>
std::string read_fifo(const std::string& path, Read read) {
  if (::mkfifo(path.c_str(), 0600) != 0) return "mkfifo failed";
  std::future<std::string> result = std::async(std::launch::async, [&] { return read(path).message(); });
  if (result.wait_for(std::chrono::seconds(5)) == std::future_status::ready) return result.get();
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
  result.wait();
  return "hung in open()";
}

}  // namespace blockscale_test
