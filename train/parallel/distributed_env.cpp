// The launcher's environment (torchrun, srun) read into a DistributedEnv, and the TCP rendezvous
// that hands rank 0's ncclUniqueId to every rank (distributed_env.h describes both).
#include "train/parallel/distributed_env.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "train/run/printf_string.h"  // defines: printf_string

namespace blockscale::train {
namespace {

// ---- the environment ----------------------------------------------------------------------------

using Getenv = std::function<const char*(const char*)>;

// The launcher's three identity variables under one naming convention.
struct IdentityNames {
  const char* rank;
  const char* world;
  const char* local;
};
constexpr IdentityNames kTorchrun{"RANK", "WORLD_SIZE", "LOCAL_RANK"};
constexpr IdentityNames kSlurm{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};

// The value of `name`; nullptr when unset or empty (`export RANK=` is how a shell clears it).
const char* get(const Getenv& getenv_fn, const char* name) {
  const char* v = getenv_fn(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// A value fit for an error message: at most 40 characters, non-printables as '?'.
std::string shown(const char* v) {
  std::string s;
  const size_t n = std::strlen(v);
  for (size_t i = 0; i < n && i < 40; ++i) s += (v[i] >= 0x20 && v[i] < 0x7f) ? v[i] : '?';
  return n > 40 ? s + "..." : s;
}

// An optional '-' and decimal digits, nothing else: "8 ", "+8", "0x8" and "8x" are refused
// rather than half-read. The '-' is accepted so that "-1" gets the range rule's message.
Status parse_int(const char* name, const char* text, int* out) {
  const char* p = text;
  const bool negative = *p == '-';
  if (negative) ++p;
  if (*p == '\0') return Status::error(printf_string("%s='%s' is not an integer", name, shown(text).c_str()));
  long long v = 0;
  for (; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') {
      return Status::error(printf_string("%s='%s' is not an integer (decimal digits only)", name,
                                         shown(text).c_str()));
    }
    v = v * 10 + (*p - '0');
    if (v > INT_MAX) return Status::error(printf_string("%s=%s is out of range", name, shown(text).c_str()));
  }
  *out = static_cast<int>(negative ? -v : v);
  return Status::ok();
}

Status parse_port(const char* name, const char* text, int* out) {
  BS_RETURN_IF_ERROR(parse_int(name, text, out));
  if (*out < 1 || *out > 65535) {
    return Status::error(printf_string("%s=%d must be a TCP port, 1 to 65535", name, *out));
  }
  return Status::ok();
}

// Rank, world size and local rank under one convention: all three set, all in range.
Status read_identity(const Getenv& getenv_fn, const IdentityNames& n, DistributedEnv* env) {
  const char* names[3] = {n.rank, n.world, n.local};
  const char* values[3] = {get(getenv_fn, n.rank), get(getenv_fn, n.world), get(getenv_fn, n.local)};
  for (int k = 0; k < 3; ++k) {
    if (values[k] != nullptr) continue;
    const int set = values[0] != nullptr ? 0 : values[1] != nullptr ? 1 : 2;  // the first one set
    return Status::error(printf_string("%s is unset while %s is set: a launcher sets %s, %s and %s together",
                                       names[k], names[set], n.rank, n.world, n.local));
  }
  BS_RETURN_IF_ERROR(parse_int(n.rank, values[0], &env->rank));
  BS_RETURN_IF_ERROR(parse_int(n.world, values[1], &env->world_size));
  BS_RETURN_IF_ERROR(parse_int(n.local, values[2], &env->local_rank));
  const int world = env->world_size;
  if (world < 1) return Status::error(printf_string("%s=%d must be at least 1", n.world, world));
  if (env->rank < 0) return Status::error(printf_string("%s=%d must be at least 0", n.rank, env->rank));
  if (env->rank >= world) {
    return Status::error(printf_string("%s=%d must be below %s=%d", n.rank, env->rank, n.world, world));
  }
  if (env->local_rank < 0) {
    return Status::error(printf_string("%s=%d must be at least 0", n.local, env->local_rank));
  }
  if (env->local_rank >= world) {  // a node cannot hold more ranks than the whole job
    return Status::error(printf_string("%s=%d must be below %s=%d", n.local, env->local_rank, n.world, world));
  }
  return Status::ok();
}

// torchrun writes Python's str(bool); 1 / 0 are accepted too.
Status parse_bool(const char* name, const char* text, bool* out) {
  const std::string v = text;
  const bool yes = v == "True" || v == "true" || v == "1";
  const bool no = v == "False" || v == "false" || v == "0";
  *out = yes;
  if (yes || no) return Status::ok();
  return Status::error(printf_string("%s='%s' must be True or False", name, shown(text).c_str()));
}

// ---- sockets ------------------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x4253525A;  // "BSRZ", a rank's greeting
constexpr uint32_t kReplyMagic = 0x42535231;  // "BSR1", rank 0's answer: a socket that connected to
                                              // itself never mistakes its own greeting for one
constexpr uint32_t kVersion = 1;
constexpr size_t kHelloBytes = 16;       // magic, version, rank, world size
constexpr size_t kReplyHeaderBytes = 8;  // magic, blob length
constexpr size_t kMaxBlobBytes = 64u << 10;

// A socket closed when it goes out of scope, on every path.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void put_u32(uint8_t* p, uint32_t v) {
  const uint32_t be = htonl(v);
  std::memcpy(p, &be, 4);
}

uint32_t get_u32(const uint8_t* p) {
  uint32_t be;
  std::memcpy(&be, p, 4);
  return ntohl(be);
}

// Milliseconds left for poll(), rounded up so a wait never ends just before the deadline.
int ms_left(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const long long ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, INT_MAX));
}

