// startup_probe_mpi.cpp: the MPI twin of startup_probe.cc (MPI_Init, one 8-byte MPI_Allreduce,
// rank 0 prints the CLOCK_MONOTONIC time it completed, MPI_Finalize). Built by compare.py with
// each MPI's mpicxx.
#include <mpi.h>
#include <time.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  float send[2] = {1, 2};
  float recv[2] = {0, 0};
  MPI_Allreduce(send, recv, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const bool ok = recv[0] == static_cast<float>(size) && recv[1] == 2.0f * size;
  if (rank == 0)
    std::printf("first_allreduce_done_ns %lld\n",
                static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
  MPI_Finalize();
  return ok ? 0 : 1;
}
