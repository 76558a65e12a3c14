// The launcher's environment (torchrun, srun, none) and its errors; the rendezvous over real
// sockets on 127.0.0.1: every rank gets rank 0's bytes, and every way of failing ends in time
// with a message that says what happened.
#include "train/parallel/distributed_env.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace blockscale::train {
namespace {

using Vars = std::map<std::string, std::string>;

Status read_env(const Vars& vars, DistributedEnv* out) {
  return read_distributed_env(
      [&vars](const char* name) -> const char* {
        const auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      out);
}

// The error of reading `vars`; fails the test when the read succeeds.
std::string env_error(const Vars& vars) {
  DistributedEnv env;
  const Status s = read_env(vars, &env);
  EXPECT_FALSE(s.is_ok());
  return s.message();
}

const Vars kTorchrun4 = {{"RANK", "2"},         {"WORLD_SIZE", "4"},   {"LOCAL_RANK", "2"},
                         {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};

Vars with(Vars vars, const std::string& name, const std::string& value) {
  vars[name] = value;
  return vars;
}

Vars without(Vars vars, const std::string& name) {
  vars.erase(name);
  return vars;
}

// ---- the environment ----------------------------------------------------------------------------

TEST(ReadDistributedEnv, NothingSetIsOneProcess) {
  DistributedEnv env;
  env.rank = 7;  // poisoned: the read must write every field
  env.master_port = 7;
  ASSERT_TRUE(read_env({}, &env).is_ok());
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.master_addr, "");
  EXPECT_EQ(env.master_port, 0);
  EXPECT_EQ(env.rendezvous_port, 0);
  EXPECT_FALSE(env.distributed());
}

TEST(ReadDistributedEnv, TorchrunVariables) {
  DistributedEnv env;
  const Status s = read_env(kTorchrun4, &env);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.rendezvous_port, 29500);  // no agent store: the port is free for us
  EXPECT_TRUE(env.distributed());
}

TEST(ReadDistributedEnv, TorchrunAgentStoreMovesTheRendezvousToTheNextPort) {
  for (const char* yes : {"True", "true", "1"}) {
    DistributedEnv env;
    ASSERT_TRUE(read_env(with(kTorchrun4, "TORCHELASTIC_USE_AGENT_STORE", yes), &env).is_ok()) << yes;
    EXPECT_EQ(env.master_port, 29500);
    EXPECT_EQ(env.rendezvous_port, 29501) << yes;
  }
  for (const char* no : {"False", "false", "0"}) {
    DistributedEnv env;
    ASSERT_TRUE(read_env(with(kTorchrun4, "TORCHELASTIC_USE_AGENT_STORE", no), &env).is_ok()) << no;
    EXPECT_EQ(env.rendezvous_port, 29500) << no;
  }
  EXPECT_NE(env_error(with(kTorchrun4, "TORCHELASTIC_USE_AGENT_STORE", "yes")).find(
                "TORCHELASTIC_USE_AGENT_STORE='yes' must be True or False"),
            std::string::npos);
}

TEST(ReadDistributedEnv, AgentStoreOnTheLastPortLeavesNoRoom) {
  const Vars vars = with(with(kTorchrun4, "TORCHELASTIC_USE_AGENT_STORE", "True"), "MASTER_PORT", "65535");
  const std::string e = env_error(vars);
  EXPECT_NE(e.find("MASTER_PORT=65535 leaves no port"), std::string::npos) << e;
  EXPECT_NE(e.find("BLOCKSCALE_RENDEZVOUS_PORT"), std::string::npos) << e;
  DistributedEnv env;  // the override is the way out
  ASSERT_TRUE(read_env(with(vars, "BLOCKSCALE_RENDEZVOUS_PORT", "40000"), &env).is_ok());
  EXPECT_EQ(env.rendezvous_port, 40000);
}

TEST(ReadDistributedEnv, RendezvousPortOverrideWins) {
  DistributedEnv env;
  Vars vars = with(with(kTorchrun4, "TORCHELASTIC_USE_AGENT_STORE", "True"), "BLOCKSCALE_RENDEZVOUS_PORT", "31000");
  ASSERT_TRUE(read_env(vars, &env).is_ok());
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.rendezvous_port, 31000);
  ASSERT_TRUE(read_env(with(kTorchrun4, "BLOCKSCALE_RENDEZVOUS_PORT", "31001"), &env).is_ok());
  EXPECT_EQ(env.rendezvous_port, 31001);
  for (const char* bad : {"0", "65536", "31000x", "-5"}) {
    const std::string e = env_error(with(kTorchrun4, "BLOCKSCALE_RENDEZVOUS_PORT", bad));
    EXPECT_EQ(e.find("BLOCKSCALE_RENDEZVOUS_PORT"), 0u) << e;
  }
  // Checked even for one process: a typo in our own variable is never ignored.
  EXPECT_NE(env_error({{"BLOCKSCALE_RENDEZVOUS_PORT", "abc"}}).find("BLOCKSCALE_RENDEZVOUS_PORT='abc'"),
            std::string::npos);
}