// Waits for `events` until the deadline: 1 ready (errors and hang-ups count: the next call on
// the socket reports them), 0 timed out, -1 failed (errno).
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    return rc;
  }
}

// The outcome of moving a whole buffer over a non-blocking socket.
struct Io {
  enum Kind { kOk, kEof, kTimeout, kError } kind = kOk;
  int err = 0;  // errno for kError
  std::string text() const {
    if (kind == kError) return std::strerror(err);
    return kind == kEof ? "connection closed" : kind == kTimeout ? "timed out" : "ok";
  }
};

// MSG_NOSIGNAL: a peer that went away is an error to report, not a SIGPIPE that kills the rank.
Io send_all(int fd, const uint8_t* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k > 0) {
      data += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int rc = wait_fd(fd, POLLOUT, deadline);
      if (rc == 0) return {Io::kTimeout, 0};
      if (rc < 0) return {Io::kError, errno};
      continue;
    }
    return {Io::kError, errno};
  }
  return {};
}

Io recv_all(int fd, uint8_t* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, data, n, 0);
    if (k > 0) {
      data += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return {Io::kEof, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      const int rc = wait_fd(fd, POLLIN, deadline);
      if (rc == 0) return {Io::kTimeout, 0};
      if (rc < 0) return {Io::kError, errno};
      continue;
    }
    return {Io::kError, errno};
  }
  return {};
}

std::string ipv4_text(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return printf_string("%s:%d", buf, ntohs(a.sin_port));
}

// "2, 5, 7": the ranks that never arrived, the first eight of them.
std::string missing_ranks(const std::vector<Fd>& peers) {
  std::string s;
  int listed = 0;
  for (size_t r = 1; r < peers.size(); ++r) {
    if (peers[r].valid()) continue;
    if (listed++ == 8) return s + ", ...";
    s += (s.empty() ? "" : ", ") + std::to_string(r);
  }
  return s;
}

// ---- rank 0 -------------------------------------------------------------------------------------

// A connection whose 16-byte greeting has not fully arrived.
struct Pending {
  Fd fd;
  std::string from;
  uint8_t hello[kHelloBytes];
  size_t got = 0;
};

