// chorus-startup-probe: joins the job (Communicator::from_env), runs one 8-byte all-reduce, and on
// rank 0 prints the CLOCK_MONOTONIC time at which it completed:
//   first_allreduce_done_ns <nanoseconds>
// compare.py subtracts the time at which it started the launcher (the same clock), so the
// difference is process start to first completed all-reduce, launcher included, teardown not.
// startup_probe_mpi.cpp does the same with MPI_Init + MPI_Allreduce.
#include <time.h>

#include <cstdint>
#include <cstdio>

#include "chorus/communicator.h"

int main() {
  chorus::Communicator comm = chorus::Communicator::from_env();
  float send[2] = {1, 2};
  float recv[2] = {0, 0};
  comm.all_reduce(send, recv, 2, chorus::DataType::kF32, chorus::ReduceOp::kSum);
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const bool ok = recv[0] == static_cast<float>(comm.size()) && recv[1] == 2.0f * comm.size();
  if (comm.rank() == 0)
    std::printf("first_allreduce_done_ns %lld\n",
                static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
  return ok ? 0 : 1;
}
