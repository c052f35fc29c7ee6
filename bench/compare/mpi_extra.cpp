// mpi_extra.cpp: the collectives ../shared/anchors/mpi_coll.cpp lacks, timed exactly as it times
// its own (its bench_common.h: calibrated blocks, the slowest rank's time per block, the same CSV
// rows): MPI_Reduce (float32, sum, root 0, out of place) and MPI_Alltoall (float32, out of
// place; the size is a rank's whole send buffer, n blocks of size / n, as nccl-tests and
// chorus-bench count it). compare.py builds it with each MPI's mpicxx (-I ../shared/anchors) and
// runs it beside the anchor.
//
// Options: -c COLL (reduce or alltoall, default reduce), -s SIZES (list, e.g. 8,1M,64M),
//          -r N timed blocks, -t SEC target seconds per block, -m N max iterations per block,
//          -o FILE CSV rows, -g TAG, -l NAME library label (default from
//          MPI_Get_library_version).
#include <mpi.h>
#include <unistd.h>

#include "bench_common.h"

using namespace bench;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  std::string coll = "reduce", sizes_arg = "all", csv, tag = "run", lib;
  Params p;
  int opt;
  while ((opt = getopt(argc, argv, "c:s:r:t:m:o:g:l:")) != -1) {
    switch (opt) {
      case 'c':
        coll = optarg;
        break;
      case 's':
        sizes_arg = optarg;
        break;
      case 'r':
        p.blocks = atoi(optarg);
        break;
      case 't':
        p.block_s = atof(optarg);
        break;
      case 'm':
        p.max_iters = atol(optarg);
        break;
      case 'o':
        csv = optarg;
        break;
      case 'g':
        tag = optarg;
        break;
      case 'l':
        lib = optarg;
        break;
      default:
        if (rank == 0)
          fprintf(stderr,
                  "usage: mpi_extra [-c reduce|alltoall] [-s SIZES] [-r N] [-t SEC] [-m N] "
                  "[-o FILE] [-g TAG]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (coll != "reduce" && coll != "alltoall") {
    if (rank == 0) fprintf(stderr, "mpi_extra: -c %s: reduce or alltoall\n", coll.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const bool alltoall = coll == "alltoall";
  char ver[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen;
  MPI_Get_library_version(ver, &vlen);
  const std::string verline(ver, strcspn(ver, ",\n"));
  if (lib.empty()) lib = verline.find("Open MPI") != std::string::npos ? "openmpi" : "mpich";
  const std::vector<size_t> sizes = parse_sizes(sizes_arg);
  const size_t maxcount = std::max<size_t>(
      *std::max_element(sizes.begin(), sizes.end()) / sizeof(float) + 1, static_cast<size_t>(n));
  std::vector<float> sendbuf(maxcount), recvbuf(maxcount);

  auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  auto maxr = [](double x) {
    double y;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
  };
  if (rank == 0) {
    std::string title = lib + " " + coll + " np=" + std::to_string(n) + " (default)";
    print_header(title.c_str());
  }
  for (size_t bytes : sizes) {
    Result r;
    r.lib = lib;
    r.variant = "default";
    r.coll = coll;
    r.np = n;
    // alltoall: n blocks of `block` floats, rounded down like chorus-bench's total sizes.
    const size_t block = std::max<size_t>(1, bytes / sizeof(float) / n);
    const size_t count = alltoall ? block * n : std::max<size_t>(1, bytes / sizeof(float));
    r.bytes = count * sizeof(float);
    for (size_t i = 0; i < count; i++) sendbuf[i] = val(rank, i);
    auto op = [&] {
      if (alltoall)
        MPI_Alltoall(sendbuf.data(), (int)block, MPI_FLOAT, recvbuf.data(), (int)block, MPI_FLOAT,
                     MPI_COMM_WORLD);
      else
        MPI_Reduce(sendbuf.data(), recvbuf.data(), (int)count, MPI_FLOAT, MPI_SUM, 0,
                   MPI_COMM_WORLD);
    };
    op();
    bool ok = true;
    if (alltoall) {
      // Block q of the result is rank q's block `rank`.
      for (size_t i = 0; i < count && ok; i++) {
        const int q = static_cast<int>(i / block);
        ok = recvbuf[i] == val(q, rank * block + i % block);
      }
    } else if (rank == 0) {
      for (size_t i = 0; i < count && ok; i++) {
        float e = 0;
        for (int q = 0; q < n; q++) e += val(q, i);
        ok = recvbuf[i] == e;
      }
    }
    int okl = ok, oka;
    MPI_Allreduce(&okl, &oka, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    r.ok = oka;
    time_op(op, barrier, maxr, p, r);
    if (rank == 0) report(r, csv.c_str(), tag);
  }
  MPI_Finalize();
  return 0;
}
