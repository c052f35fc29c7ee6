// comm_probe: a chorus rank for chorus-run's tests of whole jobs. It runs its arguments as a list
// of actions, in order, then exits 0. A chorus::Error destroys the communicator (as a trainer's
// unwinding would) and ends it with code 1 after one line on stderr,
// "comm_probe <r>: <error> (after <s> s; teardown <t> s)". Actions (R: on that rank only):
//   init            make the communicator (Communicator::from_env)
//   fini            destroy it
//   all-reduce N    N all-reduces of one float, each checked
//   loop            all-reduces until one fails
//   ready           print "ready <r> <pid>"
//   delay R MS      sleep MS milliseconds
//   stop R          stop this process (SIGSTOP)
//   kill R          kill this process (SIGKILL)
//   kill-after R MS kill this process MS milliseconds from now, whatever it does then
//   mesh D T P      make a dp x tp x pp device mesh of the communicator (rank order)
//   mesh-steps N    N steps of traffic on the mesh: an all-reduce over tp, one value passed
//                   down the pipeline (stage s receives from s-1, sends to s+1), one all-reduce
//                   over dp
//   mesh-loop       mesh steps until one fails

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "chorus/communicator.h"
#include "chorus/parallel/mesh.h"

namespace {

using Clock = std::chrono::steady_clock;

int g_rank = -1;
const Clock::time_point g_start = Clock::now();

// `failed`: when the error came (its time is reported), if not now.
[[noreturn]] void fail(const std::string& why, Clock::time_point failed = Clock::now()) {
  std::fprintf(stderr, "comm_probe %d: %s (after %.2f s; teardown %.2f s)\n", g_rank, why.c_str(),
               std::chrono::duration<double>(failed - g_start).count(),
               std::chrono::duration<double>(Clock::now() - failed).count());
  std::exit(1);
}

void all_reduce(chorus::Communicator& comm) {
  float v = 1;
  comm.all_reduce(&v, &v, 1, chorus::DataType::kF32, chorus::ReduceOp::kSum);
  if (v != static_cast<float>(comm.size())) fail("wrong all-reduce result " + std::to_string(v));
}

// One step of a training-like pattern over every axis of the mesh.
void mesh_step(chorus::parallel::DeviceMesh& mesh) {
  all_reduce(mesh.tp());
  chorus::Communicator& pp = mesh.pp();
  float v = 1;
  if (pp.rank() > 0) pp.recv(&v, 1, chorus::DataType::kF32, pp.rank() - 1);
  if (pp.rank() + 1 < pp.size()) pp.send(&v, 1, chorus::DataType::kF32, pp.rank() + 1);
  all_reduce(mesh.dp());
}

}  // namespace

int main(int argc, char** argv) {
  const char* rank_text = std::getenv("CHORUS_RANK");
  g_rank = rank_text != nullptr ? std::atoi(rank_text) : -1;
  auto arg = [&](int i) -> std::string {
    if (i >= argc) fail("missing argument after " + std::string(argv[i - 1]));
    return argv[i];
  };
  auto number = [&](int i) { return std::atoi(arg(i).c_str()); };
  std::optional<chorus::Communicator> comm;
  std::optional<chorus::parallel::DeviceMesh> mesh;  // over *comm
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view action = argv[i];
      if (action == "init") {
        comm.emplace(chorus::Communicator::from_env());
      } else if (action == "fini") {
        mesh.reset();
        comm.reset();
      } else if (action == "mesh") {
        const int dp = number(++i), tp = number(++i), pp = number(++i);
        mesh.emplace(comm.value(), chorus::parallel::MeshShape{.dp = dp, .tp = tp, .pp = pp},
                     chorus::parallel::MeshOptions{
                         .placement = chorus::parallel::MeshOptions::Placement::kRankOrder});
      } else if (action == "mesh-steps") {
        for (int n = number(++i); n > 0; --n) mesh_step(mesh.value());
      } else if (action == "mesh-loop") {
        for (;;) mesh_step(mesh.value());
      } else if (action == "all-reduce") {
        for (int n = number(++i); n > 0; --n) all_reduce(comm.value());
      } else if (action == "loop") {
        for (;;) all_reduce(comm.value());
      } else if (action == "ready") {
        std::printf("ready %d %d\n", g_rank, static_cast<int>(::getpid()));
        std::fflush(stdout);
      } else if (action == "delay") {
        const int rank = number(++i);
        const int ms = number(++i);
        if (rank == g_rank) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      } else if (action == "stop" || action == "kill") {
        if (number(++i) == g_rank) ::kill(::getpid(), action == "stop" ? SIGSTOP : SIGKILL);
      } else if (action == "kill-after") {
        const int rank = number(++i);
        const int ms = number(++i);
        if (rank == g_rank)
          std::thread([ms] {
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
            ::kill(::getpid(), SIGKILL);
          }).detach();
      } else {
        fail("unknown action '" + std::string(action) + "'");
      }
    }
  } catch (const chorus::Error& e) {
    const std::string what = e.what();
    const auto failed = Clock::now();
    mesh.reset();
    comm.reset();
    fail(what, failed);
  }
  return 0;
}
