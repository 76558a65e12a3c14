// Data parallelism across GPUs through NCCL: one process per GPU, ranks from the launcher's
// environment (train/parallel/distributed_env.h), rank 0's ncclUniqueId handed to the others over TCP.
// NVLink multicast (NVLS) stays off: the multi-GPU hosts this was built on are shared, and a
// program using it can take the host's GPUs out of service.
#pragma once

#include <memory>

#include "train/parallel/communicator.h"
#include "train/parallel/distributed_env.h"

namespace blockscale::train {

// Selects GPU env.local_rank and joins the NCCL communicator of env.world_size ranks; the device
// sums take the path `collectives` asks for (kCopyEngines where they cannot work: an error that
// says why).
Status make_nccl_communicator(const DistributedEnv& env, DeviceCollectives collectives,
                              std::unique_ptr<Communicator>* out);

}  // namespace blockscale::train
