// A one-rank chorus job through the installed headers and libraries: without launcher variables,
// Communicator::from_env() makes a single-process communicator.
#include <chorus/communicator.h>
#include <chorus/error.h>
#include <chorus/kernels/cpu.h>

#include <cstdio>
#include <span>
#include <vector>

int main() {
  try {
    chorus::Communicator comm = chorus::Communicator::from_env();
    if (comm.rank() != 0 || comm.size() != 1) {
      std::fprintf(stderr, "consumer: expected a 1-rank job, got rank %d of %d\n", comm.rank(),
                   comm.size());
      return 1;
    }
    // One rank: a sum is the input itself; max out of place copies it.
    std::vector<float> data = {1.0f, -2.5f, 3.25f, 1024.0f};
    const std::vector<float> want = data;
    comm.all_reduce(std::span<float>(data), chorus::ReduceOp::kSum);
    std::vector<float> out(data.size(), 0.0f);
    comm.all_reduce(std::span<const float>(data), std::span<float>(out), chorus::ReduceOp::kMax);
    if (data != want || out != want) {
      std::fprintf(stderr, "consumer: all_reduce gave wrong values\n");
      return 1;
    }
    std::printf("consumer: ok (kernels: %s)\n", chorus::kernels::isa_name());
    return 0;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