TEST(ReadDistributedEnv, SlurmFallback) {
  DistributedEnv env;
  const Vars vars = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                     {"MASTER_ADDR", "node17"}, {"MASTER_PORT", "29400"}};
  const Status s = read_env(vars, &env);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "node17");
  EXPECT_EQ(env.rendezvous_port, 29400);

  // Errors name Slurm's variables, and say that srun sets no MASTER_ADDR.
  EXPECT_NE(env_error(with(vars, "SLURM_PROCID", "8")).find("SLURM_PROCID=8 must be below SLURM_NTASKS=8"),
            std::string::npos);
  const std::string e = env_error(without(vars, "MASTER_ADDR"));
  EXPECT_NE(e.find("MASTER_ADDR is required when SLURM_NTASKS=8 > 1"), std::string::npos) << e;
  EXPECT_NE(e.find("srun sets neither"), std::string::npos) << e;
  EXPECT_NE(env_error(without(vars, "SLURM_LOCALID")).find("SLURM_LOCALID is unset while SLURM_PROCID is set"),
            std::string::npos);
}

TEST(ReadDistributedEnv, TorchrunVariablesWinOverSlurm) {
  // torchrun inside an srun step: the job's Slurm task is not this worker's rank.
  Vars vars = kTorchrun4;
  vars.insert({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}});
  DistributedEnv env;
  ASSERT_TRUE(read_env(vars, &env).is_ok());
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
}

TEST(ReadDistributedEnv, AllocationShellWithoutSrunIsOneProcess) {
  // salloc sets SLURM_NTASKS for the allocation; only srun's tasks get SLURM_PROCID.
  DistributedEnv env;
  ASSERT_TRUE(read_env({{"SLURM_NTASKS", "4"}}, &env).is_ok());
  EXPECT_EQ(env.world_size, 1);
}

TEST(ReadDistributedEnv, EmptyValuesCountAsUnset) {
  DistributedEnv env;
  ASSERT_TRUE(read_env({{"RANK", ""}, {"WORLD_SIZE", ""}, {"LOCAL_RANK", ""}, {"MASTER_PORT", ""}}, &env).is_ok());
  EXPECT_EQ(env.world_size, 1);
}

TEST(ReadDistributedEnv, PartialTorchrunSetIsAnError) {
  EXPECT_NE(env_error(without(kTorchrun4, "WORLD_SIZE")).find("WORLD_SIZE is unset while RANK is set"),
            std::string::npos);
  EXPECT_NE(env_error({{"LOCAL_RANK", "0"}}).find("RANK is unset while LOCAL_RANK is set"), std::string::npos);
}

// Every integer variable refuses text that is not wholly a decimal integer.
class JunkInteger : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(JunkInteger, NamesTheVariable) {
  const auto [name, value] = GetParam();
  const std::string e = env_error(with(kTorchrun4, name, value));
  EXPECT_EQ(e.rfind(std::string(name) + "=", 0), 0u) << e;
  EXPECT_TRUE(e.find("is not an integer") != std::string::npos || e.find("out of range") != std::string::npos)
      << e;
}

INSTANTIATE_TEST_SUITE_P(Variables, JunkInteger,
                         ::testing::Combine(::testing::Values("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"),
                                            ::testing::Values("3x", " 3", "3 ", "+3", "0x3", "3.0", "-", "abc",
                                                              "99999999999")));

