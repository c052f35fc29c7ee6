#include "job_id.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "chorus/config.h"
#include "chorus/error.h"

namespace chorus::run {
namespace {

const StringKnob kJobId{"CHORUS_JOB_ID", "",
                        "job id naming the job's shm segments; chorus-run makes a random one "
                        "when unset (multi-node jobs must set the same one on every node)"};

constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
constexpr size_t kRandomLength = 12;
constexpr size_t kMaxLength = 64;

}  // namespace

bool is_valid_job_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxLength) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

std::string random_job_id() {
  // Bytes at or above the largest multiple of the alphabet size are redrawn, so every character
  // is equally likely.
  constexpr unsigned kLimit = 256 - 256 % kAlphabet.size();
  std::string id;
  while (id.size() < kRandomLength) {
    std::array<uint8_t, 32> bytes;
    ssize_t n = ::getrandom(bytes.data(), bytes.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_system_error("getrandom", errno);
    }
    for (ssize_t i = 0; i < n && id.size() < kRandomLength; ++i)
      if (bytes[i] < kLimit) id += kAlphabet[bytes[i] % kAlphabet.size()];
  }
  return id;
}

std::string resolve_job_id(int nnodes) {
  auto id = kJobId.get_if_set();
  CHORUS_ARG_CHECK(id || nnodes == 1, "a job of ", nnodes,
                   " nodes needs CHORUS_JOB_ID set to the same value on every node");
  if (!id) return random_job_id();
  CHORUS_ARG_CHECK(is_valid_job_id(*id), "CHORUS_JOB_ID='", *id,
                   "' is not a valid job id (letters, digits, '_' and '-'; at most ", kMaxLength,
                   ")");
  return *id;
}

UniqueFd claim_job_id(const std::string& id, int node_rank) {
  const std::string name = detail::concat("chorus-run/", id, "/node", node_rank);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, the name, no terminator.
  CHORUS_CHECK_LT(name.size() + 1, sizeof addr.sun_path);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  UniqueFd fd(CHORUS_SYSCALL(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
    CHORUS_SYSCALL(::listen(fd.get(), 1));
    return fd;
  }
  if (errno != EADDRINUSE) throw_system_error("bind of the job id's socket " + name, errno);
  // Who holds it: a connection to a listening socket reports the listener's credentials.
  std::string holder = "another chorus-run";
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  ucred cred{};
  socklen_t cred_len = sizeof cred;
  if (probe && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0 &&
      ::getsockopt(probe.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0)
    holder = detail::concat("chorus-run pid ", cred.pid);
  throw InvalidArgument(detail::concat(
      "CHORUS_JOB_ID='", id, "' is in use on this host by ", holder, " (node rank ", node_rank,
      "): two jobs with one id would share shared-memory segment names (/dev/shm/chorus-", id,
      "-*); give each job its own CHORUS_JOB_ID, or leave it unset for a fresh one"));
}

}  // namespace chorus::run
