// chorus — who am I: rank, world size and master address from the launcher's environment.
//
// Detection order (the first complete set wins):
//   1. chorus-run / explicit: CHORUS_RANK, CHORUS_WORLD_SIZE, CHORUS_LOCAL_RANK,
//      CHORUS_LOCAL_WORLD_SIZE, CHORUS_MASTER_ADDR, CHORUS_MASTER_PORT
//   2. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   3. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   4. Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// Open MPI comes before Slurm because mpirun inside a Slurm allocation starts its daemons with
// srun: every rank then also inherits the daemon's SLURM_PROCID (a node index, not a rank).
// For 3 and 4 the master comes from CHORUS_MASTER_ADDR/PORT (or MASTER_ADDR/PORT); when none is
// given and every rank is on this host, 127.0.0.1 and port 29500 are used.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace chorus {

// The largest world size chorus accepts, from a launcher or in a constructor. It is checked before
// anything is sized by the world size, so that a wrong value is an error naming it, not an
// exhausted memory.
inline constexpr int kMaxWorldSize = 1 << 20;

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher;         // "chorus", "torchrun", "slurm", "openmpi", or "none"
  std::optional<int> store_fd;  // CHORUS_STORE_FD: a listening socket rank 0 adopts
  std::string job_id;           // CHORUS_JOB_ID (chorus-run sets it), else empty
};

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// Reads the process environment. Throws chorus::InvalidArgument with an actionable message when
// the variables are missing, malformed or inconsistent (rank >= world size, ...).
LaunchEnv detect_launch_env();
// The same against any lookup (tests use a map).
LaunchEnv detect_launch_env(const EnvLookup& lookup);

// The device of this rank among `device_count` of its host: its local rank modulo the count, so
// that the ranks of a host spread over its GPUs (and share them when there are more ranks); 0
// without launcher variables (a single process) or without devices.
int local_device_index(int device_count);

}  // namespace chorus