TEST(ReadDistributedEnv, RangeRules) {
  EXPECT_EQ(env_error(with(with(kTorchrun4, "RANK", "3"), "WORLD_SIZE", "2")),
            "RANK=3 must be below WORLD_SIZE=2");
  EXPECT_EQ(env_error(with(kTorchrun4, "RANK", "4")), "RANK=4 must be below WORLD_SIZE=4");
  EXPECT_EQ(env_error(with(kTorchrun4, "RANK", "-1")), "RANK=-1 must be at least 0");
  EXPECT_EQ(env_error(with(with(kTorchrun4, "RANK", "0"), "WORLD_SIZE", "0")), "WORLD_SIZE=0 must be at least 1");
  EXPECT_EQ(env_error(with(kTorchrun4, "LOCAL_RANK", "-2")), "LOCAL_RANK=-2 must be at least 0");
  EXPECT_EQ(env_error(with(kTorchrun4, "LOCAL_RANK", "4")), "LOCAL_RANK=4 must be below WORLD_SIZE=4");
  EXPECT_EQ(env_error(with(kTorchrun4, "MASTER_PORT", "0")), "MASTER_PORT=0 must be a TCP port, 1 to 65535");
  EXPECT_EQ(env_error(with(kTorchrun4, "MASTER_PORT", "65536")), "MASTER_PORT=65536 must be a TCP port, 1 to 65535");
}

TEST(ReadDistributedEnv, MasterAddressAndPortAreRequiredForSeveralRanks) {
  const std::string addr = env_error(without(kTorchrun4, "MASTER_ADDR"));
  EXPECT_EQ(addr.rfind("MASTER_ADDR is required when WORLD_SIZE=4 > 1", 0), 0u) << addr;
  EXPECT_EQ(addr.find("srun"), std::string::npos) << addr;
  const std::string port = env_error(without(kTorchrun4, "MASTER_PORT"));
  EXPECT_EQ(port.rfind("MASTER_PORT is required when WORLD_SIZE=4 > 1", 0), 0u) << port;

  DistributedEnv env;  // one rank needs neither
  ASSERT_TRUE(read_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}}, &env).is_ok());
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.rendezvous_port, 0);
}

TEST(ReadDistributedEnv, OutputUntouchedOnError) {
  DistributedEnv env;
  env.rank = 42;
  EXPECT_FALSE(read_env(with(kTorchrun4, "RANK", "9"), &env).is_ok());
  EXPECT_EQ(env.rank, 42);
  EXPECT_FALSE(read_distributed_env(nullptr).is_ok());
}

TEST(ReadDistributedEnv, ProcessEnvironmentOverload) {
  // Each test runs in its own process under ctest; restore anyway for a plain run of the binary.
  const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                         "TORCHELASTIC_USE_AGENT_STORE", "BLOCKSCALE_RENDEZVOUS_PORT"};
  std::map<std::string, std::string> saved;
  for (const char* n : names) {
    if (const char* v = std::getenv(n)) saved[n] = v;
    ::unsetenv(n);
  }
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  DistributedEnv env;
  const Status s = read_distributed_env(&env);
  for (const char* n : names) ::unsetenv(n);
  for (const auto& [n, v] : saved) ::setenv(n.c_str(), v.c_str(), 1);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.rendezvous_port, 29501);
}

// ---- the rendezvous -----------------------------------------------------------------------------

// A port nobody listens on right now: bind port 0, read back what the kernel chose, close.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ADD_FAILURE() << "cannot pick a free port";
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