// Checks a complete greeting and files the connection under its rank. A wrong magic is a stray
// client, not a rank: *dropped, and ok. A rank with a wrong version, world size or rank: an error.
Status admit(const DistributedEnv& env, Pending* p, std::vector<Fd>* peers, std::vector<std::string>* peer_from,
             bool* dropped) {
  *dropped = get_u32(p->hello) != kHelloMagic;
  if (*dropped) return Status::ok();
  const uint32_t version = get_u32(p->hello + 4), rank = get_u32(p->hello + 8), world = get_u32(p->hello + 12);
  if (version != kVersion) {
    return Status::error(printf_string("rendezvous: %s speaks protocol version %u, rank 0 speaks %u: every rank "
                                       "must run the same blockscale build", p->from.c_str(), version, kVersion));
  }
  if (world != static_cast<uint32_t>(env.world_size)) {
    return Status::error(printf_string("rendezvous: %s (rank %u) has world size %u, rank 0 has %d: the ranks "
                                       "come from different launches", p->from.c_str(), rank, world, env.world_size));
  }
  if (rank == 0 || rank >= world) {
    return Status::error(printf_string("rendezvous: %s claims rank %u; ranks 1 to %d are expected",
                                       p->from.c_str(), rank, env.world_size - 1));
  }
  if ((*peers)[rank].valid()) {
    return Status::error(printf_string("rendezvous: rank %u connected twice (from %s and from %s): two processes "
                                       "have the same rank", rank, (*peer_from)[rank].c_str(), p->from.c_str()));
  }
  (*peers)[rank] = std::move(p->fd);
  (*peer_from)[rank] = p->from;
  return Status::ok();
}

Status serve(const DistributedEnv& env, const std::vector<uint8_t>& blob, double timeout_s,
             Clock::time_point deadline) {
  const int port = env.rendezvous_port;
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.valid()) {
    return Status::error(printf_string("rendezvous: rank 0 cannot create a socket (%s)", std::strerror(errno)));
  }
  const int one = 1;  // a previous run's port in TIME_WAIT must not block this one
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener.get(), SOMAXCONN) != 0) {
    return Status::error(printf_string("rendezvous: rank 0 cannot listen on port %d (%s): if another process "
                                       "holds it, set BLOCKSCALE_RENDEZVOUS_PORT to a free port",
                                       port, std::strerror(errno)));
  }

  const int others = env.world_size - 1;
  std::vector<Fd> peers(static_cast<size_t>(env.world_size));  // by rank; valid once arrived
  std::vector<std::string> peer_from(peers.size());
  std::vector<Pending> pending;
  int arrived = 0, dropped = 0;
  std::vector<pollfd> fds;
  while (arrived < others) {
    // Checked on every pass, not only when poll times out: a stream of stray clients must not
    // keep rank 0 waiting forever.
    if (Clock::now() >= deadline) {
      std::string msg = printf_string("rendezvous: rank 0 timed out after %g s on port %d: %d of %d other ranks "
                                      "arrived (missing: %s)", timeout_s, port, arrived, others,
                                      missing_ranks(peers).c_str());
      if (dropped > 0) msg += printf_string("; dropped %d connection(s) that did not greet as a rank", dropped);
      return Status::error(msg + "; were all ranks launched, and can they reach this host?");
    }
    fds.assign(1, pollfd{listener.get(), POLLIN, 0});
    for (const Pending& p : pending) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
    const int rc = ::poll(fds.data(), fds.size(), ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Status::error(printf_string("rendezvous: rank 0 poll failed (%s)", std::strerror(errno)));
    // Greetings first, from the back so erasing keeps the earlier indices valid.
    for (size_t i = pending.size(); i-- > 0;) {
      if (fds[i + 1].revents == 0) continue;
      Pending& p = pending[i];
      const ssize_t k = ::recv(p.fd.get(), p.hello + p.got, kHelloBytes - p.got, 0);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      bool drop = k <= 0;  // closed or broken before a full greeting: not one of ours
      if (k > 0 && (p.got += static_cast<size_t>(k)) == kHelloBytes) {
        BS_RETURN_IF_ERROR(admit(env, &p, &peers, &peer_from, &drop));
        if (!drop) ++arrived;
      }
      if (drop) ++dropped;
      if (drop || p.got == kHelloBytes) pending.erase(pending.begin() + static_cast<long>(i));
    }
    if (fds[0].revents == 0) continue;
    for (;;) {  // every connection waiting in the backlog
      sockaddr_in from{};
      socklen_t len = sizeof from;
      const int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        if (err == EINTR || err == ECONNABORTED) continue;
        return Status::error(printf_string("rendezvous: rank 0 cannot accept a connection on port %d (%s)%s", port,
                                           std::strerror(err),
                                           err == EMFILE ? ": raise `ulimit -n` above the world size" : ""));
      }
      pending.push_back(Pending{Fd(fd), ipv4_text(from), {}, 0});
    }
  }

  // Everyone is here. A peer that already hung up would miss the answer while the others go on
  // into NCCL without it: refuse before answering anyone.
  fds.clear();
  for (int r = 1; r <= others; ++r) fds.push_back(pollfd{peers[r].get(), POLLIN, 0});
  if (::poll(fds.data(), fds.size(), 0) > 0) {
    for (int r = 1; r <= others; ++r) {
      if (fds[r - 1].revents == 0) continue;
      return Status::error(printf_string("rendezvous: rank %d (%s) hung up before rank 0 answered", r,
                                         peer_from[r].c_str()));
    }
  }
  std::vector<uint8_t> reply(kReplyHeaderBytes + blob.size());
  put_u32(reply.data(), kReplyMagic);
  put_u32(reply.data() + 4, static_cast<uint32_t>(blob.size()));
  std::memcpy(reply.data() + kReplyHeaderBytes, blob.data(), blob.size());
  for (int r = 1; r <= others; ++r) {
    const Io io = send_all(peers[r].get(), reply.data(), reply.size(), deadline);
    if (io.kind != Io::kOk) {
      return Status::error(printf_string("rendezvous: rank 0 could not send the unique id to rank %d (%s): %s", r,
                                         peer_from[r].c_str(), io.text().c_str()));
    }
  }
  return Status::ok();
}

