// One process per GPU: who this process is (rank, world size, local rank) as read from the
// launcher's environment, and a TCP rendezvous that hands rank 0's ncclUniqueId to every rank.
// Host-only: no CUDA, no NCCL.
//
// Where the numbers come from
//   torchrun   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Used when any of the first
//              three is set; then all three must be.
//   srun       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, used when none of RANK / WORLD_SIZE /
//              LOCAL_RANK is set and SLURM_PROCID is (srun sets it per task; an salloc shell,
//              which has SLURM_NTASKS only, stays a single process). srun sets no MASTER_ADDR /
//              MASTER_PORT: export them in the job script.
//   neither    a single process: rank 0 of 1, local rank 0.
// An empty variable counts as unset. Every set integer must be all digits (a leading '-' is
// read, then refused by the range rule, so the message says which rule broke). World size >= 1,
// 0 <= rank < world size, 0 <= local rank < world size; with world size > 1, MASTER_ADDR and
// MASTER_PORT (1..65535) are required.
//
// The rendezvous port (only for world size > 1; 0 for a single process)
//   BLOCKSCALE_RENDEZVOUS_PORT   when set (1..65535), always.
//   MASTER_PORT + 1              when TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent
//                                already listens on MASTER_PORT with its own TCP store, so ours
//                                takes the next port (an error if that passes 65535).
//   MASTER_PORT                  otherwise (srun, or a launcher that leaves the port free).
//
// The rendezvous protocol (all integers 4 bytes, network order)
//   peer -> rank 0   magic "BSRZ", protocol version, the peer's rank, the peer's world size
//   rank 0 -> peer   magic "BSR1", blob length, blob bytes
// Rank 0 answers once every rank 1..world-1 has arrived exactly once, so the exchange is also a
// barrier: when rank 0 fails (a timeout, a duplicate rank) it closes every connection and each
// peer gets an error instead of going on into an NCCL init that would hang. A connection with a
// wrong magic (a port scanner, a stray client) is dropped and counted; one with the right magic
// but a different version, world size or an invalid rank is an error.
// Rank 0 holds one socket per peer until it answers: world sizes past the open-file limit
// (`ulimit -n`, often 1024) need that limit raised.
//
//   defines: DistributedEnv, read_distributed_env, exchange_unique_id
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/status.h"

namespace blockscale::train {

struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // which GPU of this node
  std::string master_addr;   // rank 0's host; empty for a single process
  int master_port = 0;       // as read; 0 when unset
  int rendezvous_port = 0;   // where exchange_unique_id meets (see above); 0 for a single process
  bool distributed() const { return world_size > 1; }
};

// Reads the launcher's variables through `getenv_fn` (nullptr: unset) into *out, which is left
// untouched on error. The error names the variable and the rule, e.g. "RANK=3 must be below
// WORLD_SIZE=2".
Status read_distributed_env(const std::function<const char*(const char*)>& getenv_fn,
                            DistributedEnv* out);
// The same through ::getenv.
Status read_distributed_env(DistributedEnv* out);

// Broadcasts a small opaque blob (1 byte to 64 KiB; the 128-byte ncclUniqueId) from rank 0 to
// every rank over TCP. Rank 0: *blob holds the bytes; it listens on INADDR_ANY:rendezvous_port
// and waits for all other ranks. Other ranks: connect to master_addr:rendezvous_port (IPv4),
// retrying until rank 0 listens, and receive *blob. Nothing waits past `timeout_s` seconds; the
// error then says what was reached and what was missing. World size 1: nothing to do, ok.
Status exchange_unique_id(const DistributedEnv& env, std::vector<uint8_t>* blob,
                          double timeout_s = 300);

}  // namespace blockscale::train