DistributedEnv local_env(int rank, int world, int port) {
  DistributedEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.rendezvous_port = port;
  return env;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct RankRun {
  Status status = Status::ok();
  std::vector<uint8_t> blob;
};

// Runs `env`'s side of the exchange on a thread into *run.
std::thread start_rank(const DistributedEnv& env, RankRun* run, double timeout_s) {
  return std::thread([env, run, timeout_s] { run->status = exchange_unique_id(env, &run->blob, timeout_s); });
}

// A client that is not a rank: connects, sends `bytes`, hangs up.
void stray_client(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (!bytes.empty()) {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  ::close(fd);
}

TEST(ExchangeUniqueId, WorldOfThreeAllGetRankZerosBytes) {
  const int port = free_port();
  // Twice on the same port: the second round must not trip over the first's closed sockets.
  for (uint32_t round = 0; round < 2; ++round) {
    std::vector<RankRun> runs(3);
    runs[0].blob = random_bytes(128, 1234 + round);
    runs[1].blob.assign(5, 0xEE);  // poisoned: must be replaced, size included
    std::vector<std::thread> threads;
    // Peers first, so they retry until rank 0 listens.
    threads.push_back(start_rank(local_env(2, 3, port), &runs[2], 10));
    threads.push_back(start_rank(local_env(1, 3, port), &runs[1], 10));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    threads.push_back(start_rank(local_env(0, 3, port), &runs[0], 10));
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(runs[r].status.is_ok()) << "rank " << r << ": " << runs[r].status.message();
      EXPECT_EQ(runs[r].blob, random_bytes(128, 1234 + round)) << "rank " << r;
    }
  }
}

TEST(ExchangeUniqueId, RankZeroTimesOutWithAMissingPeer) {
  const int port = free_port();
  RankRun zero, one;
  zero.blob = random_bytes(128, 7);
  const auto start = std::chrono::steady_clock::now();
  std::thread t1 = start_rank(local_env(1, 3, port), &one, 10);
  std::thread t0 = start_rank(local_env(0, 3, port), &zero, 1.0);
  t0.join();
  t1.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 3.0);  // the peer learns of rank 0's failure at once, not after its own 10 s
  ASSERT_FALSE(zero.status.is_ok());
  const std::string e0 = zero.status.message();
  EXPECT_NE(e0.find("rank 0 timed out after 1 s on port " + std::to_string(port)), std::string::npos) << e0;
  EXPECT_NE(e0.find("1 of 2 other ranks arrived (missing: 2)"), std::string::npos) << e0;
  ASSERT_FALSE(one.status.is_ok());
  EXPECT_NE(one.status.message().find("rank 0 closed the connection"), std::string::npos) << one.status.message();
  EXPECT_TRUE(one.blob.empty());
}

TEST(ExchangeUniqueId, PeerTimesOutWhenNobodyListens) {
  const int port = free_port();
  RankRun one;
  const auto start = std::chrono::steady_clock::now();
  start_rank(local_env(1, 2, port), &one, 0.5).join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 2.0);
  ASSERT_FALSE(one.status.is_ok());
  EXPECT_EQ(one.status.message(), "rendezvous: rank 1 could not reach MASTER_ADDR=127.0.0.1:" + std::to_string(port) +
                                      " within 0.5 s (Connection refused)");
}

TEST(ExchangeUniqueId, PeerCannotResolveTheAddress) {
  DistributedEnv env = local_env(1, 2, free_port());
  env.master_addr = "no-such-host.invalid";
  std::vector<uint8_t> blob;
  const Status s = exchange_unique_id(env, &blob, 0.3);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("could not reach MASTER_ADDR=no-such-host.invalid:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cannot resolve the name"), std::string::npos) << s.message();
}

