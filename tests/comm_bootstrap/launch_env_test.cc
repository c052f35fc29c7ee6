// detect_launch_env against map-backed environments: every launcher, precedence, every error.
#include <gtest/gtest.h>

#include <map>

#include "chorus/error.h"
#include "chorus/launch_env.h"

namespace chorus {
namespace {

using Vars = std::map<std::string, std::string>;

LaunchEnv detect(const Vars& vars) {
  return detect_launch_env([&](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// The InvalidArgument message detection gives for `vars` (fails the test if none is thrown).
std::string error_of(const Vars& vars) {
  try {
    detect(vars);
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  ADD_FAILURE() << "no InvalidArgument thrown";
  return {};
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

const Vars kTorchrun{{"RANK", "5"},
                     {"WORLD_SIZE", "8"},
                     {"LOCAL_RANK", "1"},
                     {"LOCAL_WORLD_SIZE", "4"},
                     {"MASTER_ADDR", "node0"},
                     {"MASTER_PORT", "1234"}};
const Vars kSlurm{{"SLURM_PROCID", "6"},
                  {"SLURM_NTASKS", "8"},
                  {"SLURM_LOCALID", "2"},
                  {"SLURM_NTASKS_PER_NODE", "4"},
                  {"SLURM_NODEID", "1"}};
const Vars kOpenMpi{{"OMPI_COMM_WORLD_RANK", "3"},
                    {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};

Vars with(Vars base, const Vars& extra) {
  for (const auto& [k, v] : extra) base[k] = v;
  return base;
}
Vars without(Vars base, const std::string& name) {
  base.erase(name);
  return base;
}

TEST(LaunchEnv, NoLauncherIsASingleProcessJob) {
  LaunchEnv env = detect({});
  EXPECT_EQ(env.launcher, "none");
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_FALSE(env.store_fd.has_value());
  EXPECT_EQ(env.job_id, "");
}

TEST(LaunchEnv, Chorus) {
  LaunchEnv env = detect({{"CHORUS_RANK", "2"},
                          {"CHORUS_WORLD_SIZE", "4"},
                          {"CHORUS_LOCAL_RANK", "0"},
                          {"CHORUS_LOCAL_WORLD_SIZE", "2"},
                          {"CHORUS_MASTER_ADDR", "10.0.0.1"},
                          {"CHORUS_MASTER_PORT", "4000"},
                          {"CHORUS_STORE_FD", "3"},
                          {"CHORUS_JOB_ID", "job_42-a"}});
  EXPECT_EQ(env.launcher, "chorus");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 4000);
  EXPECT_EQ(env.store_fd, 3);
  EXPECT_EQ(env.job_id, "job_42-a");
}

TEST(LaunchEnv, ChorusWithoutLocalVariablesIsOneHost) {
  LaunchEnv env = detect({{"CHORUS_RANK", "3"}, {"CHORUS_WORLD_SIZE", "4"}});
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, Torchrun) {
  LaunchEnv env = detect(kTorchrun);
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 1234);
}

TEST(LaunchEnv, ChorusMasterVariablesWinOverTorchrunOnes) {
  LaunchEnv env =
      detect(with(kTorchrun, {{"CHORUS_MASTER_ADDR", "node7"}, {"CHORUS_MASTER_PORT", "0"}}));
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.master_addr, "node7");
  EXPECT_EQ(env.master_port, 0);
}

TEST(LaunchEnv, Slurm) {
  LaunchEnv env = detect(with(kSlurm, {{"MASTER_ADDR", "node0"}}));
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 6);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, SlurmTasksPerNode) {
  Vars base = without(with(kSlurm, {{"CHORUS_MASTER_ADDR", "n0"}}), "SLURM_NTASKS_PER_NODE");
  // Uniform list: no node id needed.
  EXPECT_EQ(detect(with(without(base, "SLURM_NODEID"), {{"SLURM_TASKS_PER_NODE", "4(x2)"}}))
                .local_world_size,
            4);
  // -n 8 spread 3,3,2: the node id picks this node's count, even when NTASKS_PER_NODE is set.
  Vars uneven = with(base, {{"SLURM_TASKS_PER_NODE", "3(x2),2"},
                            {"SLURM_PROCID", "7"},
                            {"SLURM_LOCALID", "1"},
                            {"SLURM_NODEID", "2"}});
  EXPECT_EQ(detect(uneven).local_world_size, 2);
  EXPECT_EQ(detect(with(uneven, {{"SLURM_NTASKS_PER_NODE", "3"}})).local_world_size, 2);
  EXPECT_EQ(detect(with(uneven, {{"SLURM_NODEID", "0"}, {"SLURM_LOCALID", "2"}})).local_world_size,
            3);

  EXPECT_CONTAINS(error_of(with(uneven, {{"SLURM_NODEID", "3"}})), "SLURM_NODEID='3'");
  EXPECT_CONTAINS(error_of(without(uneven, "SLURM_NODEID")), "SLURM_NODEID is not set");
  for (const char* bad : {"4(x", "4(x)", "(x2)", "4,,2", "0", "x", "4(x0)", "4(y2)"}) {
    EXPECT_CONTAINS(error_of(with(base, {{"SLURM_TASKS_PER_NODE", bad}})), "SLURM_TASKS_PER_NODE");
  }
  EXPECT_CONTAINS(error_of(without(base, "SLURM_NTASKS_PER_NODE")), "SLURM_TASKS_PER_NODE");
}

TEST(LaunchEnv, SlurmOnOneHostDefaultsTheMaster) {
  LaunchEnv env = detect({{"SLURM_PROCID", "1"},
                          {"SLURM_NTASKS", "4"},
                          {"SLURM_LOCALID", "1"},
                          {"SLURM_TASKS_PER_NODE", "4"}});
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, SlurmMissingVariables) {
  EXPECT_CONTAINS(error_of(without(kSlurm, "SLURM_NTASKS")), "SLURM_NTASKS");
  EXPECT_CONTAINS(error_of(without(kSlurm, "SLURM_LOCALID")), "SLURM_LOCALID");
  std::string multi_host = error_of(kSlurm);  // 8 tasks, 4 per node, no master given
  EXPECT_CONTAINS(multi_host, "CHORUS_MASTER_ADDR");
  EXPECT_CONTAINS(multi_host, "first host of the job");
  EXPECT_CONTAINS(multi_host, "scontrol show hostnames");
}

TEST(LaunchEnv, OpenMpi) {
  LaunchEnv env = detect(kOpenMpi);
  EXPECT_EQ(env.launcher, "openmpi");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);

  Vars two_hosts = with(kOpenMpi, {{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "7"}});
  EXPECT_CONTAINS(error_of(two_hosts), "set CHORUS_MASTER_ADDR (e.g. to the first host of the job");
  env = detect(
      with(two_hosts, {{"MASTER_ADDR", "a"}, {"CHORUS_MASTER_ADDR", "b"}, {"MASTER_PORT", "1"}}));
  EXPECT_EQ(env.master_addr, "b");
  EXPECT_EQ(env.master_port, 1);
  EXPECT_CONTAINS(error_of(without(kOpenMpi, "OMPI_COMM_WORLD_SIZE")), "OMPI_COMM_WORLD_SIZE");
  EXPECT_CONTAINS(error_of(without(kOpenMpi, "OMPI_COMM_WORLD_LOCAL_SIZE")),
                  "OMPI_COMM_WORLD_LOCAL_SIZE");
}

TEST(LaunchEnv, Precedence) {
  Vars chorus{{"CHORUS_RANK", "0"}, {"CHORUS_WORLD_SIZE", "2"}};
  EXPECT_EQ(detect(with(with(with(chorus, kTorchrun), kSlurm), kOpenMpi)).launcher, "chorus");
  EXPECT_EQ(detect(with(with(kTorchrun, kSlurm), kOpenMpi)).launcher, "torchrun");
  // mpirun inside a Slurm allocation: the ranks inherit the srun-started daemon's SLURM_PROCID.
  EXPECT_EQ(detect(with(kSlurm, kOpenMpi)).launcher, "openmpi");
  // An empty variable counts as unset.
  EXPECT_EQ(detect(with(kTorchrun, {{"CHORUS_RANK", ""}})).launcher, "torchrun");
  // A lone WORLD_SIZE is not a torchrun job.
  EXPECT_EQ(detect({{"WORLD_SIZE", "4"}}).launcher, "none");
}

TEST(LaunchEnv, ChorusAndJobVariablesAreReadUnderEveryLauncher) {
  for (const Vars& launcher : {Vars{}, kTorchrun, with(kSlurm, {{"MASTER_ADDR", "n"}}), kOpenMpi}) {
    LaunchEnv env = detect(with(launcher, {{"CHORUS_STORE_FD", "7"}, {"CHORUS_JOB_ID", "J1"}}));
    EXPECT_EQ(env.store_fd, 7) << env.launcher;
    EXPECT_EQ(env.job_id, "J1") << env.launcher;
    EXPECT_CONTAINS(error_of(with(launcher, {{"CHORUS_STORE_FD", "x"}})), "CHORUS_STORE_FD='x'");
    EXPECT_CONTAINS(error_of(with(launcher, {{"CHORUS_JOB_ID", "a/b"}})), "CHORUS_JOB_ID='a/b'");
  }
}

TEST(LaunchEnv, PartialChorusVariables) {
  EXPECT_CONTAINS(error_of({{"CHORUS_RANK", "0"}}), "CHORUS_WORLD_SIZE is not");
  EXPECT_CONTAINS(error_of({{"CHORUS_WORLD_SIZE", "2"}}), "CHORUS_RANK is not");
  Vars global{{"CHORUS_RANK", "0"}, {"CHORUS_WORLD_SIZE", "2"}};
  EXPECT_CONTAINS(error_of(with(global, {{"CHORUS_LOCAL_RANK", "0"}})),
                  "CHORUS_LOCAL_WORLD_SIZE is not");
  EXPECT_CONTAINS(error_of(with(global, {{"CHORUS_LOCAL_WORLD_SIZE", "2"}})),
                  "CHORUS_LOCAL_RANK is not");
  EXPECT_CONTAINS(error_of(without(kTorchrun, "WORLD_SIZE")), "WORLD_SIZE is not");
}

TEST(LaunchEnv, MalformedValuesNameTheVariableAndValue) {
  struct Case {
    std::string var, value, expected;
  };
  const Case cases[] = {
      {"RANK", "abc", "RANK='abc' is not an integer"},
      {"RANK", "1.5", "RANK='1.5' is not an integer"},
      {"RANK", " 3", "RANK=' 3' is not an integer"},
      {"RANK", "3 ", "RANK='3 ' is not an integer"},
      {"RANK", "-1", "RANK='-1' is negative"},
      {"RANK", "99999999999", "RANK='99999999999' is out of range"},
      {"RANK", "8", "RANK='8' is not below WORLD_SIZE='8'"},
      {"WORLD_SIZE", "0", "WORLD_SIZE='0' must be at least 1"},
      {"WORLD_SIZE", "x", "WORLD_SIZE='x'"},
      {"LOCAL_RANK", "4", "LOCAL_RANK='4' is not below LOCAL_WORLD_SIZE='4'"},
      {"LOCAL_RANK", "-2", "LOCAL_RANK='-2' is negative"},
      {"LOCAL_WORLD_SIZE", "0", "LOCAL_WORLD_SIZE='0' must be at least 1"},
      {"LOCAL_WORLD_SIZE", "16", "LOCAL_WORLD_SIZE='16' exceeds WORLD_SIZE='8'"},
      {"MASTER_PORT", "65536", "MASTER_PORT='65536' is out of range"},
      {"MASTER_PORT", "http", "MASTER_PORT='http' is not an integer"},
      {"MASTER_PORT", "-80", "MASTER_PORT='-80' is negative"},
      {"CHORUS_MASTER_PORT", "70000", "CHORUS_MASTER_PORT='70000' is out of range"},
      {"CHORUS_STORE_FD", "-1", "CHORUS_STORE_FD='-1' is negative"},
      {"CHORUS_JOB_ID", "job id", "CHORUS_JOB_ID='job id'"},
      {"CHORUS_JOB_ID", std::string(65, 'j'), "at most 64 characters"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.var + "=" + c.value);
    EXPECT_CONTAINS(error_of(with(kTorchrun, {{c.var, c.value}})), c.expected);
  }
  EXPECT_CONTAINS(error_of(with(kSlurm, {{"SLURM_LOCALID", "4"}, {"MASTER_ADDR", "n"}})),
                  "SLURM_LOCALID='4' is not below SLURM_NTASKS_PER_NODE='4'");
  EXPECT_CONTAINS(error_of(with(kOpenMpi, {{"OMPI_COMM_WORLD_RANK", "4"}})),
                  "OMPI_COMM_WORLD_RANK='4' is not below OMPI_COMM_WORLD_SIZE='4'");
}

// A world size no job has is refused before anything is sized by it, naming the variable.
TEST(LaunchEnv, AbsurdWorldSizeNamesTheVariableAndTheLimit) {
  EXPECT_CONTAINS(error_of({{"CHORUS_RANK", "0"}, {"CHORUS_WORLD_SIZE", "2147483647"}}),
                  "CHORUS_WORLD_SIZE='2147483647' is more ranks than chorus supports (at most " +
                      std::to_string(kMaxWorldSize) + ")");
  EXPECT_CONTAINS(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2000000"}}), "WORLD_SIZE='2000000'");
  EXPECT_CONTAINS(error_of({{"CHORUS_RANK", "0"}, {"CHORUS_WORLD_SIZE", "99999999999"}}),
                  "CHORUS_WORLD_SIZE='99999999999' is out of range");
  EXPECT_EQ(detect({{"CHORUS_RANK", "0"},
                    {"CHORUS_WORLD_SIZE", std::to_string(kMaxWorldSize)},
                    {"CHORUS_LOCAL_RANK", "0"},
                    {"CHORUS_LOCAL_WORLD_SIZE", "1"},
                    {"CHORUS_MASTER_ADDR", "h"}})
                .world_size,
            kMaxWorldSize);
}

}  // namespace
}  // namespace chorus
