#include "netns_hosts.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace chorus::testing {
namespace {

constexpr const char* kPrefix = "chx";
constexpr const char* kNetnsDir = "/var/run/netns";

// Runs a shell command quietly; returns its exit status.
int sh(const std::string& cmd) {
  const int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string capture(const std::string& cmd) {
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    ::pclose(f);
  }
  return out;
}

// Namespaces chx<pid>... whose creating process is gone (a crashed or killed run).
void sweep_stale() {
  DIR* d = ::opendir(kNetnsDir);
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kPrefix), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  ::closedir(d);
  for (const auto& n : stale) sh("ip netns del " + n);
}

// Enters the namespace `name` (this thread); returns false on failure.
bool enter(const std::string& name) {
  const int fd = ::open((std::string(kNetnsDir) + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return ok;
}

// Makes /sys show the current network namespace's devices (UCX lists devices there), the way
// `ip netns exec` does: a private mount namespace with a fresh sysfs. For a rank process only.
bool remount_sysfs() {
  if (::unshare(CLONE_NEWNS) != 0) return false;
  if (::mount("", "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return false;
  ::umount2("/sys", MNT_DETACH);
  return ::mount("chorus-netns", "/sys", "sysfs", 0, nullptr) == 0;
}

// A listening socket on all addresses of namespace `ns` (or of this one), port chosen by the
// kernel. Sockets keep the namespace they were made in.
int listen_in(const std::string& ns, int* port) {
  const int self = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (!ns.empty() && !enter(ns)) {
    ::close(self);
    return -1;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(ns.empty() ? INADDR_LOOPBACK : INADDR_ANY);
  if (fd >= 0 && (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
                  ::listen(fd, 128) != 0)) {
    ::close(fd);
    fd = -1;
  }
  if (fd >= 0) {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    *port = ntohs(addr.sin_port);
  }
  if (!ns.empty()) ::setns(self, CLONE_NEWNET);
  ::close(self);
  return fd;
}

}  // namespace

std::optional<std::string> NetnsHosts::unavailable() {
  if (::geteuid() != 0) return "network namespaces need root (CAP_NET_ADMIN); not running as root";
  if (sh("ip -V") != 0) return "iproute2 ('ip') is not installed";
  const std::string probe = std::string(kPrefix) + std::to_string(::getpid()) + "probe";
  if (sh("ip netns add " + probe) != 0)
    return "'ip netns add' is refused here (the machine forbids network namespaces)";
  const bool veth = sh("ip -n " + probe + " link add cprobe0 type veth peer name cprobe1") == 0;
  const bool bridge = sh("ip -n " + probe + " link add cprobebr type bridge") == 0;
  sh("ip netns del " + probe);
  if (!veth) return "veth devices cannot be created here";
  if (!bridge) return "bridge devices cannot be created here";
  return std::nullopt;
}

NetnsHosts::NetnsHosts(int hosts) {
  sweep_stale();
  static int serial = 0;
  const std::string base =
      std::string(kPrefix) + std::to_string(::getpid()) + "n" + std::to_string(serial++);
  switch_ = base + "s";
  auto must = [](const std::string& cmd) {
    if (sh(cmd) != 0) throw std::runtime_error("netns fixture: '" + cmd + "' failed");
  };
  must("ip netns add " + switch_);
  must("ip -n " + switch_ + " link add br0 type bridge");
  must("ip -n " + switch_ + " link set br0 up");
  for (int h = 0; h < hosts; ++h) {
    const std::string ns = base + "h" + std::to_string(h);
    const std::string port = "p" + std::to_string(h);
    names_.push_back(ns);
    must("ip netns add " + ns);
    must("ip -n " + ns + " link set lo up");
    must("ip -n " + ns + " link add " + kDevice + " type veth peer name " + port + " netns " +
         switch_);
    must("ip -n " + ns + " addr add " + address(h) + "/24 dev " + kDevice);
    must("ip -n " + ns + " link set " + kDevice + " up");
    must("ip -n " + switch_ + " link set " + port + " master br0");
    must("ip -n " + switch_ + " link set " + port + " up");
  }
  // The bridge forwards at once (no STP); wait until host 0 answers everyone.
  for (int h = 1; h < hosts; ++h)
    for (int tries = 0; sh("ip netns exec " + names_[h] + " ping -c1 -W1 " + address(0)) != 0;
         ++tries)
      if (tries > 20) break;
}

NetnsHosts::~NetnsHosts() {
  for (const auto& ns : names_) sh("ip netns del " + ns);
  sh("ip netns del " + switch_);
}

NetnsHosts::Counters NetnsHosts::counters(int host) const {
  std::string dir = "/sys/class/net/";
  dir += kDevice;
  dir += "/statistics/";
  const std::string out =
      capture("ip netns exec " + names_[host] + " cat " + dir + "rx_bytes " + dir + "tx_bytes");
  Counters c;
  std::sscanf(out.c_str(), "%lu %lu", &c.rx, &c.tx);
  return c;
}

void run_on_hosts(const NetnsHosts* hosts, const std::vector<int>& host_of,
                  const std::function<void(Communicator&)>& body, const HostRunOptions& options) {
  const int world = static_cast<int>(host_of.size());
  int port = 0;
  const int listen_fd = listen_in(hosts ? hosts->name(0) : "", &port);
  ASSERT_GE(listen_fd, 0) << "cannot listen for the store";
  static int serial = 0;
  const std::string job = "u" + std::to_string(::getpid()) + "x" + std::to_string(serial++);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(world, -1);
  for (int r = 0; r < world; ++r) {
    const int h = host_of[r];
    int local = 0, local_n = 0;
    for (int q = 0; q < world; ++q)
      if (host_of[q] == h) (q < r ? ++local : 0), ++local_n;
    const pid_t pid = ::fork();
    if (pid != 0) {
      pids[r] = pid;
      continue;
    }
    int code = 0;
    if (hosts != nullptr && (!enter(hosts->name(h)) || !remount_sysfs())) {
      std::fprintf(stderr, "[rank %d] cannot enter namespace %s: %s\n", r, hosts->name(h).c_str(),
                   std::strerror(errno));
      _exit(3);
    }
    ::setenv("CHORUS_RANK", std::to_string(r).c_str(), 1);
    ::setenv("CHORUS_WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("CHORUS_LOCAL_RANK", std::to_string(local).c_str(), 1);
    ::setenv("CHORUS_LOCAL_WORLD_SIZE", std::to_string(local_n).c_str(), 1);
    ::setenv("CHORUS_MASTER_ADDR", hosts ? NetnsHosts::address(0).c_str() : "127.0.0.1", 1);
    ::setenv("CHORUS_MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("CHORUS_JOB_ID", job.c_str(), 1);
    ::setenv("CHORUS_HOST_ID", (job + "-host" + std::to_string(h)).c_str(), 1);
    if (hosts != nullptr) {
      ::setenv("UCX_TLS", "tcp", 1);
      ::setenv("UCX_NET_DEVICES", NetnsHosts::kDevice, 1);
    }
    for (const auto& [k, v] : options.env) ::setenv(k.c_str(), v.c_str(), 1);
    if (r == 0)
      ::setenv("CHORUS_STORE_FD", std::to_string(::dup(listen_fd)).c_str(), 1);  // dup: no CLOEXEC
    else
      ::unsetenv("CHORUS_STORE_FD");
    ::close(listen_fd);
    try {
      // This rank's assertion failures are captured here, printed and turned into the exit code.
      ::testing::TestPartResultArray failures;
      {
        ::testing::ScopedFakeTestPartResultReporter all(
            ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &failures);
        Communicator comm = Communicator::from_env();
        body(comm);
      }
      for (int i = 0; i < failures.size(); ++i) {
        const auto& f = failures.GetTestPartResult(i);
        if (!f.failed()) continue;
        std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", r,
                     f.file_name() ? f.file_name() : "?", f.line_number(), f.message());
        code = 1;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] uncaught exception: %s\n", r, e.what());
      code = 2;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);
  }
  ::close(listen_fd);

  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  std::vector<int> status(world, 0);
  for (int alive = world; alive > 0;) {
    for (int r = 0; r < world; ++r)
      if (pids[r] > 0 && ::waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
        pids[r] = -1;
        --alive;
      }
    if (alive > 0 && std::chrono::steady_clock::now() > deadline) {
      std::string hung;
      for (int r = 0; r < world; ++r)
        if (pids[r] > 0) {
          hung += " " + std::to_string(r);
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], nullptr, 0);
        }
      ADD_FAILURE() << "ranks" << hung << " still running after "
                    << options.deadline.count() / 1000.0 << " s: killed (a hang)";
      return;
    }
    if (alive > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < world; ++r) {
    if (std::find(options.may_fail.begin(), options.may_fail.end(), r) != options.may_fail.end())
      continue;
    if (WIFSIGNALED(status[r]))
      ADD_FAILURE() << "rank " << r << " died by signal " << WTERMSIG(status[r]);
    else if (WEXITSTATUS(status[r]) != 0)
      ADD_FAILURE() << "rank " << r << " failed (exit code " << WEXITSTATUS(status[r]) << ")";
  }
}

}  // namespace chorus::testing