TEST(ExchangeUniqueId, StrayConnectionsAreDropped) {
  const int port = free_port();
  RankRun zero, one;
  zero.blob = random_bytes(128, 9);
  std::thread t0 = start_rank(local_env(0, 2, port), &zero, 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stray_client(port, "GET / HTTP/1.1\r\n\r\n");  // a wrong greeting
  stray_client(port, "");                        // a port scanner: connect, hang up
  std::thread t1 = start_rank(local_env(1, 2, port), &one, 10);
  t0.join();
  t1.join();
  ASSERT_TRUE(zero.status.is_ok()) << zero.status.message();
  ASSERT_TRUE(one.status.is_ok()) << one.status.message();
  EXPECT_EQ(one.blob, zero.blob);
}

TEST(ExchangeUniqueId, DuplicateRankIsAnError) {
  const int port = free_port();
  RankRun zero, a, b;
  zero.blob = random_bytes(128, 11);
  std::thread t0 = start_rank(local_env(0, 3, port), &zero, 10);
  std::thread ta = start_rank(local_env(1, 3, port), &a, 10);
  std::thread tb = start_rank(local_env(1, 3, port), &b, 10);
  t0.join();
  ta.join();
  tb.join();
  ASSERT_FALSE(zero.status.is_ok());
  EXPECT_NE(zero.status.message().find("rank 1 connected twice"), std::string::npos) << zero.status.message();
  EXPECT_FALSE(a.status.is_ok());
  EXPECT_FALSE(b.status.is_ok());
}

TEST(ExchangeUniqueId, WorldSizeMismatchIsAnError) {
  const int port = free_port();
  RankRun zero, one;
  zero.blob = random_bytes(128, 13);
  std::thread t0 = start_rank(local_env(0, 2, port), &zero, 10);
  std::thread t1 = start_rank(local_env(1, 4, port), &one, 10);
  t0.join();
  t1.join();
  ASSERT_FALSE(zero.status.is_ok());
  EXPECT_NE(zero.status.message().find("has world size 4, rank 0 has 2"), std::string::npos)
      << zero.status.message();
  EXPECT_FALSE(one.status.is_ok());
}

TEST(ExchangeUniqueId, AnotherServiceOnThePortIsDetected) {
  // Something else (say torchrun's store) listens where rank 0 should, and answers junk.
  const int port = free_port();
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  std::thread service([listener] {
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    char hello[16];
    (void)::recv(c, hello, sizeof hello, MSG_WAITALL);
    (void)::send(c, "HTTP/1.1 400 Bad\r\n", 18, MSG_NOSIGNAL);
    ::close(c);
  });
  std::vector<uint8_t> blob;
  const Status s = exchange_unique_id(local_env(1, 2, port), &blob, 5);
  service.join();
  ::close(listener);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not from a blockscale rank 0"), std::string::npos) << s.message();
}

TEST(ExchangeUniqueId, PortInUseIsAnError) {
  const int port = free_port();
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(holder, 4), 0);
  std::vector<uint8_t> blob = random_bytes(128, 3);
  const Status s = exchange_unique_id(local_env(0, 2, port), &blob, 1);
  ::close(holder);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("rank 0 cannot listen on port " + std::to_string(port) + " (Address already in use)"),
            std::string::npos)
      << s.message();
}

TEST(ExchangeUniqueId, OneRankIsANoOp) {
  std::vector<uint8_t> blob = {1, 2, 3};
  DistributedEnv env;  // rank 0 of 1, no address, no port
  ASSERT_TRUE(exchange_unique_id(env, &blob).is_ok());
  EXPECT_EQ(blob, (std::vector<uint8_t>{1, 2, 3}));
}

TEST(ExchangeUniqueId, BadArguments) {
  std::vector<uint8_t> blob = random_bytes(128, 5);
  const DistributedEnv env = local_env(0, 2, 29500);
  EXPECT_NE(exchange_unique_id(env, nullptr).message().find("blob is null"), std::string::npos);
  EXPECT_NE(exchange_unique_id(env, &blob, 0).message().find("timeout_s=0 must be"), std::string::npos);
  EXPECT_NE(exchange_unique_id(env, &blob, std::nan("")).message().find("timeout_s=nan must be"), std::string::npos);
  DistributedEnv bad = env;
  bad.rank = 2;
  EXPECT_NE(exchange_unique_id(bad, &blob).message().find("rank=2 must be in 0..1"), std::string::npos);
  bad = env;
  bad.rendezvous_port = 0;
  EXPECT_NE(exchange_unique_id(bad, &blob).message().find("rendezvous_port=0"), std::string::npos);
  std::vector<uint8_t> empty;
  EXPECT_NE(exchange_unique_id(env, &empty).message().find("blob has 0 bytes"), std::string::npos);
  std::vector<uint8_t> huge((64u << 10) + 1);
  EXPECT_NE(exchange_unique_id(env, &huge).message().find("blob has 65537 bytes"), std::string::npos);
  bad = local_env(1, 2, 29500);
  bad.master_addr.clear();
  EXPECT_NE(exchange_unique_id(bad, &blob).message().find("master_addr is empty"), std::string::npos);
}

}  // namespace
}  // namespace blockscale::train