// ---- ranks 1 .. world-1 ------------------------------------------------------------------------

// One non-blocking connect to `ai`, bounded by the deadline. Invalid Fd and *err on failure.
Fd try_connect(const addrinfo& ai, Clock::time_point deadline, int* err) {
  const auto fail = [err](int e) {
    *err = e;
    return Fd();
  };
  Fd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
  if (!fd.valid()) return fail(errno);
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS && errno != EINTR) return fail(errno);
  const int rc = wait_fd(fd.get(), POLLOUT, deadline);
  if (rc == 0) return fail(ETIMEDOUT);
  if (rc < 0) return fail(errno);
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) return fail(errno);
  if (so_error != 0) return fail(so_error);
  // Linux lets a connect to a free local port in the ephemeral range pick that same port and
  // connect to itself; that is nobody listening.
  sockaddr_storage self{}, peer{};
  socklen_t self_len = sizeof self, peer_len = sizeof peer;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&self), &self_len) == 0 &&
      ::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0 && self_len == peer_len &&
      std::memcmp(&self, &peer, self_len) == 0) {
    return fail(ECONNREFUSED);
  }
  return fd;
}

// Resolves and connects, again and again until rank 0 listens or the deadline passes. A name that
// does not resolve is retried too: container DNS often learns rank 0's name after it starts.
Status connect_to_rank0(const DistributedEnv& env, double timeout_s, Clock::time_point deadline, Fd* out) {
  const std::string target = printf_string("MASTER_ADDR=%s:%d", env.master_addr.c_str(), env.rendezvous_port);
  const std::string service = std::to_string(env.rendezvous_port);
  std::string last_error = "no attempt finished";
  auto backoff = std::chrono::milliseconds(20);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const int g = ::getaddrinfo(env.master_addr.c_str(), service.c_str(), &hints, &list);
    if (g != 0) {
      last_error = std::string("cannot resolve the name: ") + ::gai_strerror(g);
    } else {
      std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(list, ::freeaddrinfo);
      for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        Fd fd = try_connect(*ai, deadline, &err);
        if (fd.valid()) {
          *out = std::move(fd);
          return Status::ok();
        }
        last_error = std::strerror(err);
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::error(printf_string("rendezvous: rank %d could not reach %s within %g s (%s)", env.rank,
                                         target.c_str(), timeout_s, last_error.c_str()));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Status join(const DistributedEnv& env, std::vector<uint8_t>* blob, double timeout_s, Clock::time_point deadline) {
  const std::string target = printf_string("MASTER_ADDR=%s:%d", env.master_addr.c_str(), env.rendezvous_port);
  Fd conn;
  BS_RETURN_IF_ERROR(connect_to_rank0(env, timeout_s, deadline, &conn));
  uint8_t hello[kHelloBytes];
  put_u32(hello, kHelloMagic);
  put_u32(hello + 4, kVersion);
  put_u32(hello + 8, static_cast<uint32_t>(env.rank));
  put_u32(hello + 12, static_cast<uint32_t>(env.world_size));
  Io io = send_all(conn.get(), hello, sizeof hello, deadline);
  uint8_t header[kReplyHeaderBytes];
  if (io.kind == Io::kOk) io = recv_all(conn.get(), header, sizeof header, deadline);
  if (io.kind == Io::kTimeout) {
    return Status::error(printf_string("rendezvous: rank %d reached %s but got no unique id within %g s (rank 0 "
                                       "answers once all %d ranks have arrived: did every rank start?)",
                                       env.rank, target.c_str(), timeout_s, env.world_size));
  }
  if (io.kind != Io::kOk) {
    return Status::error(printf_string("rendezvous: rank %d reached %s, but rank 0 closed the connection before "
                                       "sending the unique id (%s): see rank 0's error",
                                       env.rank, target.c_str(), io.text().c_str()));
  }
  const uint32_t magic = get_u32(header), size = get_u32(header + 4);
  if (magic != kReplyMagic) {
    return Status::error(printf_string("rendezvous: rank %d reached %s but the answer is not from a blockscale "
                                       "rank 0 (another service listens there?): set BLOCKSCALE_RENDEZVOUS_PORT",
                                       env.rank, target.c_str()));
  }
  if (size == 0 || size > kMaxBlobBytes) {
    return Status::error(printf_string("rendezvous: rank %d got a unique id of %u bytes from %s; 1 to %zu expected",
                                       env.rank, size, target.c_str(), kMaxBlobBytes));
  }
  std::vector<uint8_t> bytes(size);
  io = recv_all(conn.get(), bytes.data(), bytes.size(), deadline);
  if (io.kind != Io::kOk) {
    return Status::error(printf_string("rendezvous: rank %d lost the connection to %s while receiving the unique "
                                       "id (%s)", env.rank, target.c_str(), io.text().c_str()));
  }
  *blob = std::move(bytes);
  return Status::ok();
}

}  // namespace

Status read_distributed_env(const std::function<const char*(const char*)>& getenv_fn, DistributedEnv* out) {
  if (out == nullptr) return Status::error("read_distributed_env: out is null");
  if (!getenv_fn) return Status::error("read_distributed_env: getenv_fn is empty");
  DistributedEnv env;
  const bool torchrun = get(getenv_fn, kTorchrun.rank) || get(getenv_fn, kTorchrun.world) ||
                        get(getenv_fn, kTorchrun.local);
  const bool slurm = !torchrun && get(getenv_fn, kSlurm.rank) != nullptr;
  if (torchrun || slurm) BS_RETURN_IF_ERROR(read_identity(getenv_fn, torchrun ? kTorchrun : kSlurm, &env));
  const char* world_name = slurm ? kSlurm.world : kTorchrun.world;

  const char* addr = get(getenv_fn, "MASTER_ADDR");
  const char* port = get(getenv_fn, "MASTER_PORT");
  const char* override_port = get(getenv_fn, "BLOCKSCALE_RENDEZVOUS_PORT");
  if (addr != nullptr) env.master_addr = addr;
  if (port != nullptr) BS_RETURN_IF_ERROR(parse_port("MASTER_PORT", port, &env.master_port));
  int rendezvous_override = 0;
  if (override_port != nullptr) {
    BS_RETURN_IF_ERROR(parse_port("BLOCKSCALE_RENDEZVOUS_PORT", override_port, &rendezvous_override));
  }
  if (env.distributed()) {
    const char* hint = slurm ? " (srun sets neither: export MASTER_ADDR and MASTER_PORT in the job script)" : "";
    if (addr == nullptr) {
      return Status::error(printf_string("MASTER_ADDR is required when %s=%d > 1: rank 0's host name or IPv4 "
                                         "address%s", world_name, env.world_size, hint));
    }
    if (port == nullptr) {
      return Status::error(printf_string("MASTER_PORT is required when %s=%d > 1: a TCP port on rank 0's host%s",
                                         world_name, env.world_size, hint));
    }
    bool agent_store = false;
    if (const char* v = get(getenv_fn, "TORCHELASTIC_USE_AGENT_STORE")) {
      BS_RETURN_IF_ERROR(parse_bool("TORCHELASTIC_USE_AGENT_STORE", v, &agent_store));
    }
    if (rendezvous_override != 0) {
      env.rendezvous_port = rendezvous_override;
    } else if (agent_store) {
      if (env.master_port == 65535) {
        return Status::error("MASTER_PORT=65535 leaves no port for the rendezvous: torchrun's agent store holds "
                             "MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so the rendezvous takes "
                             "MASTER_PORT+1; pick a lower --master-port or set BLOCKSCALE_RENDEZVOUS_PORT");
      }
      env.rendezvous_port = env.master_port + 1;
    } else {
      env.rendezvous_port = env.master_port;
    }
  }
  *out = std::move(env);
  return Status::ok();
}

Status read_distributed_env(DistributedEnv* out) {
  return read_distributed_env([](const char* name) -> const char* { return std::getenv(name); }, out);
}

Status exchange_unique_id(const DistributedEnv& env, std::vector<uint8_t>* blob, double timeout_s) {
  if (blob == nullptr) return Status::error("exchange_unique_id: blob is null");
  if (!(timeout_s > 0) || !std::isfinite(timeout_s)) {
    return Status::error(printf_string("exchange_unique_id: timeout_s=%g must be a positive number of seconds",
                                       timeout_s));
  }
  if (env.world_size < 1) {
    return Status::error(printf_string("exchange_unique_id: world_size=%d must be at least 1", env.world_size));
  }
  if (env.rank < 0 || env.rank >= env.world_size) {
    return Status::error(printf_string("exchange_unique_id: rank=%d must be in 0..%d", env.rank, env.world_size - 1));
  }
  if (!env.distributed()) return Status::ok();
  if (env.rendezvous_port < 1 || env.rendezvous_port > 65535) {
    return Status::error(printf_string("exchange_unique_id: rendezvous_port=%d must be a TCP port, 1 to 65535 "
                                       "(read_distributed_env sets it)", env.rendezvous_port));
  }
  // A timeout of years is "forever"; clamp it so the deadline arithmetic cannot overflow.
  const auto wait = std::chrono::duration<double>(std::min(timeout_s, 1e8));
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
  if (env.rank == 0) {
    if (blob->empty() || blob->size() > kMaxBlobBytes) {
      return Status::error(printf_string("exchange_unique_id: rank 0's blob has %zu bytes; 1 to %zu expected",
                                         blob->size(), kMaxBlobBytes));
    }
    return serve(env, *blob, timeout_s, deadline);
  }
  if (env.master_addr.empty()) return Status::error("exchange_unique_id: master_addr is empty (MASTER_ADDR)");
  return join(env, blob, timeout_s, deadline);
}

}  // namespace blockscale::train
