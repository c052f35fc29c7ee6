#include "setup_store.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

#include "chorus/error.h"
#include "transport/shm/shm_transport.h"

namespace chorus {
namespace {

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot): with the pid it names one
// process, whatever pid reuse does. Empty when unreadable.
std::string start_time(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return {};
  std::istringstream rest(stat.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return field;
  }
  return {};
}

std::string pid_namespace() {
  char buf[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

// "<host id>\n<pid namespace> <pid> <start time>"
std::string process_record() {
  const pid_t pid = ::getpid();
  return detail::concat(transport::local_host_id(), "\n", pid_namespace(), " ", pid, " ",
                        start_time(pid));
}

}  // namespace

SetupStore::SetupStore(std::shared_ptr<Store> scoped, int rank, int world_size)
    : base_(std::move(scoped)), rank_(rank), world_size_(world_size) {}

SetupStore::~SetupStore() = default;

void SetupStore::announce() { base_->set("proc/" + std::to_string(rank_), process_record()); }

void SetupStore::report_failure(const std::string& what) noexcept {
  try {
    base_->set("setup_failed/" + std::to_string(rank_), what);
  } catch (...) {
    // The store is gone too: the peers learn of it from the store.
  }
}

int SetupStore::owner_of(const std::string& key) const {
  const size_t slash = key.rfind('/');
  if (slash == std::string::npos || slash + 1 == key.size()) return 0;
  int owner = 0;
  const char* end = key.data() + key.size();
  auto [ptr, ec] = std::from_chars(key.data() + slash + 1, end, owner);
  return ec == std::errc() && ptr == end ? owner : 0;
}

std::string SetupStore::why_gone(int peer, const std::string& key) {
  if (peer == rank_ || peer < 0 || peer >= world_size_) return {};
  const std::string p = std::to_string(peer);
  if (auto failed = base_->try_get("setup_failed/" + p))
    return detail::concat("rank ", peer, " failed to set up the communicator: ", *failed);
  std::lock_guard lock(mu_);
  Peer& st = peers_[peer];
  if (st.state == Peer::State::kInvisible) return {};
  bool ended = st.state == Peer::State::kEnded;
  if (st.state == Peer::State::kUnknown) {
    const auto record = base_->try_get("proc/" + p);
    if (!record) return {};  // not that far yet
    const size_t nl = record->find('\n');
    std::istringstream in(record->substr(nl == std::string::npos ? record->size() : nl + 1));
    std::string ns, started;
    long pid = 0;
    in >> ns >> pid >> started;
    st.state = Peer::State::kInvisible;
    if (nl == std::string::npos || record->substr(0, nl) != transport::local_host_id() ||
        ns != pid_namespace() || pid <= 0 || started.empty())
      return {};
    st.pid = static_cast<pid_t>(pid);
    UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, st.pid, 0)));
    if (!fd) {
      if (errno != ESRCH) return {};  // no pidfds here: cannot watch it
      ended = true;
    } else if (start_time(st.pid) != started) {
      ended = true;  // the pid names another process now: this one has ended (fd closes)
    } else {
      st.pidfd = std::move(fd);
      st.state = Peer::State::kWatched;
    }
  }
  if (!ended && st.state == Peer::State::kWatched) {
    pollfd pfd{st.pidfd.get(), POLLIN, 0};
    ended = ::poll(&pfd, 1, 0) > 0;  // a pidfd turns readable when its process ends
  }
  if (!ended) return {};
  st.state = Peer::State::kEnded;
  return detail::concat("rank ", peer, " (pid ", st.pid, ") died during set-up",
                        key.empty() ? std::string() : " before it published '" + key + "'",
                        " (it crashed or was killed; its own output says why)");
}

bool SetupStore::peer_gone(int peer) { return !why_gone(peer, {}).empty(); }

void SetupStore::check(int peer, const std::string& key) {
  const std::string why = why_gone(peer, key);
  if (!why.empty()) throw PeerFailure(why, rank_, "connect", -1, peer);
}

std::string SetupStore::get(const std::string& key, Millis timeout) {
  const int owner = owner_of(key);
  if (owner == rank_) return base_->get(key, timeout);
  const auto deadline = deadline_after(timeout);
  DeadlineScope scope(deadline + kReplyGrace);
  for (;;) {
    const auto left = std::chrono::ceil<Millis>(deadline - std::chrono::steady_clock::now());
    try {
      return base_->get(key, std::clamp(left, Millis::zero(), kSlice));
    } catch (const Timeout&) {
      if (left <= kSlice)
        throw Timeout(detail::concat("timed out after ", describe_timeout(timeout),
                                     " waiting for key '", key, "' of rank ", owner),
                      rank_, "connect", -1, owner);
    }
    check(owner, key);
  }
}

void SetupStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  const auto deadline = deadline_after(timeout);
  DeadlineScope scope(deadline + kReplyGrace);
  for (;;) {
    const auto left = std::chrono::ceil<Millis>(deadline - std::chrono::steady_clock::now());
    try {
      base_->wait(keys, std::clamp(left, Millis::zero(), kSlice));
      return;
    } catch (const Timeout&) {
    }
    std::vector<std::string> missing;
    for (const std::string& key : keys)
      if (!base_->try_get(key)) missing.push_back(key);
    if (missing.empty()) return;
    for (const std::string& key : missing) check(owner_of(key), key);
    if (left <= kSlice) {
      std::string names;
      for (size_t i = 0; i < missing.size() && i < 8; ++i)
        names += detail::concat(i == 0 ? "'" : ", '", missing[i], "'");
      if (missing.size() > 8) names += detail::concat(" and ", missing.size() - 8, " more");
      throw Timeout(detail::concat("timed out after ", describe_timeout(timeout), " waiting for ",
                                   names, " (rank ", owner_of(missing[0]), " first)"),
                    rank_, "connect", -1, owner_of(missing[0]));
    }
  }
}

}  // namespace chorus
