#include "bootstrap/process_server.h"

#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "chorus/store.h"

namespace chorus::bootstrap {
namespace {

// The servers this process runs, by endpoint. One of the few process-wide objects in chorus:
// what it holds (an inherited socket, a bound port) belongs to the process too. Destroyed at
// exit, which stops the servers. A forked child inherits the map but not the server threads: it
// forgets them without touching them.
class Servers {
 public:
  ~Servers() {
    if (owner_ != ::getpid())
      for (auto& [endpoint, server] : servers_) (void)server.release();
  }

  void serve(const LaunchEnv& env) {
    std::lock_guard lock(mu_);
    if (owner_ != ::getpid()) {
      for (auto& [endpoint, server] : servers_) (void)server.release();
      servers_.clear();
      owner_ = ::getpid();
    }
    const std::string endpoint = env.store_fd
                                     ? "fd " + std::to_string(*env.store_fd)
                                     : env.master_addr + ":" + std::to_string(env.master_port);
    if (servers_.contains(endpoint)) return;
    servers_[endpoint] = env.store_fd
                             ? TcpStoreServer::adopt(*env.store_fd)
                             : std::make_unique<TcpStoreServer>(env.master_addr, env.master_port);
  }

 private:
  std::mutex mu_;
  pid_t owner_ = ::getpid();
  std::map<std::string, std::unique_ptr<TcpStoreServer>> servers_;  // guarded by mu_
};

}  // namespace

void serve_for_process(const LaunchEnv& env) {
  static Servers servers;
  servers.serve(env);
}

}  // namespace chorus::bootstrap
